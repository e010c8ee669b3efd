"""One routing pass over a channel: which message goes to which ready consumer now.

The channel (broker/channel.py) holds the state and nsqd's rules for a message's
life (the cursor's intake, in flight, requeue gates, deferrals); this module makes
the pass (design §4, spec tcp-protocol §8.7): how much room there is, what is taken
(waiting messages whose queue has room, then new records with the messages put
back in their place), how :func:`~trionsq.dispatch.assign.assign` places it by tag,
and what must wait in which tag queue. Pure code with time passed in; the channel's
router task (``router.py``) calls :func:`route`.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final

import orjson

from ..broker.channel import WAITING_LIMIT
from ..broker.rate_limits import MESSAGE_OVERHEAD
from .assign import ConsumerSlot, assign

if TYPE_CHECKING:
    from ..broker.channel import Channel
    from ..broker.consumers import Delivery
    from ..queues.record import Record

__all__ = ["dispatch_tag", "route"]

TAG_KEY: Final = b"##client_dispatch_tag"


def route(channel: Channel, now: float, wall_ns: int) -> dict[int, list[Delivery]]:
    """One routing pass: what each consumer gets now, recorded as in flight."""
    channel.read_on = False
    if channel.paused or channel.draining:
        return {}
    if channel.rate_limit is not None or channel.limited_consumers:
        return _route_limited(channel, now, wall_ns)
    slots = [
        ConsumerSlot(c.client_id, channel.room_for(c), c.tag) for c in channel.consumers.values()
    ]
    return _route(channel, slots, channel.max_batch, now, wall_ns)


def _route_limited(channel: Channel, now: float, wall_ns: int) -> dict[int, list[Delivery]]:
    """A pass under rate limits (broker/rate_limits.py): the channel's bucket caps the
    pass, each limited consumer's bucket its room; what went out is charged after.

    When a bucket holds back work, :attr:`Channel.refill_at` says when it is full
    again, so the expiry timer wakes the router then: no polling, no per-message
    await.
    """
    limit = channel.rate_limit
    cap = channel.max_batch
    if limit is not None:
        cap = min(cap, limit.room(now))
    slots: list[ConsumerSlot] = []
    for consumer in channel.consumers.values():
        room = channel.room_for(consumer)
        own = consumer.rate_limit
        if own is not None and room:
            room = min(room, own.room(now))
        slots.append(ConsumerSlot(consumer.client_id, room, consumer.tag))
    deliveries = _route(channel, slots, cap, now, wall_ns) if cap > 0 else {}
    if deliveries:
        _charge(channel, deliveries)
    channel.refill_at = _refill_at(channel, now)
    return deliveries


def _charge(channel: Channel, deliveries: dict[int, list[Delivery]]) -> None:
    """Take what a pass delivered from the channel's and the consumers' buckets
    (sizes are summed only when a bytes limit is there to take them)."""
    limit = channel.rate_limit
    consumers = channel.consumers
    channel_sized = limit is not None and limit.bytes is not None
    total_count = total_size = 0
    for client_id, sent in deliveries.items():
        own = consumers[client_id].rate_limit
        count = len(sent)
        size = 0
        if channel_sized or (own is not None and own.bytes is not None):
            size = sum([len(delivery.record.body) for delivery in sent]) + MESSAGE_OVERHEAD * count
        if own is not None:
            own.charge(count, size)
        total_count += count
        total_size += size
    if limit is not None:
        limit.charge(total_count, total_size)


def _refill_at(channel: Channel, now: float) -> float | None:
    """When the earliest bucket holding back work holds its step again (None: none
    holds back work): a throttled channel routes at most about 100 times a second,
    each pass a hundredth of the rate, so deliveries are spread over the second
    rather than sent as one burst a tenth of a second. The buckets are looked at
    first: a limit that does not bind costs no look at the backlog."""
    ready: float | None = None
    limit = channel.rate_limit
    held = limit if limit is not None and limit.exhausted() else None
    if held is not None:
        ready = held.ready_at(now)
    if channel.limited_consumers:
        for consumer in channel.consumers.values():
            own = consumer.rate_limit
            if own is not None and own.exhausted() and channel.room_for(consumer):
                at = own.ready_at(now)
                if ready is None or at < ready:
                    ready = at
    if ready is None or not channel.has_work():
        return None
    if held is not None:
        held.throttled += 1
    return ready


def _route(
    channel: Channel, slots: list[ConsumerSlot], cap: int, now: float, wall_ns: int
) -> dict[int, list[Delivery]]:
    """The pass itself: at most ``cap`` messages into the consumers' ``slots``."""
    room = min(sum(slot.room for slot in slots), cap)
    if channel.ordered:
        room = min(room, channel.ordered_window() - len(channel.in_flight))
    if room <= 0:
        return {}
    held = frozenset(slot.tag for slot in slots if slot.tag is not None)
    if held != channel.held_tags:
        _repark(channel, held)
    channel.pass_tags = {}
    batch = _collect(channel, room, slots, now, wall_ns)
    if batch and channel.ttl.active:
        batch = channel.drop_expired(batch, wall_ns)
    if batch and channel.unchecked:  # counts a restart brought back
        batch = channel.check_restored(batch)
    if not batch:
        return {}
    result = assign(batch, slots, lambda record: _tag_of(channel, record), turn=channel.turn)
    channel.turn = result.next_turn
    _park(channel, result.waiting)
    channel.pass_tags = {}
    deliveries: dict[int, list[Delivery]] = {}
    for client_id, records in result.deliveries.items():
        sent = channel.deliver(channel.consumers[client_id], records, now)
        if sent:
            deliveries[client_id] = sent
    if channel.journal is not None:  # before any frame of the pass is sent
        channel.journal_deliveries(deliveries)
    return deliveries


