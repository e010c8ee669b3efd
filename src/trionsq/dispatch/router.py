"""The router and expiry tasks of one channel (design §3-§5).

The router sleeps on an Event until there is work (a publish, a requeue, an expiry)
or room (RDY, FIN, a new consumer), makes one routing pass over the channel, and
hands each consumer its whole batch with one call: nothing on this path awaits per
message. The expiry task is an :class:`ExpiryTimer` on the channel's earliest
deadline. Both live in the channel's own cancel scope, so deleting the channel is
cancelling that scope.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import trio

from .expiry import ExpiryTimer
from .routing import route

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..broker.channel import Channel

__all__ = ["ChannelRunner"]

COLD_READ_RECORDS = 20_000
"""Records read from disk at once for a channel behind the log's memory tail."""
SWEEP_EARLY_NS = 1_000_000
"""A TTL sweep whose wall-clock time is this close is due: the timer's deadline is
in Trio's clock, converted, and a sweep skipped for a nanosecond would be aimed
again at the same instant."""
REFILL_DELAY = 0.002
"""Seconds from a FIN that freed little of a consumer's window to the pass that
refills it (broker/subscription.py, ``LAZY_REFILL_MIN_RDY``): at pynsq's 30-40k FINs
a second, about 70 messages go out in one batch instead of one by one."""
COLD_READ_RETRY = 1.0
"""Seconds before a cold read the file system refused (no descriptors left, I/O
error) is tried again; the channel waits, the rest of the broker does not."""


