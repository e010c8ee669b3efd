"""Admin stream snapshots shared between subscribers (issue 30, item 3): a snapshot is
built and serialized once per interval for every subscriber of the same
subscription, whatever their number, and the subscribers are bounded."""

from __future__ import annotations

import math
import time
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

import orjson
import pytest
import trio
import trio.testing
from trio_websocket import ConnectionClosed

from trionsq import NsqdConfig
from trionsq.protocol import Fin, Pub, Req
from trionsq.server import admin_snapshots, stats, websocket_frames
from trionsq.server.admin_snapshots import RATES, Snapshot, SnapshotHub, SnapshotKey
from trionsq.testing import wait_until

from .raw import Clients, http, next_message, publish, start
from .test_admin_stream import open_stream, receive

if TYPE_CHECKING:
    from trio_websocket import WebSocketConnection

    from trionsq.nursery_tree import BoundAddresses
    from trionsq.server.stats import TopicSnapshot


class SerializedBytes:
    """Counts what ``orjson.dumps`` produces for snapshots: a whole snapshot, or its
    parts (its head, each of its topics)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.snapshot_bytes = 0
        self._dumps = orjson.dumps
        monkeypatch.setattr(orjson, "dumps", self)

    def __call__(self, value: object, option: int | None = None) -> bytes:
        encoded = self._dumps(value, option=option)
        if isinstance(value, dict) and ("rss_bytes" in value or "topic_name" in value):
            self.snapshot_bytes += len(encoded)
        return encoded


async def many_topics(broker: BoundAddresses, topics: int, channels: int) -> None:
    for topic in range(topics):
        for channel in range(channels):
            await broker.broker.create_channel(f"t{topic:02d}", f"c{channel}")


async def open_streams(
    stack: AsyncExitStack, broker: BoundAddresses, count: int, query: str
) -> list[WebSocketConnection]:
    streams = [await stack.enter_async_context(open_stream(broker, query)) for _ in range(count)]
    for ws in streams:
        assert (await receive(ws))["type"] == "hello"
    return streams


async def test_twenty_subscribers_cost_one_snapshot_per_interval(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's load, scaled down: 20 subscribers at 100 ms. Each interval's snapshot
    is serialized once, not once per subscriber (before: 20 times), and every
    subscriber gets the same bytes (seq aside)."""
    broker = await start(nursery)
    await many_topics(broker, 30, 3)
    counted = SerializedBytes(monkeypatch)
    async with AsyncExitStack() as stack:
        streams = await open_streams(stack, broker, 20, "snapshot_interval_ms=100&events=snapshot")
        for ws in streams:  # each subscriber's first snapshot is its own (never stale)
            assert (await receive(ws))["type"] == "snapshot"
        started = time.monotonic()
        counted.snapshot_bytes = 0
        received = [[await ws.get_message() for ws in streams] for _ in range(5)]
        elapsed = time.monotonic() - started
    one = len(received[-1][0])
    intervals = elapsed / 0.1 + 2  # the boundaries a window of that length may cross
    assert counted.snapshot_bytes <= intervals * one * 1.05, (counted.snapshot_bytes, one)
    # one text per snapshot built (the same for every subscriber, but for its seq)
    frames = [orjson.loads(frame) for round_ in received for frame in round_]
    built = {frame["ts"] for frame in frames}
    assert len({orjson.dumps({**frame, "seq": 0}) for frame in frames}) == len(built)


async def test_different_subscriptions_get_their_own_snapshots(nursery: trio.Nursery) -> None:
    broker = await start(nursery)
    for topic in ("a", "b"):
        await http(broker, "POST", f"/topic/create?topic={topic}")
    async with (
        open_stream(broker, "topics=a&events=snapshot") as only_a,
        open_stream(broker, "events=snapshot&snapshot_interval_ms=200") as every,
    ):
        for ws, names in ((only_a, ["a"]), (every, ["a", "b"])):
            assert (await receive(ws))["type"] == "hello"
            snapshot = await receive(ws)
            assert [t["topic_name"] for t in snapshot["topics"]] == names


async def test_subscribers_beyond_the_bound_are_refused_with_1013(nursery: trio.Nursery) -> None:
    broker = await start(nursery, NsqdConfig.loopback(admin_max_subscribers=2))
    async with open_stream(broker) as first, open_stream(broker) as second:
        for ws in (first, second):
            assert (await receive(ws))["type"] == "hello"
        async with open_stream(broker) as third:
            with pytest.raises(ConnectionClosed) as closed:
                await receive(third)
            assert closed.value.reason is not None
            assert closed.value.reason.code == 1013
            assert closed.value.reason.reason == (
                "too many admin stream subscribers (--admin-max-subscribers=2); try again later"
            )
    async with open_stream(broker) as again:  # the others left: room again
        assert (await receive(again))["type"] == "hello"


