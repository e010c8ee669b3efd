"""Expired messages leave a channel when they expire, not when someone would get them
(issue 30, item 12): an idle channel's depth drops within a second of its messages'
TTL, in /stats, /metrics and the admin stream alike, with no polling loop (the
channel's expiry timer sleeps until the next TTL); a backlog the channel has not read
yet, on disk, leaves in publish order. With ``--ttl-dead-letter`` they go to the
channel's dead-letter topic, saying why. docs/extensions.md "Message TTL".

The broker's wall clock follows Trio's MockClock (``FollowingWallClock``), so TTLs
count in virtual time and the assertions are exact.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Unpack

import orjson
import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol import IdentifyRequest, Mpub, Pub, Rdy, Req, Sub
from trionsq.protocol.client import MessageFrame, encode_identify
from trionsq.testing import FollowingWallClock

from .raw import http, next_frame, next_message, ok, publish, quiet
from .test_admin_stream import open_stream, snapshot_where

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.config import NsqdOptions
    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients


async def started(
    nursery: trio.Nursery, clock: trio.testing.MockClock, **options: Unpack[NsqdOptions]
) -> BoundAddresses:
    clock.autojump_threshold = 0.05  # jump only while no bytes are in flight
    config = NsqdConfig.loopback(**options)
    addresses: BoundAddresses = await nursery.start(
        functools.partial(serve_nsqd, config, wall_clock=FollowingWallClock())
    )
    return addresses


async def topic_with_ttl(addresses: BoundAddresses, topic: str, ttl: str, *channels: str) -> None:
    """Topic ``topic`` with a TTL, and ``channels`` made before anything is published."""
    await http(addresses, "POST", f"/topic/create?topic={topic}")
    await http(addresses, "POST", f"/topic/ttl?topic={topic}&ttl={ttl}")
    for channel in channels:
        await http(addresses, "POST", f"/channel/create?topic={topic}&channel={channel}")


async def depths(addresses: BoundAddresses, topic: str, name: str = "c") -> tuple[int, int, int]:
    """Channel ``name``'s depth in /stats and /metrics, and its expired_count."""
    stats = (await http(addresses, "GET", f"/stats?format=json&topic={topic}")).json()
    (channel,) = [c for c in stats["topics"][0]["channels"] if c["channel_name"] == name]
    text = (await http(addresses, "GET", "/metrics")).text
    (metric,) = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "nsq_channel_depth"
        and (sample.labels.get("topic"), sample.labels.get("channel")) == (topic, name)
    ]
    return channel["depth"], int(metric), channel["expired_count"]


async def test_an_idle_channel_loses_its_expired_messages_within_a_second(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses = await started(nursery, autojump_clock)
    await topic_with_ttl(addresses, "t", "1s", "c")
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("t", tuple(b"m%d" % i for i in range(10))))
    published = trio.current_time()
    async with open_stream(addresses, "snapshot_interval_ms=100&topics=t") as ws:
        await trio.sleep_until(published + 0.9)
        assert await depths(addresses, "t") == (10, 10, 0)
        await trio.sleep_until(published + 2.0)  # a second after they expired
        assert await depths(addresses, "t") == (0, 0, 10)
        snapshot = await snapshot_where(ws, lambda s: trio.current_time() > published + 2.0)
        assert snapshot["topics"][0]["channels"][0]["depth"] == 0


