"""A dead letter is in exactly one place whenever the broker dies (issue 30, item 4).

A real ``nsqd`` process on a data path takes a message through three deliveries
and REQs on a channel with ``max_attempts=3``, and is killed with SIGKILL around
the move to ``<topic>.dead``: at a named crash point (``TRIONSQ_CRASH_AT``, the
process kills itself at the Nth pass of the point) or a few milliseconds after the
third REQ. A broker opened on that data path then finds the message exactly
once: in the channel (a kill before the move began), or in ``<topic>.dead``, an ext
topic, with its ``##dead_*`` headers. docs/storage.md "Dead letters".
"""

from __future__ import annotations

import os
import shutil
import signal
from typing import TYPE_CHECKING

import httpx
import orjson
import trio

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol import IdentifyRequest, Pub, Rdy, Req, Sub
from trionsq.protocol.client import ErrorReply, encode_identify
from trionsq.testing import ProtocolClient

from ..integration.raw import next_frame, next_message, ok, publish
from .test_crash_recovery import start_listening

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.nursery_tree import BoundAddresses

TIMED_KILLS = (0.005, 0.01, 0.02, 0.04, 0.07, 0.1, 0.15, 0.2, 1.5)
"""Seconds after the third REQ (the repro of issue 30: 5-200 ms; and once the
persister has written everything)."""
CRASH_POINTS = (
    "journal.delivered:1",  # the first delivery's count journaled, its frame not sent
    "journal.delivered:2",
    "journal.delivered:3",  # counted 3: the restart puts it back at its bound
    "dead_letter.noticed:1",  # the third REQ took it out of the channel
    "dead_letter.topic_saved:1",  # <topic>.dead is in metadata.json
    "dead_letter.journaled:1",  # the move is in the channel's journal
    "dead_letter.appended:1",  # in <topic>.dead, still held by the channel's state
    "dead_letter.released:1",  # let go by the channel, in memory
    "journal.checkpoint:1",  # the persister took the channel's state
    "storage.dead_letters_synced:1",  # <topic>.dead fsynced, the state not yet written
    "storage.persisted:1",  # the state written
)
"""Named crash points (``point:pass``), each one round."""
PARALLEL_ROUNDS = 4
"""Rounds at once, each a broker process of its own on its own data path."""


async def start_nsqd(data_path: Path, crash_at: str = "") -> tuple[trio.Process, int, int]:
    """A real ``nsqd`` on ``data_path``; its TCP and HTTP ports once both listen."""
    env = dict(os.environ)
    env.pop("TRIONSQ_CRASH_AT", None)
    if crash_at:
        env["TRIONSQ_CRASH_AT"] = crash_at
    process, ports = await start_listening(data_path, "-http-address=127.0.0.1:0", env=env)
    return process, ports["TCP"], ports["HTTP"]


async def set_up(data_path: Path, topics: list[str]) -> None:
    """Each topic with one message and channel ``c`` bounded at 3 (``/channel/dead_letter``),
    written by a broker that stops cleanly, so every round starts from disk."""
    config = NsqdConfig.loopback(data_path=str(data_path))
    async with trio.open_nursery() as nursery:
        addresses: BoundAddresses = await nursery.start(serve_nsqd, config)
        assert addresses.http is not None
        producer = await ProtocolClient.connect(addresses.tcp)
        async with (
            producer.stream,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{addresses.http[1]}") as web,
        ):
            for topic in topics:
                assert (await web.post(f"/topic/create?topic={topic}")).status_code == 200
                bound = f"/channel/dead_letter?topic={topic}&channel=c&max_attempts=3"
                assert (await web.post(bound)).status_code == 200
                await publish(producer, Pub(topic, b"poison"))
        nursery.cancel_scope.cancel()


async def three_deliveries(topic: str, tcp: int, sent: trio.Event) -> None:
    """The message delivered and REQ'd three times (``sent`` is set after the third
    REQ); then the connection stays until the broker dies, which may be sooner."""
    client = await ProtocolClient.connect(("127.0.0.1", tcp))
    async with client.stream:
        try:
            await client.send(Sub(topic, "c"), Rdy(1))
            assert ok(await next_frame(client))
            for attempt in (1, 2, 3):
                message = await next_message(client)
                assert (message.body, message.attempts) == (b"poison", attempt)
                await client.send(Req(message.id, 0))
            sent.set()
            await trio.sleep_forever()
        except (AssertionError, OSError, trio.BrokenResourceError):
            return  # killed at a crash point: the round's check tells the rest