async def test_a_snapshot_larger_than_one_write_arrives_whole(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot's bulk goes in several writes (other tasks run between them): the
    subscriber reads one message, the snapshot whole."""
    monkeypatch.setattr(websocket_frames, "SEND_PIECE", 1000)
    broker = await start(nursery)
    await many_topics(broker, 30, 3)
    async with open_stream(broker, "events=snapshot") as ws:
        assert (await receive(ws))["type"] == "hello"
        text = await ws.get_message()
    assert len(text) > 20 * 1000
    body = orjson.loads(text)
    assert [topic["topic_name"] for topic in body["topics"]] == [f"t{t:02d}" for t in range(30)]
    assert all(len(topic["channels"]) == 3 for topic in body["topics"])


def continuation_payload(frame: bytes) -> bytes:
    """The payload of a final, unmasked continuation frame (RFC 6455 §5.2)."""
    assert frame[0] == 0x80  # FIN, opcode 0
    size = frame[1]
    start = 2 + {126: 2, 127: 8}.get(size, 0)
    length = int.from_bytes(frame[2:start], "big") if size >= 126 else size
    assert len(frame) == start + length
    return frame[start:]


class CpuClock:
    """A build's CPU clock that advances ``step`` seconds at every reading."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


async def test_a_snapshot_is_built_once_for_every_subscriber_due_at_once(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """Twenty writers due at the same time: one builds, topic by topic with scheduler
    passes between, the others wait for it and take the same snapshot."""
    broker = await start(nursery)
    await many_topics(broker, 45, 1)
    # a build that costs no CPU by its clock: the real thread clock would push the next
    # one past the boundary whenever the machine is busy enough to make 45 topics dear
    hub = SnapshotHub(broker.broker, started_at=0, cpu_clock=CpuClock(0.0))
    key = (100, None)
    got: list[Snapshot] = []

    async def writer() -> None:
        hub.join(key)
        got.append(await hub.snapshot(key, sent=-math.inf, fresh_after=trio.current_time()))

    async with trio.open_nursery() as writers:
        for _ in range(20):
            writers.start_soon(writer)
    assert hub.builds == 1
    assert len({id(snapshot) for snapshot in got}) == 1
    body = orjson.loads(got[0].head(7) + continuation_payload(got[0].tail))
    assert (body["seq"], len(body["topics"])) == (7, 45)
    # the next one falls due on the interval's boundary, for all of them
    assert got[0].next_due == pytest.approx((trio.current_time() // 0.1 + 1) * 0.1)


async def test_snapshots_come_further_apart_than_asked_when_they_cost_too_much(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """A build of 60 ms of CPU (the clock here says so) may take at most 15% of the
    broker's time: the next is due 340 ms after it, not on the 100 ms boundary."""
    broker = await start(nursery)
    await many_topics(broker, 5, 1)  # one turn: two readings of the CPU clock
    hub = SnapshotHub(broker.broker, started_at=0, cpu_clock=CpuClock(0.06))
    key = (100, None)
    hub.join(key)
    snapshot = await hub.snapshot(key, sent=-math.inf, fresh_after=trio.current_time())
    assert snapshot.next_due == pytest.approx(trio.current_time() + 0.06 * (1 / 0.15 - 1))
    await trio.sleep_until(snapshot.next_due)
    again = await hub.snapshot(key, sent=snapshot.built_at, fresh_after=0)
    assert again is not snapshot
    assert hub.builds == 2


async def test_a_build_lets_others_in_between_topics_and_skips_one_deleted_meanwhile(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/ping waits at most one turn of a build, never a whole one: with turns of no
    length, the loop runs other tasks before each topic but the first, and a topic
    they delete meanwhile is left out (not an error)."""
    broker = await start(nursery)
    await many_topics(broker, 45, 1)
    monkeypatch.setattr(admin_snapshots, "TURN", 0.0)
    hub = SnapshotHub(broker.broker, started_at=0)
    key = (100, None)
    hub.join(key)
    passes = 0
    done = False

    async def others() -> None:
        nonlocal passes
        while not done:
            passes += 1
            if passes == 20:
                assert broker.broker.delete_topic("t30")
            await trio.lowlevel.checkpoint()

    nursery.start_soon(others)
    snapshot = await hub.snapshot(key, sent=-math.inf, fresh_after=0)
    done = True
    assert passes >= 44
    body = orjson.loads(snapshot.head(1) + continuation_payload(snapshot.tail))
    names = [topic["topic_name"] for topic in body["topics"]]
    assert names == [f"t{topic:02d}" for topic in range(45) if topic != 30]


def topics_without_rates(snapshot: Snapshot) -> list[dict[str, object]]:
    """A snapshot's topics, their rates set to 0 (a group's rates follow its own
    previous snapshot, which a build from scratch has not)."""
    topics: list[dict[str, object]] = orjson.loads(
        snapshot.head(0) + continuation_payload(snapshot.tail)
    )["topics"]
    for topic in topics:
        topic["message_rate"] = 0
        for channel in topic["channels"]:  # type: ignore[attr-defined]
            channel.update(dict.fromkeys(RATES, 0))
    return topics


class PiecesAgainstWhole:
    """A group's snapshots next to ones built from scratch at the same moment."""

    def __init__(self, broker: BoundAddresses, monkeypatch: pytest.MonkeyPatch) -> None:
        self.broker = broker
        self.key: SnapshotKey = (100, None)
        self.hub = SnapshotHub(broker.broker, started_at=0)
        self.hub.join(self.key)
        self.sent = -math.inf
        self.documents = 0
        """Topic documents the group's builds made (those of topics that moved)."""
        build_document = stats._topic_json

        def counted(topic: TopicSnapshot) -> dict[str, object]:
            self.documents += 1
            return build_document(topic)

        monkeypatch.setattr(stats, "_topic_json", counted)

    async def same_as_whole(self, step: str) -> int:
        """After ``step``: the group's next snapshot equals a whole build; the topic
        documents it built."""
        await trio.sleep(0.1)
        before = self.documents
        snapshot = await self.hub.snapshot(self.key, sent=self.sent, fresh_after=0)
        built = self.documents - before
        self.sent = snapshot.built_at
        whole = SnapshotHub(self.broker.broker, started_at=0)
        whole.join(self.key)
        fresh = await whole.snapshot(self.key, sent=-math.inf, fresh_after=0)
        assert topics_without_rates(snapshot) == topics_without_rates(fresh), step
        return built


async def test_a_snapshot_that_keeps_idle_topics_equals_one_built_whole(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build keeps the JSON of each topic whose figures stood still: after every kind
    of change /stats shows, the snapshot is still the one a build from scratch makes,
    and only the topics that moved were built again."""
    config = NsqdConfig.loopback(e2e_processing_latency_percentiles=(0.5, 0.99))
    broker = await start(nursery, config)
    await many_topics(broker, 3, 2)
    check = PiecesAgainstWhole(broker, monkeypatch)
    channel = broker.broker.topics["t00"].partitions[0].channels["c0"]
    clients = Clients()
    try:
        assert await check.same_as_whole("first") == 3
        assert await check.same_as_whole("idle") == 0
        producer = await clients.connect(broker.tcp)
        await publish(producer, Pub("t00", b"one"), Pub("t00", b"two"))
        assert await check.same_as_whole("published") == 1
        consumer = await clients.subscribe(broker.tcp, "t00", "c0", rdy=1)
        first = await next_message(consumer)
        await check.same_as_whole("in flight")
        await consumer.send(Fin(first.id))
        second = await next_message(consumer)  # the FIN went through
        await check.same_as_whole("finished")
        await consumer.send(Req(second.id, 60_000))
        await wait_until(lambda: len(channel.deferred) == 1, "deferred")
        await check.same_as_whole("deferred")
        for path in (
            "/channel/pause?topic=t01&channel=c1",
            "/topic/pause?topic=t02",
            "/channel/rate_limit?topic=t01&channel=c0&msgs_per_sec=1000",
            "/topic/publish_limit?topic=t01&msgs_per_sec=10&mode=refuse",
            "/channel/dead_letter?topic=t02&channel=c0&max_attempts=3",
            "/topic/ttl?topic=t01&ttl=2h",
            "/channel/create?topic=t01&channel=c9",
            "/channel/delete?topic=t00&channel=c1",
            "/topic/delete?topic=t02",
        ):
            assert (await http(broker, "POST", path)).status_code == 200
            await check.same_as_whole(path)
        await trio.aclose_forcefully(consumer.stream)
        await wait_until(lambda: not channel.consumers, "consumer gone")
        await check.same_as_whole("consumer gone")
        assert await check.same_as_whole("idle again") == 0
    finally:
        await clients.close_all()
