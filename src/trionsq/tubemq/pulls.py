"""A TubeMQ pull over the channel's delivery machinery: credit out, a pack back.

``GetMessage`` grants the seat's subscription PULL credit; the channel's router
delivers into the seat (in flight for it, as for any consumer) and the waiting call
is answered from there, in the router's own pass, with no await per message. The
pack sent stays in flight until ``CommitOffset`` (or the next ``GetMessage`` with
``lastPackConsumed``) finishes it, once; an unconfirmed pack is put back (REQ)
when the consumer says so, when its hold on the partition ends, or when its lease
expires, and is delivered again, to it or to the partition's next owner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..protocol.tubemq_formats import ErrCode, checksum, join_payload
from ..protocol.tubemq_proto import broker_pb2
from .messages import attributes_of

if TYPE_CHECKING:
    from .groups import Seat

__all__ = [
    "MAX_PACK",
    "MAX_PACK_BYTES",
    "confirm",
    "pack_reply",
    "position",
    "put_back",
    "rollback",
]

MAX_PACK: Final = 256
"""Messages one pull asks the router for."""
MAX_PACK_BYTES: Final = 1 << 20
"""Payload bytes one reply carries at most (at least one message): what was
delivered beyond it stays with the seat for the next pull."""


def position(seat: Seat) -> tuple[int, int]:
    """(the group's confirmed offset, the partition's end) as TubeMQ's currOffset and
    maxOffset: byte offsets of the partition log, the same NSQ's SUB_ADVANCED uses."""
    channel = seat.channel
    if channel is None or channel.feed is not None:
        return -1, -1
    cursor = channel.cursor
    confirmed: int = cursor.confirmed_offset  # type: ignore[union-attr]
    return confirmed, channel.log.next_offset


def confirm(seat: Seat) -> None:
    """The consumer processed its pack: finish it (once; ids no longer held are
    skipped, as a FIN of them would be refused)."""
    pack, seat.pack = seat.pack, []
    subscription = seat.subscription
    if pack and subscription is not None:
        subscription.finish_many(pack)


def put_back(seat: Seat) -> None:
    """The consumer did not process its pack: it goes back to the channel (delivered
    again, to it or to the partition's next owner)."""
    _requeue(seat, seat.pack)
    seat.pack = []


def _requeue(seat: Seat, ids: list[int]) -> None:
    subscription = seat.subscription
    if subscription is None:
        return
    held = subscription.channel.in_flight
    for internal_id in ids:
        entry = held.get(internal_id)
        if entry is not None and entry.client == seat.client_id:
            subscription.requeue(internal_id, 0.0, timed=False)


def rollback(seat: Seat) -> None:
    """The pack was not processed (or the hold ended): the pack and whatever the
    router delivered for a pull that never took it go back to the channel, and the
    credit left is withdrawn."""
    ids = seat.pack + [delivery.record.internal_id for delivery in seat.buffered]
    seat.pack = []
    seat.buffered.clear()
    seat.on_delivery = None
    if seat.subscription is not None:
        seat.subscription.ready(0)
    _requeue(seat, ids)


def pack_reply(seat: Seat) -> broker_pb2.GetMessageResponseB2C:
    """The messages delivered to the seat as a GetMessage reply (they join its pack);
    NOT_FOUND when there are none."""
    reply = broker_pb2.GetMessageResponseB2C(
        success=True, errCode=ErrCode.SUCCESS, errMsg="OK!", minLimitTime=0, escFlowCtrl=False
    )
    messages = reply.messages
    size = 0
    buffered = seat.buffered
    subscription = seat.subscription
    held = subscription.channel.in_flight if subscription is not None else None
    pack = seat.pack
    while buffered and (not pack or size < MAX_PACK_BYTES):
        record = buffered.popleft().record
        internal_id = record.internal_id
        if held is None or internal_id not in held:
            continue  # put back meanwhile: not the seat's to send any more
        if record.ext:
            data, flag = join_payload(attributes_of(record.ext), record.body)
        else:
            data, flag = record.body, 0
        message = messages.add()  # then set: a third faster than add() with keywords
        message.messageId = internal_id
        message.checkSum = checksum(data)
        message.payLoadData = data
        message.flag = flag
        pack.append(internal_id)
        size += len(data)
    current, end = position(seat)
    reply.currOffset, reply.maxOffset = current, end
    if not messages:
        reply.success, reply.errCode = False, ErrCode.NOT_FOUND
        reply.errMsg = "The request offset reached maxOffset!"
        reply.currDataDlt = -1
    else:
        reply.currDataDlt = max(0, end - current)
        reply.requireSlow = False
    return reply
