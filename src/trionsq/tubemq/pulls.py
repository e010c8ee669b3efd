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

from ..protocol.tubemq_formats import ErrCode
from ..protocol.tubemq_proto import broker_pb2
from .messages import transfered

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
    messages: list[broker_pb2.TransferedMessage] = []
    size = 0
    buffered = seat.buffered
    subscription = seat.subscription
    held = subscription.channel.in_flight if subscription is not None else None
    while buffered and (not messages or size < MAX_PACK_BYTES):
        record = buffered.popleft().record
        entry = held.get(record.internal_id) if held is not None else None
        if entry is None or entry.client != seat.client_id:
            continue  # put back meanwhile (a timeout): not ours to send any more
        message = transfered(record)
        messages.append(message)
        seat.pack.append(record.internal_id)
        size += len(message.payLoadData)
    current, end = position(seat)
    if not messages:
        return broker_pb2.GetMessageResponseB2C(
            success=False,
            errCode=ErrCode.NOT_FOUND,
            errMsg="The request offset reached maxOffset!",
            currOffset=current,
            minLimitTime=0,
            escFlowCtrl=False,
            currDataDlt=-1,
            maxOffset=end,
        )
    return broker_pb2.GetMessageResponseB2C(
        success=True,
        errCode=ErrCode.SUCCESS,
        errMsg="OK!",
        messages=messages,
        currOffset=current,
        minLimitTime=0,
        escFlowCtrl=False,
        currDataDlt=max(0, end - current),
        requireSlow=False,
        maxOffset=end,
    )
