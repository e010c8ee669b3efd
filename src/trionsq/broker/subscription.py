"""A consumer's hold on its channel: the one handle its connection keeps.

RDY, FIN, REQ, TOUCH, CLS and leaving each change the channel and then tell the task
that drives it (wake it, re-aim its timer, or route at once for an ordered channel's
FIN). Written here once, the connection never reaches into the channel or its driver
(issue 15), and the rules of those commands that are the channel's (Youzan's ordered
REQ) sit beside the channel's other rules.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import trio

from ..queues.inflight import InFlightError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .channel import Channel
    from .consumers import Consumer
    from .driver import ChannelDriver

__all__ = ["LAZY_REFILL_MIN_RDY", "Subscription"]

LAZY_REFILL_MIN_RDY = 4
"""From this RDY up, a FIN that leaves the consumer holding more than three quarters
of its window does not refill it at once: the router refills it when a quarter is
free, or :data:`~trionsq.dispatch.router.REFILL_DELAY` after the first FIN, whichever
comes first. A client that FINs one message per write (pynsq, ansq) otherwise gets
one message per routing pass and per write, about 20 us of broker CPU each against
2 us in batches; a consumer with three quarters of its window still to handle does
not wait for the messages held back. Below it every FIN refills at once."""
READ_GATHER_FINS = 8
"""A read that brought at most this many FINs may pause the next (see
:meth:`Subscription.read_pause`): pynsq's and ansq's reads bring 1-3 when the broker
keeps up with them, go-nsq's bench_reader's tens to hundreds."""
READ_GATHER_MAX = 0.005
"""The pause, in seconds, before the connection reads again while its consumer holds
over three quarters of its window (:meth:`Subscription.read_pause`). 1 ms left a
consumer spread over many connections (pynsq on two brokers: four connections a
process, 2-3k FINs a second each) a wake-up every two or three FINs, 14 us of broker
CPU a message; 5 ms took it to 10-11 us, and one broker's pynsq consumer from 4.8 to
3.3 us."""


class Subscription:
    """What ``Broker.subscribe`` hands a connection for its consumer."""

    __slots__ = (
        "_driver",
        "_fins_seen",
        "_seen_at",
        "_unsubscribe",
        "_wall_clock",
        "channel",
        "consumer",
        "fins",
    )

    def __init__(
        self,
        driver: ChannelDriver,
        consumer: Consumer,
        unsubscribe: Callable[[ChannelDriver, int], None],
        wall_clock: Callable[[], int] = time.time_ns,
    ) -> None:
        """``unsubscribe``: the broker's, which also drops an ephemeral channel;
        ``wall_clock``: the broker's (a long REQ's due time, e2e latency)."""
        self._driver = driver
        self._wall_clock = wall_clock
        self._unsubscribe = unsubscribe
        self.channel: Channel = driver.channel
        """Read it (names for the trace log, counts for /stats); change it only here."""
        self.consumer = consumer
        self.fins = 0
        """FINs taken (counted for :meth:`read_pause`'s estimate of the FIN rate)."""
        self._fins_seen = 0
        self._seen_at = 0.0

    def ready(self, count: int) -> None:
        """RDY: the consumer may hold ``count`` messages."""
        self.channel.set_rdy(self.consumer.client_id, count)
        self._driver.wake()

    def pull(self, count: int) -> None:
        """PULL: ``count`` more messages, once (trionsq's pull consumption)."""
        self.channel.grant(self.consumer.client_id, count)
        self._driver.wake()

    def finish(self, internal_id: int) -> None:
        """FIN. Raises ``InFlightError`` (not in flight, or another consumer's)."""
        channel = self.channel
        record = channel.finish(self.consumer.client_id, internal_id)
        self.fins += 1
        if channel.latency is not None:  # only with e2e percentiles configured
            channel.record_latency(record, self._wall_clock())
        if channel.ordered:
            self._driver.route_now()  # its one slot is free: the next goes in this write
        elif self._window_full():
            self._driver.wake_soon()
        else:
            self._driver.wake()

    def finish_many(self, internal_ids: Sequence[int]) -> list[tuple[int, str]]:
        """FIN of each id in order; returns the refused ones with nsqd's reason.

        One routing pass for the whole run, in the caller's task (issue 19); e2e
        latency needs each record: those go one by one.
        """
        channel = self.channel
        if channel.latency is not None:
            refused: list[tuple[int, str]] = []
            for internal_id in internal_ids:
                try:
                    self.finish(internal_id)
                except InFlightError as error:
                    refused.append((internal_id, error.reason))
            return refused
        failed = channel.finish_many(self.consumer.client_id, internal_ids)
        self.fins += len(internal_ids)
        if not channel.ordered and self._window_full():
            self._driver.wake_soon()
        else:
            self._driver.route_now()  # the room they freed is filled in this same write
        if not failed:
            return []
        in_flight = channel.in_flight
        return [(internal_id, in_flight.reason(internal_id)) for internal_id in failed]

    def _window_full(self) -> bool:
        """After FINs: does the consumer still hold over three quarters of its RDY
        window (see :data:`LAZY_REFILL_MIN_RDY`)? Never for PULL credit, whose room
        FINs do not change."""
        consumer = self.consumer
        rdy = consumer.rdy
        return (
            rdy >= LAZY_REFILL_MIN_RDY
            and consumer.credit is None
            and self.channel.in_flight.count_for(consumer.client_id) > rdy - rdy // 4
        )

    def read_pause(self, now: float) -> float:
        """Seconds the connection may wait before its next read, after a read that
        brought FINs into a window still over three quarters full (0: read at once).

        A client that FINs one message per write (pynsq, ansq, gnsq) otherwise costs
        the broker a whole wake-up for every few FINs, and those FINs free nothing
        the lazy refill would send. Only a read of at most :data:`READ_GATHER_FINS`
        FINs pauses, and only a slow client's: one whose FIN rate since the last
        call (``now``: Trio's clock) brings less than an eighth of its window in
        :data:`READ_GATHER_MAX`, so it still holds over five eighths of the window
        when the FINs are read. A fast client (go-nsq's bench_reader: 10% less
        throughput when it paused too) and one whose FINs come in batches
        (trionsq.client) read on at once.
        """
        fins, elapsed = self.fins - self._fins_seen, now - self._seen_at
        self._fins_seen, self._seen_at = self.fins, now
        if not fins or fins > READ_GATHER_FINS:  # none, or worth their wake-up
            return 0.0
        if not self._window_full() or self.channel.ordered:
            return 0.0
        # READ_GATHER_MAX only where less than an eighth of the window can come in it
        # at the FIN rate seen: a faster client reads on at once
        slow = elapsed * (self.consumer.rdy // 8) >= fins * READ_GATHER_MAX
        return READ_GATHER_MAX if slow else 0.0

    def requeue(self, internal_id: int, delay: float, *, timed: bool) -> None:
        """REQ after ``delay`` seconds. Raises ``InFlightError``.

        Youzan ignores a timed REQ on an ordered channel, with no answer: the message
        stays in flight until its timeout (spec §8.6).
        """
        channel = self.channel
        if timed and channel.ordered:
            return
        channel.requeue(
            self.consumer.client_id, internal_id, delay, trio.current_time(), self._wall_clock()
        )
        self._driver.deadline_changed()
        self._driver.wake()

    def touch(self, internal_id: int) -> None:
        """TOUCH: the message's timeout starts again. Raises ``InFlightError``."""
        self.channel.touch(self.consumer.client_id, internal_id, trio.current_time())

    def close(self) -> None:
        """CLS: nothing more is sent; what is in flight may still be finished."""
        self.channel.start_close(self.consumer.client_id)

    def room(self) -> int:
        """How many more messages the consumer may receive now.

        0 while a rate limit holds the channel back: nothing more comes before its
        bucket refills, so the connection counts as not ready and flushes what it has
        at once instead of holding it for the output buffer's timeout.
        """
        channel = self.channel
        if channel.refill_at is not None:
            return 0
        return channel.room_for(self.consumer)

    def in_flight(self) -> int:
        """Messages the consumer holds."""
        return self.channel.in_flight.count_for(self.consumer.client_id)

    def leave(self) -> None:
        """The connection ended: its messages are requeued (and an ephemeral channel
        left empty goes)."""
        self._unsubscribe(self._driver, self.consumer.client_id)
