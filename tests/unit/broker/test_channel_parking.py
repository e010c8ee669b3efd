"""Long delays in a durable channel: parked in its delay store, counted finished by
the cursor (no segment pinned), fired from the deferred heap, let go when done."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trionsq.broker.channel import PARK_AFTER, Channel, Consumer
from trionsq.dispatch.routing import route
from trionsq.queues.delay_store import DelayStore
from trionsq.queues.memory_log import MemoryLog

if TYPE_CHECKING:
    from pathlib import Path

WALL = 1_700_000_000_000_000_000
DAY = 86_400.0
DAY_NS = 86_400_000_000_000


def make(tmp_path: Path, count: int = 0) -> tuple[MemoryLog, Channel, DelayStore]:
    log = MemoryLog()
    if count:
        log.append([b"m%d" % i for i in range(count)], timestamp=WALL)
    store, _ = DelayStore.open(tmp_path / "ch.delays")
    channel = Channel("ch", log, log.start_id, max_msg_timeout=900.0, delays=store)
    consumer = Consumer(1, msg_timeout=60.0)
    consumer.rdy = 100
    channel.subscribe(consumer)
    return log, channel, store


def parked_on_disk(store: DelayStore) -> dict[int, int]:
    reopened, parked = DelayStore.open(store.path)
    reopened.close()
    return {message.internal_id: message.due_ns for message in parked}


def test_a_long_dpub_read_by_the_cursor_is_parked_and_confirmed(tmp_path: Path) -> None:
    log, ch, store = make(tmp_path)
    log.append([b"later"], timestamp=WALL, deliver_at=WALL + 2 * DAY_NS)
    log.append([b"now"], timestamp=WALL)
    (now,) = route(ch, 0.0, WALL)[1]
    ch.finish(1, now.record.internal_id)
    assert ch.cursor.confirmed_id == 3  # the parked DPUB holds nothing back
    assert parked_on_disk(store) == {1: WALL + 2 * DAY_NS}
    assert ch.statistics().deferred_count == 1
    assert ch.next_deadline() == 2 * DAY
    assert ch.expire(2 * DAY - 1) == 0
    assert ch.expire(2 * DAY) == 1
    (fired,) = route(ch, 2 * DAY, WALL + 2 * DAY_NS)[1]
    assert fired.record.body == b"later"
    assert parked_on_disk(store) == {1: WALL + 2 * DAY_NS}  # until FIN: at-least-once
    ch.finish(1, 1)
    assert parked_on_disk(store) == {}
    assert ch.cursor.confirmed_id == 3
    assert ch.parked == set()


def test_a_short_dpub_stays_in_the_cursor_as_before(tmp_path: Path) -> None:
    log, ch, store = make(tmp_path)
    log.append([b"soon"], timestamp=WALL, deliver_at=WALL + int(PARK_AFTER * 1e9))
    assert route(ch, 0.0, WALL) == {}
    assert ch.cursor.confirmed_id == 1  # held back for at most a minute
    assert len(store) == 0
    assert not store.path.exists()


def test_a_dpub_deferred_at_publish_is_parked_and_skipped_by_the_cursor(
    tmp_path: Path,
) -> None:
    log, ch, store = make(tmp_path)
    (dpub,) = log.append([b"later"], timestamp=WALL, deliver_at=WALL + DAY_NS)
    ch.defer_ahead(dpub, DAY, now=0.0, wall_ns=WALL)
    assert parked_on_disk(store) == {1: WALL + DAY_NS}
    assert route(ch, 0.0, WALL) == {}
    assert ch.cursor.confirmed_id == 2
    assert ch.depth == 0


def test_a_long_req_parks_and_a_short_one_keeps_it_parked(tmp_path: Path) -> None:
    _, ch, store = make(tmp_path, 2)
    route(ch, 0.0, WALL)
    ch.requeue(1, 1, 2 * DAY, 0.0, WALL)
    assert parked_on_disk(store) == {1: WALL + 2 * DAY_NS}
    ch.finish(1, 2)
    assert ch.cursor.confirmed_id == 3
    ch.expire(2 * DAY)
    (again,) = route(ch, 2 * DAY, WALL + 2 * DAY_NS)[1]
    assert again.attempts == 2
    ch.requeue(1, 1, 3 * DAY, 2 * DAY, WALL + 2 * DAY_NS)  # parked again: this one wins
    assert parked_on_disk(store) == {1: WALL + 5 * DAY_NS}
    ch.expire(5 * DAY)
    (third,) = route(ch, 5 * DAY, WALL + 5 * DAY_NS)[1]
    assert third.attempts == 3
    ch.requeue(1, 1, 5.0, 5 * DAY, WALL + 5 * DAY_NS)  # short: the heap only
    assert parked_on_disk(store) == {1: WALL + 5 * DAY_NS}
    ch.expire(5 * DAY + 5)
    route(ch, 5 * DAY + 5, WALL)
    ch.finish(1, 1)
    assert parked_on_disk(store) == {}
    assert ch.cursor.confirmed_id == 3


def test_empty_clears_the_store(tmp_path: Path) -> None:
    _, ch, store = make(tmp_path, 1)
    route(ch, 0.0, WALL)
    ch.requeue(1, 1, DAY, 0.0, WALL)
    ch.empty()
    assert parked_on_disk(store) == {}
    assert ch.statistics().deferred_count == 0
    assert ch.parked == set()


def test_a_parked_message_past_its_dead_letter_bound_is_let_go(tmp_path: Path) -> None:
    _, ch, store = make(tmp_path, 1)
    ch.max_attempts = 2
    route(ch, 0.0, WALL)
    ch.requeue(1, 1, DAY, 0.0, WALL)
    assert parked_on_disk(store) == {1: WALL + DAY_NS}
    ch.expire(DAY)
    route(ch, DAY, WALL + DAY_NS)
    ch.requeue(1, 1, 0.0, DAY, WALL + DAY_NS)  # second delivery put back: dead now
    assert [letter.record.internal_id for letter in ch.dead_letters] == [1]
    assert parked_on_disk(store) == {1: WALL + DAY_NS}  # until it is in the dead topic
    ch.dead_letters_moved(ch.dead_letters)
    assert parked_on_disk(store) == {}


def test_restore_parked_gives_it_back_and_the_cursor_skips_it(tmp_path: Path) -> None:
    log, _, store = make(tmp_path)
    (dpub,) = log.append([b"later"], timestamp=WALL, deliver_at=WALL + DAY_NS)
    log.append([b"plain"], timestamp=WALL)
    store.close()
    reopened, parked = DelayStore.open(store.path)
    assert parked == []
    reopened.park(1, WALL + DAY_NS, 3, dpub)
    reopened.close()
    # a restarted channel: cursor back at 1, the store's entry given back
    store, parked = DelayStore.open(store.path)
    restarted = Channel("ch", log, 1, max_msg_timeout=900.0, delays=store)
    consumer = Consumer(1, msg_timeout=60.0)
    consumer.rdy = 10
    restarted.subscribe(consumer)
    (message,) = parked
    restarted.restore_parked(message.record, 100.0, message.attempts)
    assert [d.record.body for d in route(restarted, 0.0, WALL)[1]] == [b"plain"]
    restarted.finish(1, 2)
    assert restarted.cursor.confirmed_id == 3
    restarted.expire(100.0)
    (fired,) = route(restarted, 100.0, WALL + DAY_NS)[1]
    assert (fired.record.body, fired.attempts) == (b"later", 4)
    restarted.finish(1, 1)
    assert parked_on_disk(store) == {}


def test_without_a_store_nothing_is_parked() -> None:
    log = MemoryLog()
    log.append([b"later"], timestamp=WALL, deliver_at=WALL + DAY_NS)
    ch = Channel("ch", log, 1, max_msg_timeout=900.0)
    consumer = Consumer(1, msg_timeout=60.0)
    consumer.rdy = 1
    ch.subscribe(consumer)
    assert route(ch, 0.0, WALL) == {}
    assert ch.cursor.confirmed_id == 1  # in memory: held as before
    assert ch.parked == set()
