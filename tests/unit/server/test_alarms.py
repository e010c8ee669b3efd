"""The alarm clock that wakes idle pumps: rings at the due time (MockClock, not
sleeps), in order, never for a cancelled alarm, and wakes early for an earlier one."""

from __future__ import annotations

import gc
import weakref

import trio
import trio.testing

from trionsq.server.alarms import AlarmClock


class Ringer:
    """A target that notes when it was woken."""

    def __init__(self, name: str, rung: list[tuple[str, float]]) -> None:
        self.name = name
        self.rung = rung

    def alarm(self) -> None:
        self.rung.append((self.name, trio.current_time()))


async def test_alarms_ring_at_their_due_times_in_order(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    clock = AlarmClock()
    await nursery.start(clock.run)
    rung: list[tuple[str, float]] = []
    start = trio.current_time()
    clock.set(start + 30, Ringer("late", rung))
    clock.set(start + 5, Ringer("early", rung))  # earlier than the clock's sleep
    await trio.sleep(10)
    assert rung == [("early", start + 5)]
    await trio.sleep(30)
    assert rung == [("early", start + 5), ("late", start + 30)]
    assert len(clock) == 0


async def test_a_cancelled_alarm_rings_for_nobody_and_keeps_nothing_alive(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    clock = AlarmClock()
    await nursery.start(clock.run)
    rung: list[tuple[str, float]] = []
    target = Ringer("gone", rung)
    alarm = clock.set(trio.current_time() + 1, target)
    clock.cancel(alarm)
    gone = weakref.ref(target)
    del target
    gc.collect()
    assert gone() is None  # the heap entry does not hold a closed connection
    await trio.sleep(2)
    assert rung == []
    assert len(clock) == 0


async def test_an_alarm_set_while_the_clock_sleeps_forever_wakes_it(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    clock = AlarmClock()
    await nursery.start(clock.run)
    await trio.sleep(100)  # nothing set: the clock sleeps with no deadline
    rung: list[tuple[str, float]] = []
    due = trio.current_time() + 0.25
    clock.set(due, Ringer("only", rung))
    await trio.sleep(1)
    assert rung == [("only", due)]


class ClockSteps(trio.abc.Instrument):
    """The (virtual) times at which the alarm clock's task ran."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("AlarmClock.run"):
            self.times.append(trio.current_time())


async def test_the_clock_does_not_wake_at_a_cancelled_alarm_s_time(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """A closed connection's heartbeat alarm must not wake an idle broker (issue 34):
    under an autojump clock each such wake-up costs a jump."""
    clock = AlarmClock()
    await nursery.start(clock.run)
    rung: list[tuple[str, float]] = []
    start = trio.current_time()
    closed = clock.set(start + 10, Ringer("closed", rung))
    clock.set(start + 20, Ringer("open", rung))
    steps = ClockSteps()
    trio.lowlevel.add_instrument(steps)
    try:
        clock.cancel(closed)
        await trio.sleep(30)
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert rung == [("open", start + 20)]
    assert start + 10 not in steps.times
    assert len(clock) == 0
