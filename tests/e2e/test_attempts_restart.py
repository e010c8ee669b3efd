"""Attempt counts survive a restart (issue 30, item 5): a real ``nsqd`` process,
stopped with SIGTERM or killed with SIGKILL while a consumer holds a message, comes
back counting that message's deliveries on, so ``max_attempts`` holds across the
restart and the ``attempts`` field of the message frame goes on as nsqd's clients
expect. docs/storage.md "Channel state files" and "Delivery journals"."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import httpx
import orjson
import trio

from trionsq.broker.metadata import load_metadata
from trionsq.protocol import IdentifyRequest, Pub, Rdy, Req, Sub
from trionsq.protocol.client import MessageFrame, encode_identify
from trionsq.testing import ProtocolClient, wait_until

from ..integration.raw import next_frame, next_message, ok, publish, quiet
from .test_dead_letter_crash import start_nsqd

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.protocol.message import Message


async def consume(tcp: int, topic: str, channel: str) -> ProtocolClient:
    client = await ProtocolClient.connect(("127.0.0.1", tcp))
    await client.send(Sub(topic, channel), Rdy(1))
    assert ok(await next_frame(client))
    return client


async def deliveries(client: ProtocolClient, count: int) -> list[Message]:
    """``count`` deliveries of the same message, each REQ'd but the last (held)."""
    received = []
    for number in range(count):
        message = await next_message(client)
        received.append(message)
        if number < count - 1:
            await client.send(Req(message.id, 0))
    return received


async def dead_letters(tcp: int, topic: str) -> list[dict[str, str]]:
    reader = await ProtocolClient.connect(("127.0.0.1", tcp))
    async with reader.stream:
        await reader.stream.send_all(encode_identify(IdentifyRequest(extend_support=True)))
        assert ok(await next_frame(reader))
        await reader.send(Sub(f"{topic}.dead", "audit"))
        assert ok(await next_frame(reader))
        reader.decoder.extended = True
        await reader.send(Rdy(10))
        frames = await quiet(reader, 0.3)
    return [orjson.loads(f.message.ext or b"{}") for f in frames if isinstance(f, MessageFrame)]


async def prepared(data_path: Path) -> tuple[trio.Process, int]:
    """A broker with topic ``t``: channel ``bounded`` (max_attempts=3) and channel
    ``plain`` (no bound), one message published."""
    process, tcp, http = await start_nsqd(data_path)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http}") as web:
        await web.post("/topic/create?topic=t")
        await web.post("/channel/create?topic=t&channel=plain")
        answer = await web.post("/channel/dead_letter?topic=t&channel=bounded&max_attempts=3")
        assert answer.status_code == 200
    producer = await ProtocolClient.connect(("127.0.0.1", tcp))
    async with producer.stream:
        await publish(producer, Pub("t", b"m"))
    return process, tcp


def channels_on_disk(data_path: Path) -> bool:
    """Whether metadata.json lists both channels (the persister writes it within a
    second of their creation)."""
    metadata = load_metadata(data_path)
    topic = metadata.topic("t") if metadata is not None else None
    return topic is not None and len(topic.channels) == 2


async def stopped(process: trio.Process, how: signal.Signals) -> None:
    process.send_signal(how)
    with trio.fail_after(15):
        await process.wait()


async def test_a_clean_restart_keeps_every_count(tmp_path: Path) -> None:
    process, tcp = await prepared(tmp_path)
    try:
        await wait_until(lambda: channels_on_disk(tmp_path), "the channels on disk")
        plain = await consume(tcp, "t", "plain")
        bounded = await consume(tcp, "t", "bounded")
        assert [m.attempts for m in await deliveries(plain, 2)] == [1, 2]
        assert [m.attempts for m in await deliveries(bounded, 3)] == [1, 2, 3]
        await stopped(process, signal.SIGTERM)  # both still held: put back by the stop
        await trio.aclose_forcefully(plain.stream)
        await trio.aclose_forcefully(bounded.stream)
        process, tcp, _ = await start_nsqd(tmp_path)
        plain = await consume(tcp, "t", "plain")
        bounded = await consume(tcp, "t", "bounded")
        async with plain.stream, bounded.stream:
            assert (await next_message(plain)).attempts == 3  # counting on
            assert await quiet(bounded, 0.5) == []  # a 4th delivery would pass the bound
            assert [h["##dead_attempts"] for h in await dead_letters(tcp, "t")] == ["3"]
    finally:
        process.kill()
        await process.wait()


async def test_after_kill_9_a_bounded_channel_never_delivers_past_the_bound(
    tmp_path: Path,
) -> None:
    process, tcp = await prepared(tmp_path)
    try:
        await wait_until(lambda: channels_on_disk(tmp_path), "the channels on disk")
        bounded = await consume(tcp, "t", "bounded")
        async with bounded.stream:
            assert [m.attempts for m in await deliveries(bounded, 2)] == [1, 2]
            await stopped(process, signal.SIGKILL)
        process, tcp, _ = await start_nsqd(tmp_path)
        bounded = await consume(tcp, "t", "bounded")
        async with bounded.stream:
            (third,) = await deliveries(bounded, 1)
            assert third.attempts == 3
            await stopped(process, signal.SIGKILL)  # the third one held: the bound is reached
        process, tcp, _ = await start_nsqd(tmp_path)
        bounded = await consume(tcp, "t", "bounded")
        async with bounded.stream:
            assert await quiet(bounded, 0.5) == []
            assert [h["##dead_attempts"] for h in await dead_letters(tcp, "t")] == ["3"]
    finally:
        process.kill()
        await process.wait()
