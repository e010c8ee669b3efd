"""One channel of a topic partition: a message's life in it, from intake to FIN.

Pure state with time passed in (``now``: monotonic seconds; ``wall_ns``: wall clock
for DPUB delivery times). Which ready consumer gets which message is decided in
dispatch/ (``dispatch.routing.route``, called by the channel's router task when
there is work and room) with the primitives here (:meth:`Channel.intake`,
:meth:`Channel.read_into`, :meth:`Channel.deliver`) and the waiting queues kept
here; the expiry task calls :meth:`Channel.expire` at :meth:`Channel.next_deadline`;
connections call the consumer methods. Semantics are
nsqd's (spec semantics.md §5, §7, §10) with the decided differences of design §6: a
departing consumer's messages are requeued at once.

Redelivery order (design §6, docs/storage.md "Redelivery order"): a message put back
(REQ without delay, a timeout, a departing consumer, a deferral that came due) goes
behind the messages already waiting in the channel, as nsqd's channel put does: the
parked ones and the records the cursor has not read yet, up to
:data:`REDELIVERY_WINDOW` of them. An ordered channel (SUB_ORDERED) sends the same
message again first. Messages waiting for a tag holder keep their place without
holding back the rest.

Long delays (design §2, docs/extensions.md "Long delays"): in a durable channel, a
deferral due more than :data:`PARK_AFTER` seconds away is parked in the channel's
delay store (``queues/delay_store.py``, written before anything else changes), and
the cursor counts the message as finished, so a delay of days pins no segment. The
deferred heap still holds and fires it; its FIN (or any other end in the channel)
lets it go from the store, and a restart gives it back from there.
"""

from __future__ import annotations

import random
from collections import deque
from typing import TYPE_CHECKING, Final

from ..queues.cursor import ChannelCursor
from ..queues.deferred import DeferredQueue
from ..queues.inflight import InFlightTable
from .channel_ttl import ChannelTtl
from .consumers import Consumer, Delivery  # handed on too: long imported from here
from .latency import LatencyWindow
from .partition_owner import PartitionOwner
from .statistics import ChannelStatistics

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..queues.delay_store import DelayStore
    from ..queues.delivery_journal import DeliveryJournal
    from ..queues.ephemeral import EphemeralFeed
    from ..queues.partition_log import PartitionLog
    from ..queues.record import Record
    from .latency import LatencySettings
    from .rate_limits import RateLimit
    from .ttl import TopicTtl

__all__ = ["Channel", "Consumer", "Delivery"]

DEFAULT_MAX_BATCH: Final = 256
WAITING_LIMIT: Final = 10_000
"""Messages a channel keeps waiting for a consumer of their queue (tag dispatch)
before it stops reading new ones; bounds memory when nobody takes one queue."""
REDELIVERY_WINDOW: Final = 10_000
"""Unread records at most that a message put back lets go first (nsqd's default
mem-queue-size): all of a small backlog, a bounded part of a deep one on disk, so a
redelivery is never held up behind millions of records."""
PARK_AFTER: Final = 60.0
"""Seconds: a durable channel parks a deferral due later than this (a DPUB or a REQ
with a delay) in its delay store instead of holding its confirmed position back
until then; shorter ones stay in the cursor's state as before (cheap, and they
pin segments for a minute at most)."""


