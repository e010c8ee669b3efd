"""Issue 30 item 3b: a broker under ``ulimit -n 1024`` keeps serving any number of
topics. A real ``trionsq serve`` runs with RLIMIT_NOFILE (1024, 1024), so it cannot
raise the limit: each durable partition's segment, each channel's delays file, each
client's socket must share 1,024 descriptors. Before the descriptor budget, 1,011 of
1,100 first PUBs were acknowledged and then accept failed with EMFILE for good, so
even /ping could not connect.
"""

from __future__ import annotations

import json
import re
import resource
import signal
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import pytest
import trio

from trionsq.descriptors import HTTP_RESERVE
from trionsq.protocol import Dpub, IdentifyRequest, MpubExt, Pub, PubExt, Rdy, Sub
from trionsq.protocol.client import (
    ErrorReply,
    MessageFrame,
    Response,
    encode_commands,
    encode_identify,
)
from trionsq.protocol.commands import ExtMessage
from trionsq.testing import ProtocolClient

from .test_storage_faults import (
    BrokerProcess,
    limit_descriptors,
    listening,
    lowest_free_descriptor,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from trionsq.protocol import Command
    from trionsq.protocol.client import Frame

TRIONSQ = Path(sys.executable).with_name("trionsq")
LIMIT = 1024
TOPICS = 1100


def _limit_descriptors() -> None:  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


@asynccontextmanager
async def limited_broker(data: Path) -> AsyncIterator[BrokerProcess]:
    """``trionsq serve`` on ``data`` under RLIMIT_NOFILE (1024, 1024), which it cannot
    raise; killed at the end."""
    process = await trio.lowlevel.open_process(
        [
            str(TRIONSQ),
            "serve",
            f"--data-path={data}",
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
        ],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_limit_descriptors,
    )
    async with listening(BrokerProcess(process)) as broker:
        yield broker


def topic_name(number: int) -> str:
    return f"t{number:04d}"


def body_of(number: int) -> bytes:
    return f"message of topic {number}".encode()


async def replies(client: ProtocolClient, commands: Sequence[Command]) -> list[Frame]:
    """Send ``commands`` in one write; their answers (fewer if the broker closed)."""
    await client.send(*commands)
    return await client.read(len(commands))


def data_with_topics(tmp_path: Path, count: int, *, ext: bool, max_attempts: int = 0) -> Path:
    """A data path whose metadata.json (as an earlier run left it) lists ``count``
    topics, each with the durable channel ``c`` (with that dead-letter bound)."""
    data = tmp_path / "data"
    data.mkdir()
    channel = {"name": "c", "paused": False} | (
        {"max_attempts": max_attempts} if max_attempts else {}
    )
    topics = [
        {"name": topic_name(n), "partitions": 1, "paused": False, "ext": ext}
        | {"ordered": False, "channels": [channel]}
        for n in range(count)
    ]
    (data / "metadata.json").write_text(json.dumps({"version": 1, "topics": topics}))
    return data


async def all_acknowledged(broker: BrokerProcess, commands: Sequence[Command]) -> None:
    """Send ``commands`` on one connection, a hundred per write; each must get OK."""
    client = await ProtocolClient.connect(broker.tcp)
    for start in range(0, len(commands), 100):
        sent = commands[start : start + 100]
        frames = await replies(client, sent)
        refused = [f for f in frames if not (isinstance(f, Response) and f.is_ok)]
        assert len(frames) == len(sent), (broker.open_descriptors(), broker.stderr[-600:])
        assert not refused, (len(refused), refused[:1], broker.stderr[-600:])
    await client.aclose()


async def publish_one_per_topic(broker: BrokerProcess, count: int) -> list[int]:
    """PUB one message to each of ``count`` new topics (a hundred per write); the
    numbers of the topics whose PUB was acknowledged."""
    acked: list[int] = []
    producer = await ProtocolClient.connect(broker.tcp)
    try:
        for start in range(0, count, 100):
            numbers = range(start, min(start + 100, count))
            frames = await replies(producer, [Pub(topic_name(n), body_of(n)) for n in numbers])
            acked += [
                n
                for n, f in zip(numbers, frames, strict=False)
                if isinstance(f, Response) and f.is_ok
            ]
            if len(frames) < len(numbers) or len(acked) < numbers[-1] + 1:
                break  # refused (a failed PUB is fatal) or closed
    except OSError:
        pass  # the broker could not even accept
    finally:
        await producer.aclose()
    return acked


async def receive_one(broker: BrokerProcess, topic: str) -> bytes:
    """SUB on ``topic`` (channel ``c``) and the body of its first message."""
    consumer = await ProtocolClient.connect(broker.tcp)
    try:
        await consumer.send(Sub(topic, "c"), Rdy(1))
        (subscribed,) = await consumer.read(1)
        assert isinstance(subscribed, Response), subscribed
        (message,) = await consumer.read(1)
        assert isinstance(message, MessageFrame), message
        return message.message.body
    finally:
        await consumer.aclose()


async def stats(broker: BrokerProcess) -> bytes:
    status, body = await broker.http("GET", "/stats?format=json")
    assert status == 200, body
    return body


async def topic_depths(broker: BrokerProcess) -> dict[str, int]:
    topics = json.loads(await stats(broker))["topics"]
    return {topic["topic_name"]: topic["depth"] for topic in topics}


async def descriptor_figures(broker: BrokerProcess) -> dict[str, int]:
    """/stats' ``descriptors``: how the broker shares its open-file limit."""
    figures: dict[str, int] = json.loads(await stats(broker))["descriptors"]
    return figures


async def test_1100_new_topics_under_1024_descriptors_then_sub_ping_and_kill_9(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    async with limited_broker(data) as broker:
        acked = await publish_one_per_topic(broker, TOPICS)
        assert len(acked) == TOPICS, (
            f"{len(acked)} of {TOPICS} acknowledged; "
            f"{broker.open_descriptors()} descriptors open; {broker.stderr[-600:]!r}"
        )
        assert await receive_one(broker, topic_name(3)) == body_of(3)  # one of the first
        assert await broker.http("GET", "/ping") == (200, b"OK")
        assert broker.open_descriptors() < LIMIT
        budget = await descriptor_figures(broker)
        assert budget["limit"] == LIMIT
        assert 0 < budget["files_open"] <= budget["pool"] < LIMIT
        assert budget["evictions"] >= TOPICS - budget["pool"]
        broker.process.send_signal(signal.SIGKILL)
        await broker.process.wait()

    # a restart under the same limit finds every message, without opening every file
    async with limited_broker(data) as broker:
        assert broker.open_descriptors() < 200, broker.open_descriptors()
        depths = await topic_depths(broker)
        expected = {topic_name(n): 1 for n in range(TOPICS)}
        expected[topic_name(3)] = 0  # consumed and finished above (or delivered again)
        missing = [name for name, depth in expected.items() if depths.get(name, 0) < depth]
        assert not missing, f"{len(missing)} topics lost their message, e.g. {missing[:5]}"
        for number in (0, 555, TOPICS - 1):
            assert await receive_one(broker, topic_name(number)) == body_of(number)
        assert await broker.http("GET", "/ping") == (200, b"OK")
        assert broker.process.returncode is None
    assert b"Traceback" not in broker.stderr


async def test_channels_with_parked_delays_on_520_topics_under_1024_descriptors(
    tmp_path: Path,
) -> None:
    """Each topic holds a segment and its channel a delays file: 1,040 files (before
    the budget, the DPUB to the 378th topic failed with EMFILE). The topics and
    channels come from an earlier run's metadata.json, so the start restores 520
    durable channels too."""
    count = 520
    data = data_with_topics(tmp_path, count, ext=False)
    async with limited_broker(data) as broker:
        hour = 3_600_000  # parked: due long after the test
        await all_acknowledged(
            broker, [Dpub(topic_name(n), hour, body_of(n)) for n in range(count)]
        )
        assert len(list((data / "channels").glob("*/c.delays"))) == count
        assert await broker.http("GET", "/ping") == (200, b"OK")
        broker.process.send_signal(signal.SIGKILL)
        await broker.process.wait()

    async with limited_broker(data) as broker:
        deferred = {
            topic["topic_name"]: sum(c["deferred_count"] for c in topic["channels"])
            for topic in json.loads(await stats(broker))["topics"]
        }
        lost = [topic_name(n) for n in range(count) if deferred.get(topic_name(n)) != 1]
        assert not lost, f"{len(lost)} channels lost their parked message, e.g. {lost[:5]}"
        assert await broker.http("GET", "/ping") == (200, b"OK")
    assert b"Traceback" not in broker.stderr


def keyed(key: str, body: bytes) -> ExtMessage:
    return ExtMessage(orjson.dumps({"##idempotency_key": key}), body)


async def deliver_unfinished(broker: BrokerProcess, topic: str) -> tuple[bytes, int]:
    """An ext consumer on ``topic``'s channel ``c`` takes its first message and goes
    away without finishing it: its body and attempts (it goes back to the channel)."""
    consumer = await ProtocolClient.connect(broker.tcp)
    consumer.decoder.extended = True  # only message frames differ
    try:
        identify = encode_identify(IdentifyRequest(extend_support=True))
        await consumer.stream.send_all(identify + encode_commands([Sub(topic, "c"), Rdy(1)]))
        identified, subscribed, message = await consumer.read(3)
        assert isinstance(identified, Response), identified
        assert isinstance(subscribed, Response), subscribed
        assert isinstance(message, MessageFrame), (message, broker.stderr[-600:])
        return message.message.body, message.message.attempts
    finally:
        await consumer.aclose()


async def deliver_each_unfinished(
    broker: BrokerProcess, numbers: range
) -> dict[int, tuple[bytes, int]]:
    """:func:`deliver_unfinished` on each topic, sixteen consumers at a time."""
    got: dict[int, tuple[bytes, int]] = {}
    limiter = trio.CapacityLimiter(16)

    async def one(number: int) -> None:
        async with limiter:
            got[number] = await deliver_unfinished(broker, topic_name(number))

    async with trio.open_nursery() as nursery:
        for number in numbers:
            nursery.start_soon(one, number)
    return got


async def test_keyed_topics_with_bounded_channels_on_600_topics_under_1024_descriptors(
    tmp_path: Path,
) -> None:
    """Each of 600 ext topics holds a segment and an idempotency key journal, and its
    channel (with a dead-letter bound) a delivery journal: 1,800 files under 1,024
    descriptors, each reached through the budget. The topics and channels come from
    an earlier run's metadata.json."""
    count = 600
    data = data_with_topics(tmp_path, count, ext=True, max_attempts=5)
    async with limited_broker(data) as broker:
        pubs = [PubExt(topic_name(n), keyed(f"k{n}", body_of(n))) for n in range(count)]
        await all_acknowledged(broker, pubs)
        got = await deliver_each_unfinished(broker, range(count))
        assert got == {n: (body_of(n), 1) for n in range(count)}
        assert len(list(data.glob("*.keys"))) == count
        assert len({path.parent for path in (data / "channels").glob("*/c.journal.*")}) == count
        assert await broker.http("GET", "/ping") == (200, b"OK")
        assert broker.open_descriptors() < LIMIT
        budget = await descriptor_figures(broker)  # a segment and two journals per topic
        assert budget["evictions"] >= 3 * count - budget["pool"]
        assert b"ERROR" not in broker.stderr, broker.stderr[-600:]  # no journal write failed
        broker.process.send_signal(signal.SIGKILL)
        await broker.process.wait()

    # each key is remembered and each delivery counted after a restart under the limit
    async with limited_broker(data) as broker:
        assert broker.open_descriptors() < 200, broker.open_descriptors()
        mpubs = [
            MpubExt(topic_name(n), (keyed(f"k{n}", b"again"), keyed(f"new{n}", b"new")))
            for n in range(count)
        ]
        await all_acknowledged(broker, mpubs)
        depths = {
            topic["topic_name"]: sum(c["depth"] for c in topic["channels"])
            for topic in json.loads(await stats(broker))["topics"]
        }
        wrong = {name: depths.get(name) for name in map(topic_name, range(count))}
        wrong = {name: depth for name, depth in wrong.items() if depth != 2}
        assert not wrong, f"{len(wrong)} channels hold other than 2 messages: {wrong}"[:300]
        again = await deliver_each_unfinished(broker, range(0, count, 7))
        assert again == {n: (body_of(n), 2) for n in range(0, count, 7)}
        assert await broker.http("GET", "/ping") == (200, b"OK")
        assert broker.open_descriptors() < LIMIT
        assert broker.process.returncode is None
    assert b"Traceback" not in broker.stderr
    assert b"ERROR" not in broker.stderr, broker.stderr[-600:]


async def served(client: ProtocolClient) -> bool:
    """Whether the broker serves a new client (a PUB is answered) or closed it at once."""
    try:
        await client.send(Pub("kept", b"x"))
        with trio.move_on_after(10):
            frames = await client.read(1)
            assert not frames or frames[0] == Response(b"OK"), frames
            return bool(frames)
    except (trio.BrokenResourceError, OSError):
        return False
    raise AssertionError("neither served nor refused: accept is stuck")


async def held_pings(broker: BrokerProcess, count: int) -> list[trio.SocketStream]:
    """Up to ``count`` HTTP connections kept open, each answered one /ping; stops at
    the first the broker closes unanswered."""
    host, port = broker.http_address.split(":")
    held: list[trio.SocketStream] = []
    while len(held) < count:
        stream = await trio.open_tcp_stream(host, int(port))
        await stream.send_all(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        with trio.fail_after(10):
            try:
                answer = await stream.receive_some()
            except trio.BrokenResourceError:  # reset: closed with the request unread
                answer = b""
        if not answer:
            await stream.aclose()
            break
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        held.append(stream)
    return held


async def test_connections_beyond_the_limit_are_refused_and_ping_still_answers(
    tmp_path: Path,
) -> None:
    """More clients than 1,024 descriptors allow: the ones over the budget are closed
    at once, the broker keeps accepting (no EMFILE), /ping answers, and the clients
    already connected publish on, to new topics too."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * LIMIT:  # this process holds the clients' ends
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * LIMIT), hard))
    data = tmp_path / "data"
    data.mkdir()
    async with limited_broker(data) as broker:
        producer = await ProtocolClient.connect(broker.tcp)
        assert (await replies(producer, [Pub("kept", b"before")]))[0] == Response(b"OK")
        idle: list[ProtocolClient] = []
        refused = 0
        while len(idle) + refused < LIMIT:
            client = await ProtocolClient.connect(broker.tcp)
            if await served(client):
                idle.append(client)
            else:
                refused += 1
                await client.aclose()
        assert refused > 0
        assert len(idle) > LIMIT * 3 // 4  # most of the limit still goes to clients
        budget = await descriptor_figures(broker)
        assert budget["refused_connections"] == refused
        assert await broker.http("GET", "/ping") == (200, b"OK")
        frames = await replies(producer, [Pub("kept", b"after"), Pub("brand-new", b"new")])
        assert frames == [Response(b"OK"), Response(b"OK")], frames
        # HTTP has a share of its own, then it is refused too
        held = await held_pings(broker, HTTP_RESERVE + 1)
        assert len(held) == HTTP_RESERVE
        for client in (producer, *idle):
            await client.aclose()
        for stream in held:
            await stream.aclose()
        assert broker.process.returncode is None
    assert b"accept returned EMFILE" not in broker.stderr
    assert b"Traceback" not in broker.stderr


async def test_a_publish_the_kernel_refuses_a_descriptor_gets_e_pub_failed(
    tmp_path: Path,
) -> None:
    """The limit lowered under the running broker (as if something else took its
    descriptors): a publish that cannot open its segment is refused with nsqd's
    error, and stored once descriptors are back, with nothing half-written before."""
    data = tmp_path / "data"
    data.mkdir()
    async with limited_broker(data) as broker:
        status, body = await broker.http("POST", "/topic/create?topic=new")
        assert status == 200, body
        youzan = await ProtocolClient.connect(broker.tcp)
        host, port = broker.http_address.split(":")
        http = await trio.open_tcp_stream(host, int(port))  # accepted before the limit drops
        await trio.sleep(1.5)  # the metadata write is done: nothing opens meanwhile
        pid = broker.process.pid
        limit_descriptors(pid, lowest_free_descriptor(pid), LIMIT)
        (refusal,) = await replies(youzan, [Pub("new", b"no descriptor", partition=0)])
        await http.send_all(
            b"POST /pub?topic=new HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nno"
        )
        with trio.fail_after(10):
            answer = await http.receive_some()
        limit_descriptors(pid, LIMIT, LIMIT)
        assert isinstance(refusal, ErrorReply), refusal
        assert refusal.error.text == "E_PUB_FAILED new-0.000000.log: too many open files"
        assert answer.startswith(b"HTTP/1.1 500 "), answer
        assert answer.endswith(b'{"message":"PUB_FAILED new-0.000000.log: too many open files"}')
        await http.aclose()
        (stored,) = await replies(youzan, [Pub("new", b"stored", partition=0)])
        assert stored == Response(b"OK")
        assert await receive_one(broker, "new") == b"stored"
        assert await broker.http("GET", "/ping") == (200, b"OK")
        await youzan.aclose()
    assert b"Traceback" not in broker.stderr


def _soft_limit_below_hard() -> None:  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))


@pytest.mark.parametrize(
    "command",
    [
        [
            "trionsq",
            "serve",
            "--in-memory",
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
        ],
        ["nsqd", "-tcp-address=127.0.0.1:0", "-http-address=127.0.0.1:0", "-data-path={data}"],
        ["trionsq", "lookupd", "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"],
        ["nsqlookupd", "-tcp-address=127.0.0.1:0", "-http-address=127.0.0.1:0"],
    ],
    ids=["trionsq serve", "nsqd", "trionsq lookupd", "nsqlookupd"],
)
async def test_every_command_raises_the_soft_open_file_limit_to_the_hard_one(
    command: list[str], tmp_path: Path
) -> None:
    """As nsqd's and nsqlookupd's Go runtime does: each command starts with the soft
    limit at the hard one (the broker then shares out what it has)."""
    executable = TRIONSQ.with_name(command[0])
    arguments = [argument.format(data=tmp_path) for argument in command[1:]]
    process = await trio.lowlevel.open_process(
        [str(executable), *arguments],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_soft_limit_below_hard,
    )
    async with listening(BrokerProcess(process)):
        limits = await trio.Path(f"/proc/{process.pid}/limits").read_text()
        assert re.search(r"^Max open files\s+4096\s+4096\s+files", limits, re.MULTILINE), limits
