"""TTL sweeps (issue 30): what is past its TTL leaves the channel's depth when it
expires, unread, put back or waiting, with no consumer; time passed in."""

from __future__ import annotations

from trionsq.broker.channel import Channel, Consumer
from trionsq.broker.channel_ttl import SWEEP_SLACK
from trionsq.broker.ttl import TopicTtl
from trionsq.dispatch.routing import route
from trionsq.queues.memory_log import MemoryLog

WALL = 1_700_000_000_000_000_000
SECOND = 10**9


def make(ttl: TopicTtl) -> tuple[MemoryLog, Channel]:
    log = MemoryLog()
    return log, Channel("ch", log, 1, max_msg_timeout=900.0, ttl=ttl)


def test_unread_messages_leave_in_publish_order_when_they_expire() -> None:
    log, channel = make(TopicTtl(ttl_ns=10 * SECOND))
    channel.ttl_arrived(log.append([b"a", b"b"], timestamp=WALL), in_order=True)
    channel.ttl_arrived(log.append([b"c"], timestamp=WALL + 5 * SECOND), in_order=True)
    assert channel.sweep_ttl(0.0, WALL) == 0  # the first sweep: nothing expired yet
    assert channel.ttl_due_ns == WALL + 10 * SECOND
    assert channel.sweep_ttl(10.0, WALL + 10 * SECOND) == 2
    assert (channel.depth, channel.expired_count) == (1, 2)
    assert channel.cursor.confirmed_id == 3  # finished: retention may let them go
    assert channel.ttl_due_ns == WALL + 15 * SECOND
    assert channel.sweep_ttl(15.0, WALL + 15 * SECOND) == 1
    assert channel.depth == 0
    assert channel.ttl_due_ns is None


def test_a_short_header_ttl_leaves_from_behind_longer_ones() -> None:
    log, channel = make(TopicTtl(headers=True))
    records = log.append(
        [b"long", b"short", b"none"],
        timestamp=WALL,
        ext_version=4,
        exts=[b'{"##ttl":"600"}', b'{"##ttl":"1"}', b"{}"],
    )
    channel.ttl_arrived(records, in_order=True)
    assert channel.sweep_ttl(0.0, WALL) == 0
    assert channel.ttl_due_ns == WALL + SECOND  # the short one, behind the long one
    assert channel.sweep_ttl(1.0, WALL + SECOND) == 1
    assert (channel.depth, channel.expired_count) == (2, 1)
    consumer = Consumer(1, msg_timeout=60.0)
    consumer.rdy = 10
    channel.subscribe(consumer)
    sent = route(channel, 1.0, WALL + SECOND)[1]
    assert [d.record.body for d in sent] == [b"long", b"none"]
    channel.finish_many(1, [1, 3])
    assert channel.cursor.confirmed_id == 4


def test_a_message_put_back_brings_its_expiry_forward_and_sweeps_are_spaced() -> None:
    log, channel = make(TopicTtl(ttl_ns=10 * SECOND))
    consumer = Consumer(1, msg_timeout=60.0)
    consumer.rdy = 1
    channel.subscribe(consumer)
    log.append([b"old"], timestamp=WALL)
    route(channel, 0.0, WALL)
    channel.sweep_ttl(0.0, WALL)
    assert channel.ttl_due_ns is None  # in flight: not in the depth
    consumer.rdy = 0
    channel.requeue(1, 1, 0.0, 0.0)
    assert channel.ttl_due_ns == WALL + 10 * SECOND
    log.append([b"new"], timestamp=WALL + 1)  # expires 1 ns after the first
    assert channel.sweep_ttl(10.0, WALL + 10 * SECOND) == 1
    assert channel.ttl_due_ns == WALL + 10 * SECOND + SWEEP_SLACK  # not 1 ns later


def test_with_ttl_dead_letter_and_a_bound_they_leave_for_the_dead_letter_topic() -> None:
    log, channel = make(TopicTtl(ttl_ns=SECOND, dead_letter=True))
    channel.max_attempts = 3
    log.append([b"x"], timestamp=WALL)
    assert channel.sweep_ttl(1.0, WALL + SECOND) == 1
    (letter,) = channel.dead_letters
    assert (letter.record.body, letter.deliveries, letter.reason) == (b"x", 0, "ttl")
    assert channel.depth == 0
    assert channel.cursor.confirmed_id == 1  # until it is in the dead-letter topic
    channel.dead_letters_moved([letter])
    assert channel.cursor.confirmed_id == 2