class Channel(ChannelTtl):
    """A cursor over one partition log plus the redelivery state nsqd keeps per channel."""

    def __init__(
        self,
        name: str,
        log: PartitionLog,
        start_id: int,
        *,
        max_msg_timeout: float,
        topic: str = "",
        partition: int = 0,
        ordered: bool = False,
        max_batch: int = DEFAULT_MAX_BATCH,
        rng: random.Random | None = None,
        feed: EphemeralFeed | None = None,
        latency: LatencySettings | None = None,
        redelivery_window: int = REDELIVERY_WINDOW,
        ttl: TopicTtl | None = None,
        delays: DelayStore | None = None,
        park_after: float = PARK_AFTER,
        rate_limit: RateLimit | None = None,
        journal: DeliveryJournal | None = None,
    ) -> None:
        """``feed``: an ephemeral channel reads it instead of a cursor over ``log``;
        ``latency``: track e2e processing latency on FIN (None: off, as in nsqd
        without ``--e2e-processing-latency-percentile``); ``redelivery_window``: how
        many unread records at most go out before a message put back; ``ttl``: the
        topic's TTL rules, shared with its other channels (none: never expires);
        ``delays``: a durable channel's delay store (None: in memory or ephemeral,
        nothing is parked); ``park_after``: seconds from which a deferral is parked;
        ``rate_limit``: the channel's limit, shared by its partitions (none: off);
        ``journal``: a durable channel's delivery journal (channel_exits.py)."""
        self.name: Final = name
        self.topic: Final = topic
        self.partition: Final = partition
        self.log = log
        self.feed = feed
        self.cursor: ChannelCursor | EphemeralFeed = (
            feed if feed is not None else ChannelCursor(log, start_id)
        )
        self.ordered = ordered
        """SUB_ORDERED: at most one message in flight for the channel (a channel of one
        partition), whatever the consumers' RDY; set by the first SUB_ORDERED."""
        self.max_batch: Final = max_batch
        self.redelivery_window: Final = redelivery_window
        self.paused = False
        self.draining = False
        """The broker is stopping (:meth:`Broker.drain`): nothing more goes out, what is
        in flight may still be finished. Not persisted, unlike ``paused``."""
        self.intake_limit: int | None = None
        """Set while the topic is paused: records from this id on are not taken from the
        log. What was published before the pause had reached the channel in nsqd, so it
        and redeliveries still go out."""
        self.consumers: dict[int, Consumer] = {}
        self.in_flight: InFlightTable[Record] = InFlightTable(max_msg_timeout)
        self.deferred: DeferredQueue[Record] = DeferredQueue()
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        self.latency = LatencyWindow(latency) if latency is not None else None
        """FIN latencies for /stats; the connection records them (it has the clock)."""
        self._init_routing()
        self.saved_confirmed: int | None = None
        """The confirmed id last written to the channel's state file (durable storage):
        the log keeps records from there, so a restart never finds its state behind."""
        self.lost = 0
        """Unfinished messages recovery could not give back (a damaged log)."""
        self.finish_count = 0
        """FINs since start (the admin stream's finish rate; /stats has it per client)."""
        self._ahead: dict[int, bool] = {}
        """Ids taken out of order (deferred at publish) that the cursor has not passed,
        with whether they were finished meanwhile."""
        ChannelTtl.__init__(self, ttl, journal)
        self.group = PartitionOwner()
        """The consumer-group member that consumes this partition (broker/groups.py,
        broker/partition_owner.py); consumers of other members stand by."""
        self._init_pacing(rate_limit, delays, park_after)
        self._rng = rng if rng is not None else random.Random()  # noqa: S311 - sampling, not crypto

    def _init_routing(self) -> None:
        """The routing pass's state (dispatch/routing.py): what waits, and where."""
        self.requeued: deque[tuple[int, Record]] = deque()
        """Messages put back, each with its gate: the read position the cursor must
        reach before it goes out (what was waiting then goes first), in put order."""
        self.waiting: dict[str | None, deque[Record]] = {}
        """Messages no eligible consumer had room for, by the tag queue they wait in
        (None: the default queue), each in channel order."""
        self.waiting_count = 0
        self.tags: dict[int, str | None] = {}
        """Dispatch tags of waiting messages, parsed once (only while tags are held)."""
        self.held_tags: frozenset[str] = frozenset()
        """Tags with a tag queue (a subscribed consumer) when the waiting were parked."""
        self.pass_tags: dict[int, str | None] = {}
        """Tags parsed during the current routing pass."""
        self.read_on = False
        """The last routing pass took new records from the log: another pass may
        deliver more even if this one delivered nothing (all went to waiting)."""
        self.turn = 0
        """Where the next routing pass starts its round-robin over the consumers."""

    def _init_pacing(
        self, rate_limit: RateLimit | None, delays: DelayStore | None, park_after: float
    ) -> None:
        """What paces the channel: its rate limits, and where long deferrals park."""
        self.rate_limit = rate_limit
        """The channel's rate limit (``/channel/rate_limit``), one bucket shared by the
        channel's Channel objects in every partition; None: unlimited."""
        self.limited_consumers = 0
        """Subscribed consumers with a rate limit of their own: the router looks at
        consumers' buckets only while this is not 0."""
        self.refill_at: float | None = None
        """When a bucket that held back the last routing pass has tokens again, while
        there is work: the expiry timer wakes the router then."""
        self.delays = delays
        """Where long deferrals are parked (None: never; see the module docstring)."""
        self.park_after = park_after
        self.parked: set[int] = set()
        """Ids with a live PARK in :attr:`delays`: the cursor counts them finished, so
        whatever ends them in the channel lets them go from the store instead."""

    # ---------------------------------------------------------------- consumers

    def subscribe(self, consumer: Consumer) -> None:
        """A connection joins (SUB); RDY starts at 0."""
        self.consumers[consumer.client_id] = consumer
        if consumer.rate_limit is not None:
            self.limited_consumers += 1

    def unsubscribe(self, client_id: int) -> list[Record]:
        """A connection leaves: its in-flight messages go back at once (design §6)."""
        consumer = self.consumers.pop(client_id, None)
        if consumer is not None and consumer.rate_limit is not None:
            self.limited_consumers -= 1
        returned = [entry.payload for entry in self.in_flight.remove_client(client_id)]
        for record in returned:
            self._delivered_once(record.internal_id)
        self._put_back(self._below_bound(returned))
        if returned and consumer is not None and consumer.member is not None:
            self.group.hand_over(self)  # whoever takes over reads the partition in order
        return returned

    def set_rdy(self, client_id: int, count: int) -> None:
        """RDY: the window of messages the consumer may hold."""
        consumer = self.consumers[client_id]
        if not consumer.closing:
            consumer.rdy = count
            consumer.credit = None

    def grant(self, client_id: int, count: int) -> None:
        """PULL: ``count`` more messages for the consumer, sent as they are there and
        not renewed by FINs (pull consumption; a later RDY goes back to pushing)."""
        consumer = self.consumers[client_id]
        if not consumer.closing:
            consumer.credit = (consumer.credit or 0) + count

    def start_close(self, client_id: int) -> None:
        """CLS: no more deliveries; the consumer may still FIN/REQ/TOUCH."""
        consumer = self.consumers[client_id]
        consumer.closing = True
        consumer.rdy = 0

    def room_for(self, consumer: Consumer) -> int:
        """How many more messages ``consumer`` may receive now.

        An ordered channel with its one message in flight has no room for anyone: the
        connection then counts as not ready and flushes at once, instead of holding the
        message for the output buffer's timeout. A consumer-group member gets room only
        on a partition its member owns, once nobody else holds messages of it (the
        previous owner releases before the new one starts: no message of the partition
        is out with two members).
        """
        if (
            self.paused
            or self.draining
            or consumer.closing
            or (self.ordered and len(self.in_flight) >= self.ordered_window())
        ):
            return 0
        if consumer.member is not None and self.group.holds_back(consumer.member, self):
            return 0
        credit = consumer.credit
        if credit is not None:
            return credit
        return max(0, consumer.rdy - self.in_flight.count_for(consumer.client_id))

    def ordered_window(self) -> int:
        """How many messages an ordered channel may have in flight: its consumer's
        window while it has one consumer, else one (Youzan's rule)."""
        consumers = self.consumers
        if len(consumers) == 1:
            for consumer in consumers.values():
                return consumer.ordered_window
        return 1

    # ---------------------------------------------------------------- delivery

    @property
    def depth(self) -> int:
        """Messages waiting to be delivered (nsqd's depth: not in flight, not deferred)."""
        unread = max(0, self.cursor.backlog - len(self._ahead))
        return unread + len(self.requeued) + self.waiting_count

    def has_work(self) -> bool:
        """Something could be delivered if a consumer had room."""
        return bool(self.requeued or self.waiting_count or self.intake())

    def intake(self) -> int:
        """How many new records the channel may take from the log now."""
        backlog = self.cursor.backlog
        limit = self.intake_limit
        return backlog if limit is None else min(backlog, max(0, limit - self.cursor.read_id))

    def read_into(
        self, batch: list[Record], room: int, stop_id: int | None, now: float, wall_ns: int
    ) -> None:
        """Take new records from the cursor into ``batch`` (up to ``room`` in all, none
        from ``stop_id`` on); a DPUB not yet due goes to the deferred queue instead."""
        fresh = min(room - len(batch), self.intake())
        if fresh <= 0:
            return
        ahead = self._ahead
        self.read_on = True
        for record in self.cursor.take(fresh, stop_id):
            self.message_count += 1
            if ahead and record.internal_id in ahead:  # deferred already at publish
                if ahead.pop(record.internal_id):
                    self.cursor.finish(record.internal_id)
                continue
            if record.deliver_at > wall_ns:  # DPUB: held back until its time
                due = now + (record.deliver_at - wall_ns) / 1e9
                if due - now > self.park_after and self._park(record, record.deliver_at):
                    self.cursor.finish(record.internal_id)  # the store holds it now
                self.deferred.push(record.internal_id, due, record)
            else:
                batch.append(record)

    def deliver(self, consumer: Consumer, records: list[Record], now: float) -> list[Delivery]:
        """Hand ``records`` to ``consumer``: in flight with their attempt counts, except
        what its sample rate drops (dropped for this channel, as nsqd does)."""
        if consumer.sample_rate:
            records = self._sampled(consumer.sample_rate, records)
        attempts = self._attempts
        if attempts:
            sent = [Delivery(record, self._attempt(record.internal_id)) for record in records]
        else:  # nothing was ever put back: every message goes out for the first time
            sent = [Delivery(record, 1) for record in records]
        if records:
            items = [(record.internal_id, record) for record in records]
            self.in_flight.add_many(items, consumer.client_id, now, consumer.msg_timeout)
            consumer.message_count += len(records)
            if consumer.credit is not None:
                consumer.credit -= len(records)
        return sent

    def _sampled(self, sample_rate: int, records: list[Record]) -> list[Record]:
        """What a consumer's sample rate lets through; the rest is dropped for this
        channel, as nsqd does."""
        kept: list[Record] = []
        for record in records:
            if self._rng.randrange(100) > sample_rate:
                self._forget(record.internal_id)
            else:
                kept.append(record)
        return kept

    def _forget(self, internal_id: int) -> None:
        """The channel is done with a message (FIN, sampled out, expired, dead)."""
        self._attempts.pop(internal_id, None)
        if self.unchecked:
            self.unchecked.discard(internal_id)
        if internal_id in self.parked:  # the cursor counts it finished already
            self.parked.discard(internal_id)
            if self.delays is not None:
                self.delays.done(internal_id)  # lost: delivered again after a restart
            return
        self._finish_in_cursor(internal_id)

    def _finish_in_cursor(self, internal_id: int) -> None:
        if internal_id in self._ahead:  # the cursor confirms it when it passes it
            self._ahead[internal_id] = True
        else:
            self.cursor.finish(internal_id)

    def cold_read_from(self) -> int | None:
        """Where a disk read must start before routing can go on (None: no need).

        Only when a consumer has room (an idle channel's backlog stays on disk), or
        a TTL sweep needs the records (channel_ttl.py).
        """
        cursor = self.cursor
        log = self.log
        if not log.on_disk or self.feed is not None or self.intake_paused_now():
            return None
        if not log.is_cold(cursor.read_id):
            return None
        if self.ttl_read:  # a TTL sweep needs the records there
            return cursor.read_id
        if not any(self.room_for(consumer) for consumer in self.consumers.values()):
            return None
        return cursor.read_id

    def intake_paused_now(self) -> bool:
        """Whether the topic's pause holds back the next record."""
        limit = self.intake_limit
        return limit is not None and self.cursor.read_id >= limit

    def skip_finished(self, internal_id: int) -> None:
        """After a restart: an id finished before it, which the cursor must not deliver."""
        self._ahead[internal_id] = True
        if self._attempts.pop(internal_id, None) is not None:
            self.unchecked.discard(internal_id)

    def unfinished(self, internal_id: int) -> bool:
        """After a restart: whether the channel still holds ``internal_id``."""
        if internal_id in self.parked:
            return True
        cursor = self.cursor
        return (
            isinstance(cursor, ChannelCursor)
            and cursor.confirmed_id <= internal_id < self.log.next_id
            and not cursor.is_finished(internal_id)
            and self._ahead.get(internal_id) is not True
        )

    def finished_at_restart(self, internal_id: int) -> None:
        """After a restart: a message found in the dead-letter topic, which the saved
        state still held: finished, wherever the restart put it."""
        self.deferred.discard(internal_id)
        if internal_id in self.parked:
            self._forget(internal_id)  # its delay store lets it go
        else:
            self.skip_finished(internal_id)

    def leave_at_restart(self, record: Record, deliveries: int) -> None:
        """After a restart: a message that must leave for the dead-letter topic (it was
        on its way, or came back at its bound); the cursor skips it when it reads it,
        and finishes it there once the move is done."""
        internal_id = record.internal_id
        self.deferred.discard(internal_id)
        if internal_id not in self.parked:  # a parked one is finished for the cursor
            self._ahead[internal_id] = False
        self.unchecked.discard(internal_id)
        self.leave_for_dead_letters(record, deliveries)

    def state_fingerprint(self) -> tuple[object, ...] | None:
        """Different whenever what the channel persists is (read and confirmed
        positions, the ids finished out of order, deferrals, counts, pause), and cheap: the
        persister encodes and writes a channel only when this changed. None for an
        ephemeral channel, which persists nothing."""
        cursor = self.cursor
        if not isinstance(cursor, ChannelCursor):
            return None
        return (
            cursor.read_id,
            cursor.confirmed_id,
            cursor.finished_count,
            self.deferred.changes,
            self.attempt_changes,
            self.paused,
            tuple(self.finished_ahead()) if self._ahead else (),
        )

    def finished_ahead(self) -> list[int]:
        """Ids finished before the cursor reached them (persisted with the state)."""
        return [internal_id for internal_id, done in self._ahead.items() if done]

    def defer_ahead(self, record: Record, due: float, *, now: float, wall_ns: int) -> None:
        """Hold a record in the deferred queue before the cursor reaches it.

        nsqd puts a DPUB message into every channel's deferred queue when it is
        published, so /stats counts it as deferred at once; and after a restart, the
        persisted deferred entries are pushed back this way. The cursor skips the
        record when it gets there (confirming it then if it was finished meanwhile,
        or parked: see the module docstring). ``now``/``wall_ns``: the clocks, read
        together, to tell a long deferral and its wall-clock due time.
        """
        delay = due - now
        parked = delay > self.park_after and self._park(record, wall_ns + round(delay * 1e9))
        self._ahead[record.internal_id] = parked
        self.deferred.push(record.internal_id, due, record)

    def restore_parked(self, record: Record, due: float, attempts: int) -> None:
        """After a restart: a message the delay store held, deferred until ``due``
        (monotonic seconds) with its delivery count. The cursor, back at the
        confirmed position, skips it (finished) when it reads it again."""
        internal_id = record.internal_id
        self.parked.add(internal_id)
        if attempts:
            self._attempts[internal_id] = attempts
        cursor = self.cursor
        if (
            isinstance(cursor, ChannelCursor)
            and cursor.confirmed_id <= internal_id < self.log.next_id
        ):
            self._ahead[internal_id] = True
        self.deferred.push(internal_id, due, record)

    def _park(self, record: Record, due_ns: int) -> bool:
        """Park ``record`` in the delay store (again, if it is: the new entry wins);
        False when there is none or it refused (then the deferral stays in the
        cursor's state, pinning as before: nothing is lost)."""
        delays = self.delays
        if delays is None:
            return False
        internal_id = record.internal_id
        if not delays.park(internal_id, due_ns, self._attempts.get(internal_id, 0), record):
            return False
        self.parked.add(internal_id)
        return True

    # ---------------------------------------------------------------- FIN / REQ / TOUCH

    def finish(self, client_id: int, internal_id: int) -> Record:
        """FIN. Raises InFlightError (not in flight / not the owner)."""
        entry = self.in_flight.finish(internal_id, client_id)
        self._forget(internal_id)
        self.finish_count += 1
        consumer = self.consumers.get(client_id)
        if consumer is not None:
            consumer.finish_count += 1
        return entry.payload

    def finish_many(self, client_id: int, internal_ids: Sequence[int]) -> list[int]:
        """FIN of many ids in order, as :meth:`finish` each; returns the ids refused
        (:meth:`InFlightTable.reason` says why), in order."""
        finished, refused = self.in_flight.finish_many(internal_ids, client_id)
        if self._attempts or self._ahead or self.parked:
            forget = self._forget
            for key in finished:
                forget(key)
        else:  # nothing put back, nothing read ahead: only the cursor has to know
            self.cursor.finish_many(finished)
        self.finish_count += len(finished)
        consumer = self.consumers.get(client_id)
        if consumer is not None:
            consumer.finish_count += len(finished)
        return refused

    def record_latency(self, record: Record, wall_ns: int) -> None:
        """A FIN at ``wall_ns``: its end-to-end latency, if this channel tracks latency."""
        if self.latency is not None:
            self.latency.insert(wall_ns - record.timestamp, wall_ns / 1e9)

    def requeue(
        self, client_id: int, internal_id: int, delay: float, now: float, wall_ns: int = 0
    ) -> Record:
        """REQ: back at once (delay 0) or after ``delay`` seconds. Raises InFlightError.

        ``wall_ns``: the wall clock, read with ``now``, for a long delay's due time in
        the delay store (0: never park)."""
        entry = self.in_flight.finish(internal_id, client_id)
        self._delivered_once(internal_id)
        self.requeue_count += 1
        consumer = self.consumers.get(client_id)
        if consumer is not None:
            consumer.requeue_count += 1
        if not self._below_bound((entry.payload,)):
            return entry.payload  # dead-lettered: nothing of the partition waits for it
        if delay <= 0:
            self._put_back((entry.payload,))
            if self.ordered:
                self._rewind_after(internal_id)
        else:
            if delay > self.park_after and wall_ns:
                was_parked = internal_id in self.parked
                if self._park(entry.payload, wall_ns + round(delay * 1e9)) and not was_parked:
                    self._finish_in_cursor(internal_id)  # the store holds it now
            self.deferred.push(internal_id, now + delay, entry.payload)
        return entry.payload

    def _rewind_after(self, internal_id: int) -> None:
        """An ordered channel's message goes back: whatever of its window was sent
        after it goes back too, so the partition is delivered again from it, in
        order (nothing newer may reach the consumer before it; a no-op with a window
        of one, where nothing else is in flight)."""
        later = self.in_flight.take_after(internal_id)
        for entry in later:
            self._delivered_once(entry.key)
        self._put_back([entry.payload for entry in later])
        if len(self.requeued) > 1:  # what goes out again goes in partition order
            self.requeued = deque(sorted(self.requeued, key=_requeued_id))

    def touch(self, client_id: int, internal_id: int, now: float) -> float:
        """TOUCH: a fresh msg_timeout, capped by max-msg-timeout. Raises InFlightError."""
        consumer = self.consumers[client_id]
        return self.in_flight.touch(internal_id, client_id, now, consumer.msg_timeout)

    # ---------------------------------------------------------------- timers

    def next_deadline(self) -> float | None:
        """The earliest in-flight timeout, deferred due time or bucket refill."""
        a = self.in_flight.next_deadline()
        b = self.deferred.next_due()
        if b is not None and (a is None or b < a):
            a = b
        refill = self.refill_at
        if refill is not None and (a is None or refill < a):
            return refill
        return a

    def expire(self, now: float) -> int:
        """Requeue timed-out messages and release due deferrals; returns how many
        (plus one when a rate limit's bucket has refilled: the router must look)."""
        refilled = 0
        refill = self.refill_at
        if refill is not None and refill <= now:
            self.refill_at = None
            refilled = 1
        expired = self.in_flight.pop_expired(now)
        for entry in expired:
            self._delivered_once(entry.key)
            self.timeout_count += 1
            consumer = self.consumers.get(entry.client)
            if consumer is not None:
                consumer.timeout_count += 1
        self._put_back(self._below_bound([entry.payload for entry in expired]))
        if self.ordered and expired:
            self._rewind_after(min(entry.key for entry in expired))
        due = self.deferred.pop_due(now)
        self._put_back(due)
        return len(expired) + len(due) + refilled

    def _put_back(self, records: Sequence[Record]) -> None:
        """nsqd's channel put for a redelivery: behind what waits in the channel now.

        The gate is where the cursor will be once it has read the unread records
        waiting now (at most :attr:`redelivery_window` of them); messages parked for a
        tag queue were read before, so they are ahead too.
        """
        if records:
            gate = self.cursor.position_after(min(self.intake(), self.redelivery_window))
            self.requeued.extend([(gate, record) for record in records])
            if self.ttl.active:
                self.ttl_arrived(records, in_order=False)

    # ---------------------------------------------------------------- admin

    def empty(self) -> None:
        """Channel empty: drop everything queued, in flight and deferred."""
        self.message_count += self.intake()  # they had entered the channel (nsqd counts them)
        self.move_to(self.log.next_id)

    def move_to(self, internal_id: int) -> None:
        """Read on from ``internal_id`` (setoffset, empty): everything before it counts
        as finished, everything from it is delivered again.

        What was in flight, requeued or deferred is dropped: those ids are either
        before the new position or will be read again (a DPUB is deferred again when
        read). A consumer's FIN for a dropped message then gets E_FIN_FAILED.
        """
        self.in_flight.clear()
        self.deferred.clear()
        self.requeued.clear()
        self.waiting.clear()
        self.waiting_count = 0
        self.tags.clear()
        self._attempts.clear()
        self.unchecked.clear()
        self.dead_letters.clear()  # they never reach the dead-letter topic
        if self.journal is not None:
            self.journal.clear()
        self._ahead.clear()
        if self.parked or (self.delays is not None and len(self.delays)):
            self.parked.clear()
            if self.delays is not None:
                self.delays.clear()
        self.cursor.move_to(internal_id)
        if self.ttl.active:  # what is read again may be past its TTL already
            self.ttl_due_ns = 0
        if self.saved_confirmed is not None:  # the log must keep what will be read again
            self.saved_confirmed = min(self.saved_confirmed, internal_id)

    def statistics(self) -> ChannelStatistics:
        """A frozen snapshot for /stats.

        ``message_count`` includes what the channel can read but has not taken yet: in
        nsqd a message enters (and is counted by) every channel when it is published.
        """
        return ChannelStatistics(
            name=self.name,
            depth=self.depth,
            in_flight_count=len(self.in_flight),
            deferred_count=len(self.deferred),
            message_count=self.message_count + self.intake(),
            requeue_count=self.requeue_count,
            timeout_count=self.timeout_count,
            client_count=len(self.consumers),
            paused=self.paused,
            max_attempts=self.attempts_bound(),
            dead_letter_count=self.dead_letter_count,
            ttl_ns=self.ttl.ttl_ns,
            expired_count=self.expired_count,
            **self._rate_limit_statistics(),
        )

    # shaped as server/stats._publish_limit_fields (a topic's publish limit), not one
    # helper: other keys, and that limit has a mode and refusals this one has not
    def _rate_limit_statistics(self) -> dict[str, int]:
        limit = self.rate_limit
        if limit is None:
            return {}
        return {
            "rate_limit_msgs": limit.rates.msgs_per_sec,
            "rate_limit_bytes": limit.rates.bytes_per_sec,
            "throttled_count": limit.throttled,
        }


def _requeued_id(item: tuple[int, Record]) -> int:
    return item[1].internal_id