async def round_killed(data_path: Path, topic: str, *, crash_at: str = "", after: float = 0) -> str:
    """One round: three deliveries of the topic's message, then the kill; how it died."""
    process, tcp, _ = await start_nsqd(data_path, crash_at)
    sent = trio.Event()
    try:
        with trio.move_on_after(10) as waited:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(three_deliveries, topic, tcp, sent)
                if crash_at:
                    await process.wait()  # it kills itself at the point
                else:
                    await sent.wait()
                    await trio.sleep(after)
                nursery.cancel_scope.cancel()
        assert not waited.cancelled_caught, f"{crash_at}: never reached in 10 s"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGKILL)
        await process.wait()
    assert process.returncode == -signal.SIGKILL, f"{crash_at or after}: not killed"
    return crash_at or f"{after * 1000:g} ms after the third REQ"


async def where_is_it(
    addresses: BoundAddresses, topic: str
) -> tuple[int, list[dict[str, str]] | None]:
    """(copies in the channel, headers of each copy in ``<topic>.dead``; None when
    that topic came back as a plain topic)."""
    assert addresses.http is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{addresses.http[1]}") as web:
        stats = (await web.get("/stats?format=json")).json()
    topics = {t["topic_name"]: t for t in stats["topics"]}
    (channel,) = topics[topic]["channels"]
    in_channel = channel["depth"] + channel["in_flight_count"] + channel["deferred_count"]
    dead_count = topics[f"{topic}.dead"]["depth"] if f"{topic}.dead" in topics else 0
    if not dead_count:
        return in_channel, []
    reader = await ProtocolClient.connect(addresses.tcp)
    async with reader.stream:
        await reader.stream.send_all(encode_identify(IdentifyRequest(extend_support=True)))
        assert ok(await next_frame(reader))
        await reader.send(Sub(f"{topic}.dead", "audit"))
        if isinstance(await next_frame(reader), ErrorReply):  # E_SUB_EXTEND_FORBIDDON
            return in_channel, None
        reader.decoder.extended = True
        await reader.send(Rdy(dead_count))
        dead = [await next_message(reader) for _ in range(dead_count)]
    assert all(message.body == b"poison" for message in dead)
    return in_channel, [orjson.loads(message.ext or b"{}") for message in dead]


async def test_a_dead_letter_is_in_one_place_whenever_the_broker_is_killed(
    tmp_path: Path,
) -> None:
    """Each round on its own copy of one prepared data path, a few at a time (most of
    a round is waiting: for a broker to start, for its persister's second)."""
    rounds: list[dict[str, str | float]] = [{"crash_at": point} for point in CRASH_POINTS]
    rounds += [{"after": after} for after in TIMED_KILLS]
    await set_up(tmp_path / "prepared", ["t"])
    paths = [tmp_path / f"round{number}" for number in range(len(rounds))]
    for path in paths:
        shutil.copytree(tmp_path / "prepared", path)
    killed: dict[Path, str] = {}
    limit = trio.CapacityLimiter(PARALLEL_ROUNDS)

    async def one_round(path: Path, kill: dict[str, str | float]) -> None:
        async with limit:
            killed[path] = await round_killed(path, "t", **kill)  # type: ignore[arg-type]

    async with trio.open_nursery() as nursery:
        for path, kill in zip(paths, rounds, strict=True):
            nursery.start_soon(one_round, path, kill)
    failures: list[str] = []
    for path in paths:
        async with trio.open_nursery() as nursery:
            config = NsqdConfig.loopback(data_path=str(path))
            addresses: BoundAddresses = await nursery.start(serve_nsqd, config)
            in_channel, dead = await where_is_it(addresses, "t")
            nursery.cancel_scope.cancel()
        how = killed[path]
        if dead is None:
            failures.append(
                f"{how}: t.dead came back as a plain topic ({in_channel} in the channel)"
            )
        elif in_channel + len(dead) != 1:
            failures.append(f"{how}: {in_channel} in the channel, {len(dead)} in t.dead")
        elif dead and dead[0].get("##dead_attempts") != "3":
            failures.append(f"{how}: dead letter without its headers: {dead[0]}")
    assert not failures, "\n".join(failures)
