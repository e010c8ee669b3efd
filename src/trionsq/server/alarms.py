"""One task that wakes the idle connections' pumps at their due times.

A pump that waits with a timeout needs a cancel scope for as long as it waits: the
scope, its status and the status's two sets are about 0.8 KB, a tenth of an idle
connection (issue 14 measured 10,000 idle connections). An idle pump instead leaves
an :class:`Alarm` here, a small entry in one heap, and parks with no scope at
all; this task sleeps until the earliest alarm (a deadline, not a polling loop) and
calls the target's ``alarm()`` when it is due. Busy pumps, which wait only for a
flush deadline a fraction of a second away, keep their own short-lived scopes.
"""

from __future__ import annotations

import itertools
import math
from heapq import heappop, heappush
from typing import Protocol

import trio

__all__ = ["Alarm", "AlarmClock", "Wakeable"]


class Wakeable(Protocol):
    """What an alarm wakes (a connection's session)."""

    def alarm(self) -> None:
        """Called from the clock's task when the alarm is due; must not block."""


class Alarm:
    """One due time in the clock's heap, ordered by time, then by when it was set.
    :meth:`AlarmClock.cancel` only drops the target (no search of the heap); the
    entry itself goes when its time comes."""

    __slots__ = ("due", "sequence", "target")

    def __init__(self, due: float, sequence: int, target: Wakeable) -> None:
        self.due = due
        self.sequence = sequence
        self.target: Wakeable | None = target

    def __lt__(self, other: Alarm) -> bool:
        return (self.due, self.sequence) < (other.due, other.sequence)


class AlarmClock:
    """The alarms of every connection of one broker, and the task that rings them."""

    __slots__ = ("_heap", "_sequence", "_sleeper", "_sleeping_until")

    def __init__(self) -> None:
        self._heap: list[Alarm] = []
        self._sequence = itertools.count()
        self._sleeper: trio.lowlevel.Task | None = None
        """The clock's task while it waits for an alarm to be added."""
        self._sleeping_until = math.inf

    def __len__(self) -> int:
        """Alarms in the heap, cancelled ones included until their time."""
        return len(self._heap)

    def set(self, due: float, target: Wakeable) -> Alarm:
        """Call ``target.alarm()`` at ``due`` (trio time), unless cancelled before."""
        alarm = Alarm(due, next(self._sequence), target)
        heappush(self._heap, alarm)
        if due < self._sleeping_until:
            self._sleeping_until = due
            sleeper = self._sleeper
            if sleeper is not None:  # it sleeps until later: it must look again
                self._sleeper = None
                trio.lowlevel.reschedule(sleeper)
        return alarm

    def cancel(self, alarm: Alarm) -> None:
        """The alarm rings for nobody; its target is not kept alive by the heap. If the
        clock sleeps until it, the clock looks again now (no jump of a mock clock) and
        sleeps until the next live alarm instead of waking at this one for nothing."""
        alarm.target = None
        sleeper = self._sleeper
        if sleeper is not None and alarm.due == self._sleeping_until:
            self._sleeper = None
            trio.lowlevel.reschedule(sleeper)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Ring every due alarm, then sleep until the next one or a new earlier one."""
        task_status.started()
        heap = self._heap
        while True:
            now = trio.current_time()
            while heap and (heap[0].due <= now or heap[0].target is None):
                target = heappop(heap).target  # a cancelled one goes before its time
                if target is not None:
                    target.alarm()
            until = heap[0].due if heap else math.inf
            self._sleeping_until = until
            with trio.move_on_at(until):
                self._sleeper = trio.lowlevel.current_task()
                await trio.lowlevel.wait_task_rescheduled(self._woken_early)

    def _woken_early(self, _: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        """The sleep ended by its deadline or by the broker's end."""
        self._sleeper = None
        return trio.lowlevel.Abort.SUCCEEDED
