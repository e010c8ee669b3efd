"""Channel semantics (spec semantics.md §5, §7, §10; design §6), time passed in."""

from __future__ import annotations

import random

import pytest

from trionsq.broker.channel import WAITING_LIMIT, Channel, Consumer, Delivery
from trionsq.dispatch.routing import route
from trionsq.queues.ephemeral import EphemeralFeed
from trionsq.queues.inflight import NOT_IN_FLIGHT, NOT_OWNER, InFlightError
from trionsq.queues.memory_log import MemoryLog

WALL = 1_700_000_000_000_000_000


def make(count: int = 0, **kwargs: object) -> tuple[MemoryLog, Channel]:
    log = MemoryLog()
    if count:
        log.append([b"m%d" % i for i in range(count)], timestamp=WALL)
    channel = Channel("ch", log, log.start_id, max_msg_timeout=900.0, **kwargs)  # type: ignore[arg-type]
    return log, channel


def ids(deliveries: list[Delivery]) -> list[int]:
    return [d.record.internal_id for d in deliveries]


def consumer(client_id: int, rdy: int, **kwargs: object) -> Consumer:
    c = Consumer(client_id, msg_timeout=60.0, **kwargs)  # type: ignore[arg-type]
    c.rdy = rdy
    return c


def test_rdy_is_a_window_over_in_flight() -> None:
    _, ch = make(5)
    ch.subscribe(consumer(1, 2))
    first = route(ch, 0.0, WALL)
    assert ids(first[1]) == [1, 2]
    assert route(ch, 0.0, WALL) == {}  # window full
    ch.finish(1, 1)
    assert ids(route(ch, 0.0, WALL)[1]) == [3]
    assert [d.attempts for d in first[1]] == [1, 1]
    assert ch.depth == 2


def test_competing_consumers_each_message_once() -> None:
    _, ch = make(100)
    for client in (1, 2, 3):
        ch.subscribe(consumer(client, 1000))
    got = route(ch, 0.0, WALL)
    all_ids = sorted(i for ds in got.values() for i in ids(ds))
    assert all_ids == list(range(1, 101))
    assert sorted(len(ds) for ds in got.values()) == [33, 33, 34]


def test_fin_needs_the_owner_and_a_message_in_flight() -> None:
    _, ch = make(1)
    ch.subscribe(consumer(1, 1))
    ch.subscribe(consumer(2, 1))
    (owner,) = route(ch, 0.0, WALL)
    other = 2 if owner == 1 else 1
    with pytest.raises(InFlightError) as not_owner:
        ch.finish(other, 1)
    assert not_owner.value.reason == NOT_OWNER
    ch.finish(owner, 1)
    with pytest.raises(InFlightError) as gone:
        ch.finish(owner, 1)
    assert gone.value.reason == NOT_IN_FLIGHT
    assert ch.cursor.confirmed_id == 2


def sent(deliveries: dict[int, list[Delivery]], client: int = 1) -> list[tuple[int, int]]:
    return [(d.record.internal_id, d.attempts) for d in deliveries.get(client, [])]


def drain_one_by_one(ch: Channel, now: float = 0.0, client: int = 1) -> list[tuple[int, int]]:
    """Route and FIN one message at a time (RDY 1) until nothing comes."""
    seen: list[tuple[int, int]] = []
    while got := sent(route(ch, now, WALL), client):
        seen += got
        for internal_id, _ in got:
            ch.finish(client, internal_id)
    return seen


def test_req_zero_goes_behind_the_waiting_messages_with_attempts_kept() -> None:
    """nsqd's channel put: a REQ 0 message waits behind the unread backlog (design §6)."""
    _, ch = make(3)
    ch.subscribe(consumer(1, 1))
    assert ids(route(ch, 0.0, WALL)[1]) == [1]
    ch.requeue(1, 1, delay=0, now=1.0)
    assert ch.depth == 3
    assert drain_one_by_one(ch, 1.0) == [(2, 1), (3, 1), (1, 2)]
    assert ch.requeue_count == 1
    assert ch.consumers[1].requeue_count == 1
    assert ch.cursor.confirmed_id == 4


