"""The per-channel expiry timer: one task that sleeps until the earliest deadline.

Design §5 replaces nsqd's 100 ms queue scan. The task sleeps inside a CancelScope
whose deadline is the earliest in-flight or deferred deadline; an earlier deadline
arriving just lowers ``scope.deadline`` (no checkpoint, no polling, no task per
message). When the scope's deadline passes the task calls ``fire(now)``, which
requeues what expired, then sleeps again until the next deadline.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["ExpiryTimer"]


class ExpiryTimer:
    """Wakes one task at the earliest of a moving set of deadlines."""

    def __init__(self) -> None:
        self._scope: trio.CancelScope | None = None
        self.wakeups = 0
        """How many times ``fire`` was called (for statistics and tests)."""

    @property
    def deadline(self) -> float:
        """When the task will wake next (``inf``: not until something is scheduled)."""
        return self._scope.deadline if self._scope is not None else math.inf

    def schedule(self, deadline: float) -> None:
        """Make sure the task wakes by ``deadline``. Not a checkpoint; safe to call often."""
        scope = self._scope
        if scope is not None and deadline < scope.deadline:
            scope.deadline = deadline

    async def run(
        self,
        next_deadline: Callable[[], float | None],
        fire: Callable[[float], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Sleep until the earliest deadline, ``fire(now)``, repeat; runs until cancelled.

        ``next_deadline()`` gives the earliest pending deadline (None: none).
        ``fire(now)`` must handle everything due at ``now``; it is synchronous, so no
        other task runs between waking and re-reading the next deadline.
        """
        started = False
        while True:
            upcoming = next_deadline()
            with trio.CancelScope(deadline=math.inf if upcoming is None else upcoming) as scope:
                self._scope = scope
                if not started:
                    started = True
                    task_status.started()
                await trio.sleep_forever()
            self._scope = None
            if scope.cancelled_caught:
                self.wakeups += 1
                fire(trio.current_time())
