"""The expiry timer wakes at exact virtual times and moves earlier without polling."""

from __future__ import annotations

import math

import trio
import trio.testing

from trionsq.dispatch.expiry import ExpiryTimer
from trionsq.queues.inflight import InFlightTable


class Harness:
    """An in-flight table driven by an ExpiryTimer, recording when things expire."""

    def __init__(self) -> None:
        self.table: InFlightTable[int] = InFlightTable(max_msg_timeout=900)
        self.timer = ExpiryTimer()
        self.expired: list[tuple[int, float]] = []

    def deliver(self, key: int, timeout: float) -> None:
        deadline = self.table.add(key, key, client=1, now=trio.current_time(), timeout=timeout)
        self.timer.schedule(deadline)

    def fire(self, now: float) -> None:
        self.expired.extend((e.key, now) for e in self.table.pop_expired(now))


async def test_timeouts_fire_at_their_exact_deadlines(
    autojump_clock: trio.testing.MockClock,
) -> None:
    h = Harness()
    async with trio.open_nursery() as nursery:
        await nursery.start(h.timer.run, h.table.next_deadline, h.fire)
        t0 = trio.current_time()
        assert h.timer.deadline == math.inf  # nothing in flight: sleeps without a deadline
        h.deliver(1, 60)
        h.deliver(2, 30)  # earlier: lowers the sleeping scope's deadline
        h.deliver(3, 90)
        await trio.sleep(100)
        assert h.expired == [(2, t0 + 30), (1, t0 + 60), (3, t0 + 90)]
        assert h.timer.wakeups == 3
        assert h.timer.deadline == math.inf
        nursery.cancel_scope.cancel()


async def test_touch_and_finish_move_the_wakeup(autojump_clock: trio.testing.MockClock) -> None:
    h = Harness()
    async with trio.open_nursery() as nursery:
        await nursery.start(h.timer.run, h.table.next_deadline, h.fire)
        t0 = trio.current_time()
        h.deliver(1, 60)
        h.deliver(2, 60)
        await trio.sleep(50)
        h.table.touch(
            1, client=1, now=trio.current_time(), timeout=60
        )  # later: no reschedule needed
        h.table.finish(2, client=1)
        await trio.sleep(200)
        # the t0+60 wake-up finds nothing due (stale), re-reads and sleeps to t0+110
        assert h.expired == [(1, t0 + 110)]
        nursery.cancel_scope.cancel()


async def test_deadline_in_the_past_fires_immediately(
    autojump_clock: trio.testing.MockClock,
) -> None:
    h = Harness()
    async with trio.open_nursery() as nursery:
        await nursery.start(h.timer.run, h.table.next_deadline, h.fire)
        t0 = trio.current_time()
        h.deliver(1, 0)
        await trio.testing.wait_all_tasks_blocked()
        assert h.expired == [(1, t0)]
        nursery.cancel_scope.cancel()


async def test_cancelling_the_parent_ends_the_task(autojump_clock: trio.testing.MockClock) -> None:
    h = Harness()
    with trio.move_on_after(5):
        async with trio.open_nursery() as nursery:
            await nursery.start(h.timer.run, h.table.next_deadline, h.fire)
            h.deliver(1, 60)
    assert trio.current_time() == 5  # the outer cancel was not swallowed by the timer's scope
    assert h.expired == []