def test_timeout_goes_behind_the_waiting_messages() -> None:
    """RDY 1, two messages, the first times out: the second, then the first again."""
    _, ch = make(2)
    ch.subscribe(consumer(1, 1))
    assert sent(route(ch, 0.0, WALL)) == [(1, 1)]
    assert ch.expire(60.0) == 1
    assert drain_one_by_one(ch, 60.0) == [(2, 1), (1, 2)]


def test_messages_published_after_a_put_back_go_behind_it() -> None:
    log, ch = make(2)
    ch.subscribe(consumer(1, 1))
    route(ch, 0.0, WALL)
    ch.requeue(1, 1, delay=0, now=1.0)
    log.append([b"later", b"later still"], timestamp=WALL)
    assert drain_one_by_one(ch, 1.0) == [(2, 1), (1, 2), (3, 1), (4, 1)]


def test_put_back_messages_keep_their_order_among_new_ones_in_one_batch() -> None:
    log, ch = make(4)
    ch.subscribe(consumer(1, 2))
    assert ids(route(ch, 0.0, WALL)[1]) == [1, 2]
    ch.requeue(1, 2, delay=0, now=1.0)  # gate: after 3 and 4
    log.append([b"m4"], timestamp=WALL)  # id 5: behind both put back
    ch.expire(60.0)  # 1 times out: behind 3, 4 and 5 (gate 6), after 2
    ch.set_rdy(1, 10)
    assert sent(route(ch, 60.0, WALL)) == [(3, 1), (4, 1), (2, 2), (5, 1), (1, 2)]


def test_a_deep_backlog_lets_only_the_redelivery_window_go_first() -> None:
    _, ch = make(10, redelivery_window=3)
    ch.subscribe(consumer(1, 1))
    route(ch, 0.0, WALL)
    ch.requeue(1, 1, delay=0, now=1.0)
    assert drain_one_by_one(ch, 1.0) == [(2, 1), (3, 1), (4, 1), (1, 2)] + [
        (i, 1) for i in range(5, 11)
    ]


def test_a_departing_consumers_messages_go_behind_the_waiting_ones() -> None:
    _, ch = make(4)
    ch.subscribe(consumer(1, 2))
    route(ch, 0.0, WALL)
    ch.subscribe(consumer(2, 1))
    assert [r.internal_id for r in ch.unsubscribe(1)] == [1, 2]
    assert drain_one_by_one(ch, client=2) == [(3, 1), (4, 1), (1, 2), (2, 2)]


def test_a_due_deferral_goes_behind_the_waiting_messages() -> None:
    _, ch = make(3)
    ch.subscribe(consumer(1, 1))
    route(ch, 0.0, WALL)
    ch.requeue(1, 1, delay=30.0, now=10.0)
    ch.expire(40.0)
    assert drain_one_by_one(ch, 40.0) == [(2, 1), (3, 1), (1, 2)]


def test_an_ephemeral_feed_puts_back_behind_its_waiting_records() -> None:
    log = MemoryLog()
    feed = EphemeralFeed(capacity=3, next_offer_id=1)
    ch = Channel("c#ephemeral", log, 1, max_msg_timeout=900.0, feed=feed)
    feed.offer(log.append([b"a", b"b", b"c", b"dropped"], timestamp=WALL))  # 4: no room
    ch.subscribe(consumer(1, 1))
    route(ch, 0.0, WALL)
    ch.requeue(1, 1, delay=0, now=1.0)
    feed.offer(log.append([b"e"], timestamp=WALL))
    assert [(internal_id, n) for internal_id, n in drain_one_by_one(ch, 1.0)] == [
        (2, 1),
        (3, 1),
        (1, 2),
        (5, 1),
    ]


def test_a_put_back_tagged_message_waits_behind_its_tag_queue() -> None:
    log, ch = make()
    red = b'{"##client_dispatch_tag":"red"}'
    log.append([b"r1", b"r2", b"r3"], timestamp=WALL, ext_version=4, exts=[red] * 3)
    ch.subscribe(consumer(1, 1, tag="red"))
    ch.subscribe(consumer(2, 5))  # untagged: room for the batch, none for red messages
    assert sent(route(ch, 0.0, WALL)) == [(1, 1)]  # 2 and 3 wait in red's queue
    ch.requeue(1, 1, delay=0, now=1.0)
    assert drain_one_by_one(ch, 1.0) == [(2, 1), (3, 1), (1, 2)]


