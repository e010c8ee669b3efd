"""Topic semantics: one stored copy, fan-out, first-channel backlog, retention."""

from __future__ import annotations

from trionsq.broker.channel import Consumer, Delivery
from trionsq.broker.topic import Partition, Topic
from trionsq.dispatch.routing import route

WALL = 1_700_000_000_000_000_000


def partition(**kwargs: object) -> Partition:
    options: dict[str, object] = {
        "max_msg_timeout": 900.0,
        "mem_queue_size": 10_000,
        "ephemeral": False,
    }
    options.update(kwargs)
    return Partition("t", 0, **options)  # type: ignore[arg-type]


def drain(p: Partition, name: str, client: int) -> list[bytes]:
    channel = p.channel(name)
    if client not in channel.consumers:
        consumer = Consumer(client, msg_timeout=60.0)
        consumer.rdy = 10_000
        channel.subscribe(consumer)
    got: list[Delivery] = []
    while True:
        batch = route(channel, 0.0, WALL).get(client, [])
        if not batch:
            break
        got += batch
        for d in batch:
            channel.finish(client, d.record.internal_id)
    return [d.record.body for d in got]


def test_messages_before_any_channel_go_to_the_first_channel() -> None:
    p = partition()
    p.publish([b"early1", b"early2"], WALL)
    assert drain(p, "first", 1) == [b"early1", b"early2"]
    p.publish([b"x"], WALL)
    later = p.channel("later")  # a later channel starts at the tail
    p.publish([b"y"], WALL)
    assert drain(p, "first", 1) == [b"x", b"y"]
    assert later.depth == 1
    assert drain(p, "later", 2) == [b"y"]


def test_every_channel_gets_every_message_from_one_stored_copy() -> None:
    p = partition()
    for name in ("a", "b", "c", "d"):
        p.channel(name)
    p.publish([b"%d" % i for i in range(50)], WALL)
    assert len(p.log) == 50
    for client, name in enumerate(("a", "b", "c", "d")):
        assert drain(p, name, client) == [b"%d" % i for i in range(50)]


def test_records_are_released_once_every_channel_confirmed_them() -> None:
    p = partition()
    p.channel("fast")
    p.channel("slow")
    p.publish([b"%d" % i for i in range(10)], WALL)
    drain(p, "fast", 1)
    assert p.release() == 0  # "slow" still needs them
    drain(p, "slow", 2)
    assert p.release() == 10
    assert len(p.log) == 0
    assert p.delete_channel("slow") is not None


def test_topic_pause_holds_new_messages_but_not_redeliveries() -> None:
    p = partition()
    channel = p.channel("c")
    consumer = Consumer(1, msg_timeout=60.0)
    consumer.rdy = 10
    channel.subscribe(consumer)
    p.publish([b"one"], WALL)
    (delivery,) = route(channel, 0.0, WALL)[1]
    p.set_paused(True)
    p.publish([b"two"], WALL)
    channel.requeue(1, delivery.record.internal_id, 0, 0.0)
    assert [d.record.body for d in route(channel, 0.0, WALL)[1]] == [b"one"]
    assert route(channel, 0.0, WALL) == {}
    p.set_paused(False)
    assert [d.record.body for d in route(channel, 0.0, WALL)[1]] == [b"two"]


def test_ephemeral_topic_holds_at_most_mem_queue_size_without_a_channel() -> None:
    p = partition(ephemeral=True, mem_queue_size=3)
    assert len(p.publish([b"1", b"2"], WALL)) == 2
    assert len(p.publish([b"3", b"4", b"5"], WALL)) == 1
    assert p.dropped == 2
    assert drain(p, "c", 1) == [b"1", b"2", b"3"]
    assert len(p.publish([b"6", b"7", b"8", b"9"], WALL)) == 4  # fanned out: the channel's now


def test_ephemeral_channel_keeps_the_oldest_mem_queue_size_and_drops_newer() -> None:
    p = partition(mem_queue_size=3)
    p.channel("durable")
    tail = p.channel("tail#ephemeral")
    p.publish([b"%d" % i for i in range(10)], WALL)
    assert tail.depth == 3
    assert p.dropped == 7
    assert drain(p, "tail#ephemeral", 1) == [b"0", b"1", b"2"]
    assert drain(p, "durable", 2) == [b"%d" % i for i in range(10)]  # others lose nothing


def test_an_idle_ephemeral_channel_does_not_pin_the_log() -> None:
    p = partition(mem_queue_size=2)
    p.channel("idle#ephemeral")
    p.publish([b"x"] * 100, WALL)
    assert p.release() == 100  # the feed holds its two; the log keeps nothing for it
    assert p.channel("idle#ephemeral").depth == 2


def test_ephemeral_channel_gets_what_a_paused_topic_held_at_unpause() -> None:
    p = partition(mem_queue_size=5)
    tail = p.channel("tail#ephemeral")
    p.set_paused(True)
    p.publish([b"a", b"b"], WALL)
    assert tail.depth == 0
    assert p.held() == 2
    p.release()
    p.set_paused(False)
    assert drain(p, "tail#ephemeral", 1) == [b"a", b"b"]


def test_a_channel_created_during_a_pause_gets_what_the_pause_held() -> None:
    p = partition()
    p.channel("first")
    p.set_paused(True)
    p.publish([b"held"], WALL)
    late = p.channel("late")
    assert late.depth == 1
    p.set_paused(False)
    assert drain(p, "late", 1) == [b"held"]
    assert drain(p, "first", 2) == [b"held"]


def test_topic_empty_and_statistics() -> None:
    topic = Topic("orders", max_msg_timeout=900.0, mem_queue_size=10)
    (p,) = topic.partitions
    p.publish([b"a", b"bb"], WALL)
    stats = topic.statistics()
    assert (stats.depth, stats.message_count, stats.message_bytes) == (2, 2, 3)
    assert p.empty() == 2  # no channel yet: the topic holds them, and drops them
    assert p.channel("c").depth == 0
    p.publish([b"c"], WALL)
    assert p.empty() == 0  # fanned out: the channel's now
    assert p.channel("c").depth == 1
    topic.set_paused(True)
    assert topic.statistics().paused
    assert Topic("x#ephemeral", max_msg_timeout=1.0, mem_queue_size=1).ephemeral