def _collect(
    channel: Channel, room: int, slots: list[ConsumerSlot], now: float, wall_ns: int
) -> list[Record]:
    """Waiting messages whose queue has room now, then new ones with the messages
    put back in their place among them (an ordered channel: put back first).

    Waiting messages are only taken for a queue with room, so a backlog waiting for
    one tag (or for an untagged consumer) costs nothing per pass and does not hold
    back the others; new records are read on while fewer than ``WAITING_LIMIT``
    wait. A message put back goes out once the cursor has read up to its gate; if
    the cursor cannot read on now (paused intake, the waiting limit), it goes out
    anyway rather than stall behind records that are not coming.
    """
    batch: list[Record] = []
    requeued = channel.requeued
    if channel.ordered:  # SUB_ORDERED: the same message again, before anything newer
        while requeued and len(batch) < room:
            batch.append(requeued.popleft()[1])
    if channel.waiting_count:
        _take_waiting(channel, batch, room, slots)
    may_read = channel.waiting_count < WAITING_LIMIT
    if channel.ordered or not requeued:
        if may_read:
            channel.read_into(batch, room, None, now, wall_ns)
        return batch
    cursor = channel.cursor
    while requeued and len(batch) < room:
        read_id = cursor.read_id
        gate = requeued[0][0]
        if gate <= read_id:
            while requeued and requeued[0][0] <= read_id and len(batch) < room:
                batch.append(requeued.popleft()[1])
        elif may_read and channel.intake() > 0:
            channel.read_into(batch, room, gate, now, wall_ns)
            if cursor.read_id == read_id:
                return batch  # on disk only: the router reads it, then routes again
        else:  # the cursor cannot read on now: no reason to hold these back
            while requeued and len(batch) < room:
                batch.append(requeued.popleft()[1])
    if may_read:
        channel.read_into(batch, room, None, now, wall_ns)
    return batch


def _take_waiting(
    channel: Channel, batch: list[Record], room: int, slots: list[ConsumerSlot]
) -> None:
    """Waiting messages into ``batch``, each queue as far as its consumers have room."""
    open_room: dict[str | None, int] = {}
    for slot in slots:
        open_room[slot.tag] = open_room.get(slot.tag, 0) + slot.room
    for record in batch:  # put back on an ordered channel: uses some of that room
        key = _queue_of(channel, record)
        open_room[key] = open_room.get(key, 0) - 1
    waiting = channel.waiting
    for key, queue in list(waiting.items()):
        take = min(open_room.get(key, 0), len(queue), room - len(batch))
        tags, known = channel.tags, channel.pass_tags
        for _ in range(take):
            record = queue.popleft()
            key_id = record.internal_id
            if key_id in tags:
                known[key_id] = tags.pop(key_id)
            batch.append(record)
        channel.waiting_count -= max(take, 0)
        if not queue:
            del waiting[key]


def _tag_of(channel: Channel, record: Record) -> str | None:
    """A message's dispatch tag, parsed at most once while it is in the channel."""
    key = record.internal_id
    tags = channel.tags
    if key in tags:
        return tags[key]
    known = channel.pass_tags
    if key in known:
        return known[key]
    tag = known[key] = dispatch_tag(record)
    return tag


def _queue_of(channel: Channel, record: Record) -> str | None:
    """The tag queue a message waits in now: its tag if a consumer holds it (§8.7)."""
    held = channel.held_tags
    if not held:
        return None
    tag = _tag_of(channel, record)
    return tag if tag in held else None


def _park(channel: Channel, records: list[Record]) -> None:
    """Keep messages nobody had room for, each in the queue of its tag."""
    if not records:
        return
    waiting = channel.waiting
    tags, known = channel.tags, channel.pass_tags
    for record in records:
        key = _queue_of(channel, record)
        internal_id = record.internal_id
        if internal_id in known:  # keep the parsed tag with the waiting message
            tags[internal_id] = known[internal_id]
        queue = waiting.get(key)
        if queue is None:
            queue = waiting[key] = deque()
        queue.append(record)
    channel.waiting_count += len(records)


def _repark(channel: Channel, held: frozenset[str]) -> None:
    """Tag holders changed: a message waits in its tag's queue while someone holds
    the tag, else in the default queue (spec §8.7: a late tag consumer gets its
    messages, the last one leaving sends them to untagged consumers)."""
    channel.held_tags = held
    parked = [record for queue in channel.waiting.values() for record in queue]
    parked.sort(key=_record_id)  # one channel order again
    channel.waiting = {}
    channel.waiting_count = 0
    _park(channel, parked)


def dispatch_tag(record: Record) -> str | None:
    """The dispatch tag of an ext message (spec §8.7); parsed only while tags are held."""
    if record.ext_version == 2:
        return record.ext.decode("utf-8", "replace")
    if record.ext_version == 4 and TAG_KEY in record.ext:
        try:
            header = orjson.loads(record.ext)
        except orjson.JSONDecodeError:
            return None
        tag = header.get("##client_dispatch_tag") if isinstance(header, dict) else None
        return tag if isinstance(tag, str) else None
    return None


def _record_id(record: Record) -> int:
    return record.internal_id