def test_a_put_back_message_is_not_held_when_the_cursor_cannot_read_on() -> None:
    """More than WAITING_LIMIT messages wait for a busy tag holder: reading stops, so
    an untagged redelivery goes out instead of waiting for records not coming."""
    log, ch = make(1, redelivery_window=3 * WAITING_LIMIT)
    ch.subscribe(consumer(1, 300))
    ch.subscribe(consumer(2, 0, tag="red"))
    assert sent(route(ch, 0.0, WALL)) == [(1, 1)]
    red = b'{"##client_dispatch_tag":"red"}'
    count = 2 * WAITING_LIMIT
    log.append([b"r"] * count, timestamp=WALL, ext_version=4, exts=[red] * count)
    ch.requeue(1, 1, delay=0, now=1.0)
    passes = 0
    while not (got := sent(route(ch, 1.0, WALL))):
        passes += 1
        assert passes < 100
    assert got == [(1, 2)]
    assert WAITING_LIMIT <= ch.statistics().depth - ch.cursor.backlog < count


def test_ordered_channel_redelivers_the_same_message_first() -> None:
    """SUB_ORDERED keeps its own rule: the message put back goes out before newer ones."""
    _, ch = make(3, ordered=True)
    ch.subscribe(consumer(1, 100))
    assert sent(route(ch, 0.0, WALL)) == [(1, 1)]
    ch.requeue(1, 1, delay=0, now=1.0)
    assert sent(route(ch, 1.0, WALL)) == [(1, 2)]
    assert ch.expire(61.0) == 1
    assert sent(route(ch, 61.0, WALL)) == [(1, 3)]
    ch.finish(1, 1)
    assert sent(route(ch, 61.0, WALL)) == [(2, 1)]


def test_req_with_delay_is_deferred_until_due() -> None:
    _, ch = make(1)
    ch.subscribe(consumer(1, 5))
    route(ch, 0.0, WALL)
    ch.requeue(1, 1, delay=30.0, now=10.0)
    assert ch.next_deadline() == 40.0
    assert ch.statistics().deferred_count == 1
    assert route(ch, 20.0, WALL) == {}
    assert ch.expire(39.9) == 0
    assert ch.expire(40.0) == 1
    assert [(d.record.internal_id, d.attempts) for d in route(ch, 40.0, WALL)[1]] == [(1, 2)]


def test_timeout_requeues_and_counts() -> None:
    _, ch = make(1)
    ch.subscribe(consumer(1, 1))
    route(ch, 0.0, WALL)
    assert ch.next_deadline() == 60.0
    ch.touch(1, 1, now=50.0)
    assert ch.next_deadline() == 110.0
    assert ch.expire(110.0) == 1
    assert (ch.timeout_count, ch.consumers[1].timeout_count) == (1, 1)
    redelivered = route(ch, 110.0, WALL)[1]
    assert [d.attempts for d in redelivered] == [2]


def test_departing_consumer_requeues_at_once() -> None:
    _, ch = make(4)
    ch.subscribe(consumer(1, 4))
    route(ch, 0.0, WALL)
    ch.subscribe(consumer(2, 4))
    assert [r.internal_id for r in ch.unsubscribe(1)] == [1, 2, 3, 4]
    assert len(ch.in_flight) == 0
    got = route(ch, 0.0, WALL)[2]
    assert [(d.record.internal_id, d.attempts) for d in got] == [(1, 2), (2, 2), (3, 2), (4, 2)]


def test_pause_holds_everything_and_cls_stops_deliveries() -> None:
    _, ch = make(2)
    ch.subscribe(consumer(1, 5))
    ch.paused = True
    assert route(ch, 0.0, WALL) == {}
    ch.paused = False
    ch.start_close(1)
    assert route(ch, 0.0, WALL) == {}
    ch.set_rdy(1, 5)  # ignored while closing
    assert route(ch, 0.0, WALL) == {}


def test_dpub_is_held_until_its_time() -> None:
    log, ch = make()
    ch.subscribe(consumer(1, 5))
    log.append([b"later"], timestamp=WALL, deliver_at=WALL + 5_000_000_000)
    log.append([b"now"], timestamp=WALL)
    assert [d.record.body for d in route(ch, 100.0, WALL)[1]] == [b"now"]
    assert ch.next_deadline() == 105.0  # the DPUB, before the in-flight one's 160
    assert ch.in_flight.next_deadline() == 160.0
    ch.expire(105.0)
    assert [d.record.body for d in route(ch, 105.0, WALL)[1]] == [b"later"]
    assert ch.message_count == 2