async def test_a_message_put_back_expires_while_nobody_has_room(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses = await started(nursery, autojump_clock)
    await topic_with_ttl(addresses, "r", "10s")
    producer = await clients.connect(addresses.tcp)
    consumer = await clients.subscribe(addresses.tcp, "r", "c", rdy=1)
    await publish(producer, Pub("r", b"late"))
    published = trio.current_time()
    message = await next_message(consumer)
    await consumer.send(Rdy(0), Req(message.id, 0))  # back in the channel, nobody ready
    await trio.sleep_until(published + 5)
    assert (await depths(addresses, "r"))[0] == 1
    await trio.sleep_until(published + 11)
    assert await depths(addresses, "r") == (0, 0, 1)


async def test_an_unread_backlog_on_disk_expires_in_publish_order(
    clients: Clients,
    nursery: trio.Nursery,
    autojump_clock: trio.testing.MockClock,
    tmp_path: Path,
) -> None:
    """3,000 records, most of them only on disk (the log's memory tail holds 1,024):
    the channel has read none. Half are published a minute before the others; each
    half leaves the depth within a second of its TTL."""
    addresses = await started(nursery, autojump_clock, data_path=str(tmp_path), mem_queue_size=1000)
    await topic_with_ttl(addresses, "d", "2m", "c")
    start = trio.current_time()
    for half in (b"a", b"b"):
        producer = await clients.connect(addresses.tcp)  # new: the first one idles out
        for batch in range(3):
            bodies = tuple(b"%s%d-%d" % (half, batch, i) for i in range(500))
            await publish(producer, Mpub("d", bodies))
        if half == b"a":
            await trio.sleep_until(start + 60)
    assert addresses.broker.topics["d"].partitions[0].log.is_cold(1)
    await trio.sleep_until(start + 119.5)
    assert await depths(addresses, "d") == (3000, 3000, 0)
    await trio.sleep_until(start + 121)
    assert await depths(addresses, "d") == (1500, 1500, 1500)
    await trio.sleep_until(start + 181)
    assert await depths(addresses, "d") == (0, 0, 3000)


async def test_ttl_dead_letter_sends_expired_messages_to_the_dead_letter_topic(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses = await started(nursery, autojump_clock, ttl_dead_letter=True)
    await topic_with_ttl(addresses, "q", "1s", "other")
    await http(addresses, "POST", "/channel/dead_letter?topic=q&channel=c&max_attempts=5")
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("q", b"quote"))
    await trio.sleep(2)
    assert await depths(addresses, "q") == (0, 0, 1)
    assert await depths(addresses, "q", "other") == (0, 0, 1)
    reader = await clients.connect(addresses.tcp)
    await reader.stream.send_all(encode_identify(IdentifyRequest(extend_support=True)))
    assert ok(await next_frame(reader))
    await reader.send(Sub("q.dead", "audit"))
    assert ok(await next_frame(reader))
    reader.decoder.extended = True
    await reader.send(Rdy(10))
    frames = [f for f in await quiet(reader, 1.0) if isinstance(f, MessageFrame)]
    assert [f.message.body for f in frames] == [b"quote"]  # channel "other" has no bound
    assert orjson.loads(frames[0].message.ext or b"{}") == {
        "##dead_from_topic": "q",
        "##dead_from_channel": "c",
        "##dead_from_partition": "0",
        "##dead_attempts": "0",
        "##dead_reason": "ttl",
    }


async def test_a_restored_idle_channel_expires_what_it_holds(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """After a restart nobody subscribes: the channel has no consumer to start its
    runner, and its messages expire all the same."""
    autojump_clock.autojump_threshold = 0.05
    wall = FollowingWallClock()
    config = NsqdConfig.loopback(data_path=str(tmp_path))
    async with trio.open_nursery() as first:
        addresses = await first.start(functools.partial(serve_nsqd, config, wall_clock=wall))
        await topic_with_ttl(addresses, "k", "1m", "c")
        producer = await clients.connect(addresses.tcp)
        await publish(producer, Mpub("k", (b"a", b"b", b"c")))
        published = trio.current_time()
        first.cancel_scope.cancel()
    addresses = await nursery.start(functools.partial(serve_nsqd, config, wall_clock=wall))
    await trio.sleep_until(published + 59)
    assert await depths(addresses, "k") == (3, 3, 0)
    await trio.sleep_until(published + 61)
    assert await depths(addresses, "k") == (0, 0, 3)