class ChannelRunner:
    """Drives one :class:`~trionsq.broker.channel.Channel` from Trio."""

    def __init__(
        self,
        channel: Channel,
        *,
        wall_clock: Callable[[], int] = time.time_ns,
        read_outcome: Callable[[OSError | None], None] | None = None,
        changed: Callable[[], None] | None = None,
        dead_letters: Callable[[Channel], None] | None = None,
    ) -> None:
        self.channel = channel
        self._dead_letters = dead_letters
        """Told after a pass that left dead letters in the channel (the broker
        publishes them to the dead-letter topic)."""
        self._read_outcome = read_outcome
        """Told of each failed cold read, and of the first success after one."""
        self._changed = changed
        """Told after each pass: FINs, REQs, timeouts and deliveries all end in one,
        so the persister hears of every change of the channel's state."""
        self._read_failing = False
        self.timer = ExpiryTimer()
        self.cancel_scope = trio.CancelScope()
        """Cancelling it ends both tasks (channel delete)."""
        self.passes = 0
        """Routing passes made (statistics, tests)."""
        self._wall_clock = wall_clock
        self._work = trio.Event()
        self._soon: float | None = None
        """When :meth:`wake_soon` wants a pass (None: it does not)."""
        self._drained: trio.Event | None = None
        """Set by a routing pass that finds nothing in flight, while someone waits
        in :meth:`drained` (the broker stopping)."""
        self._nursery: trio.Nursery | None = None
        self._prefetch: tuple[int, trio.Event] | None = None
        """The cold read running ahead of the router: its first id, set once installed."""

    def wake(self) -> None:
        """Something changed that may let messages move. Not a checkpoint."""
        self._work.set()

    def wake_soon(self) -> None:
        """A pass within :data:`REFILL_DELAY`, through the expiry timer. Not a checkpoint."""
        if self._soon is None:
            self._soon = soon = trio.current_time() + REFILL_DELAY
            self.timer.schedule(soon)

    def deadline_changed(self) -> None:
        """A deadline may now be earlier (REQ with delay, TOUCH, a TTL): re-aim the
        timer."""
        deadline = self._next_deadline()
        if deadline is not None:
            self.timer.schedule(deadline)

    def _next_deadline(self) -> float | None:
        """The channel's earliest deadline, its next TTL sweep included (kept in wall
        time, as TTLs count from publish times: converted here, with both clocks)."""
        channel = self.channel
        deadline = channel.next_deadline()
        soon = self._soon
        if soon is not None and (deadline is None or soon < deadline):
            deadline = soon
        sweep_ns = channel.ttl_due_ns
        if sweep_ns is None:
            return deadline
        sweep = trio.current_time() + (sweep_ns - self._wall_clock()) / 1e9
        return sweep if deadline is None or sweep < deadline else deadline

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the router and the expiry timer until the cancel scope is cancelled."""
        try:
            with self.cancel_scope:
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    await nursery.start(self.timer.run, self._next_deadline, self._expired)
                    task_status.started()
                    await self._route_forever()
        finally:
            self._nursery = None
            if self._drained is not None:  # deleted: nothing left to wait for
                self._drained.set()

    async def drained(self) -> None:
        """Return once nothing is in flight (every FIN, REQ, timeout and departure
        wakes the router, whose pass looks), or the channel's tasks have ended."""
        while len(self.channel.in_flight) and not self.cancel_scope.cancel_called:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()

    async def _read_cold(self, from_id: int) -> None:
        """A backlog only on disk: read a large chunk in a worker thread, then route it.

        The event loop keeps serving meanwhile; the chunk stays with the log, so the
        next passes read it from memory. The chunk after it is read ahead at once
        (:meth:`_read_ahead`), so the consumers are not left waiting for a read
        between chunks (issue 19: the router stood still for each read before).
        """
        prefetch = self._prefetch
        if prefetch is not None and prefetch[0] == from_id:
            await prefetch[1].wait()
            if not self.channel.log.is_cold(from_id):
                self._read_ahead_of(from_id)
                return
        log = self.channel.log
        records = await trio.to_thread.run_sync(log.read_cold, from_id, COLD_READ_RECORDS)
        log.install_chunk(from_id, records)
        self._read_ahead_of(from_id)

    def _read_ahead_of(self, from_id: int) -> None:
        """Start reading the chunk after the one installed at ``from_id``, if cold."""
        log = self.channel.log
        if self._prefetch is not None or self._nursery is None:
            return
        stop = log.chunk_stop(from_id)
        if stop is None or not log.is_cold(stop):
            return
        done = trio.Event()
        self._prefetch = (stop, done)
        self._nursery.start_soon(self._read_ahead, stop, done)

    async def _read_ahead(self, from_id: int, done: trio.Event) -> None:
        """One chunk read before the router needs it; a failed read is left for the
        router's own read, which reports it."""
        log = self.channel.log
        try:
            try:
                records = await trio.to_thread.run_sync(log.read_cold, from_id, COLD_READ_RECORDS)
            except OSError:
                return
            log.install_chunk(from_id, records)
        finally:
            self._prefetch = None
            done.set()

    def _expired(self, now: float) -> None:
        channel = self.channel
        moved = channel.expire(now)
        soon = self._soon
        if soon is not None and soon <= now:
            self._soon = None
            moved += 1
        sweep_ns = channel.ttl_due_ns
        if sweep_ns is not None:
            wall = self._wall_clock()
            if sweep_ns - wall <= SWEEP_EARLY_NS:  # due: the two clocks may differ a hair
                moved += channel.sweep_ttl(now, max(wall, sweep_ns))
        if moved or channel.ttl_read:  # route; or read what a sweep needs first
            self.wake()

    def route_now(self) -> None:
        """Route from the caller's task instead of waking the router.

        FINs free room (an ordered channel's one slot, or a window's): routing right
        there lets the connection send the next messages with the same write as its
        other answers, saving the router's and the pump's task switches (go-nsq's
        bench_reader sends the last quarter of each RDY window one FIN per write). A
        backlog that must be read from disk still goes through the router.
        """
        if self.channel.cold_read_from() is not None:
            self.wake()
        else:
            self._pass()

    async def _route_forever(self) -> None:
        channel = self.channel
        while True:
            await self._work.wait()
            self._work = trio.Event()
            cold_from = channel.cold_read_from()
            if cold_from is not None:
                try:
                    await self._read_cold(cold_from)
                except OSError as error:
                    self._read_failing = True
                    if self._read_outcome is None:
                        raise
                    self._read_outcome(error)
                    await trio.sleep(COLD_READ_RETRY)
                    self._work.set()
                    continue
                if self._read_failing:
                    self._read_failing = False
                    if self._read_outcome is not None:
                        self._read_outcome(None)
            if channel.ttl_read:  # a TTL sweep wanted the records: they are there
                channel.ttl_read = False
                channel.ttl_due_ns = 0
            self._pass()

    def _pass(self) -> None:
        channel = self.channel
        self._soon = None  # this pass is the one wake_soon wanted
        deliveries = route(channel, trio.current_time(), self._wall_clock())
        self.passes += 1
        consumers = channel.consumers  # each carries its outbox: one lookup a batch
        for client_id, batch in deliveries.items():
            consumer = consumers.get(client_id)  # gone if an earlier push ended it
            if consumer is not None and consumer.outbox is not None:
                consumer.outbox.push(batch)
        if channel.dead_letters and self._dead_letters is not None:
            self._dead_letters(channel)
        self.deadline_changed()
        if self._changed is not None:
            self._changed()
        if self._drained is not None and not len(channel.in_flight):
            self._drained.set()
            self._drained = None
        if (deliveries or channel.read_on) and channel.has_work():
            # a batch cap, not a lack of room, may have stopped us; or a batch that
            # all had to wait (tag dispatch) may have later messages behind it
            self._work.set()