def test_tagged_consumers_get_their_tag_and_untagged_messages_wait() -> None:
    log, ch = make()
    log.append([b"a"], timestamp=WALL, ext_version=4, exts=[b'{"##client_dispatch_tag":"red"}'])
    log.append([b"b"], timestamp=WALL, ext_version=4, exts=[b'{"k":"v"}'])
    ch.subscribe(consumer(1, 5, tag="red"))
    got = route(ch, 0.0, WALL)
    assert [d.record.body for d in got[1]] == [b"a"]
    assert ch.depth == 1  # the untagged one waits for an untagged consumer
    ch.subscribe(consumer(2, 5))
    assert [d.record.body for d in route(ch, 0.0, WALL)[2]] == [b"b"]


def test_ordered_channel_has_one_in_flight() -> None:
    _, ch = make(3, ordered=True)
    ch.subscribe(consumer(1, 100))
    assert ids(route(ch, 0.0, WALL)[1]) == [1]
    assert route(ch, 0.0, WALL) == {}
    ch.finish(1, 1)
    assert ids(route(ch, 0.0, WALL)[1]) == [2]


def test_sample_rate_drops_the_rest_for_this_channel() -> None:
    _, ch = make(1000, rng=random.Random(7))
    ch.subscribe(consumer(1, 2000, sample_rate=10))
    got: list[Delivery] = []
    while ch.depth:
        got += route(ch, 0.0, WALL).get(1, [])
    assert 50 < len(got) < 170  # about 11% (r <= 10 of 0..99)
    assert ch.depth == 0
    for d in got:
        ch.finish(1, d.record.internal_id)
    assert ch.cursor.confirmed_id == 1001  # dropped ones count as done


def test_empty_drops_everything() -> None:
    log, ch = make(10)
    ch.subscribe(consumer(1, 3))
    route(ch, 0.0, WALL)
    ch.empty()
    stats = ch.statistics()
    assert (stats.depth, stats.in_flight_count, stats.deferred_count) == (0, 0, 0)
    log.append([b"new"], timestamp=WALL)
    assert [d.record.body for d in route(ch, 0.0, WALL)[1]] == [b"new"]


def test_a_record_deferred_ahead_of_the_cursor_is_skipped_when_read() -> None:
    log, ch = make(3)
    ch.subscribe(consumer(1, 10))
    (dpub,) = log.append([b"later"], timestamp=WALL, deliver_at=WALL + 5_000_000_000)
    ch.defer_ahead(dpub, due=5.0, now=0.0, wall_ns=WALL)
    stats = ch.statistics()
    assert (stats.depth, stats.deferred_count) == (3, 1)  # deferred at once, as nsqd counts
    assert ids(route(ch, 0.0, WALL)[1]) == [1, 2, 3]  # the cursor passes it without delivering
    assert ch.depth == 0
    ch.expire(5.0)
    (late,) = route(ch, 5.0, WALL + 5_000_000_000)[1]
    assert late.record.internal_id == 4
    for key in (1, 2, 3, 4):
        ch.finish(1, key)
    assert ch.cursor.confirmed_id == 5


def test_a_record_finished_before_the_cursor_reaches_it_is_confirmed_then() -> None:
    log, ch = make(0, redelivery_window=0)
    ch.subscribe(consumer(1, 1))
    first, dpub = log.append([b"first", b"later"], timestamp=WALL)
    ch.defer_ahead(dpub, due=1.0, now=0.0, wall_ns=WALL)
    ch.expire(1.0)  # due before the cursor got past "first"; no window: out of order
    (early,) = route(ch, 1.0, WALL)[1]
    assert early.record is dpub
    ch.finish(1, dpub.internal_id)
    assert ch.cursor.confirmed_id == 1  # not yet: the cursor has not passed it
    (then,) = route(ch, 1.0, WALL)[1]
    assert then.record is first
    ch.finish(1, first.internal_id)
    assert route(ch, 1.0, WALL) == {}
    assert ch.cursor.confirmed_id == 3  # both confirmed once the cursor passed them
