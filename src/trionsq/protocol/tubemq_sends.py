"""SendMessage calls read a run at a time, and their success replies made from one
prepared message: a producer's hot path (issue 36's produce figure).

Read one by one (:func:`~.tubemq.decode_request`), a call costs three protobuf
parses, a required-field check for each and the Python objects between them; a
reply, two messages built and serialized. A producer sends little else than
SendMessage, many per read, each starting with the same envelope prefix, so:

- :func:`take_sends` finds the run of frames from one point that are SendMessage
  calls behind an envelope prefix already read (``tubemq._HEADERS_SEEN``) whose
  RequestBody fills the rest of the frame, and parses their bodies in one go as
  ``SendMessageCalls`` (sends.proto: a RequestBody with its ``request`` typed as
  SendMessageRequestP2B; protobuf encodes a bytes field and a message field alike).
  Serializing the parsed run again checks every required field of every call (the
  encoder refuses a message that lacks one) and must give back the very bytes read:
  anything else (a parse error, a field missing, a body not in protobuf's canonical
  encoding, which includes a field given twice) returns no run, and the caller reads
  those frames one by one, which answers each as TubeMQ's server does.
- :func:`encode_sent` fills the varying fields of one prepared ``SendMessageReply``
  (RspResponseBody with its data typed) and serializes it, per stored message; the
  envelope before it is constant.

Sans-IO and pure, as :mod:`.tubemq`; the prepared reply is this module's scratch
message, used only inside :func:`encode_sent`. The loop over a run's frames has a C
twin (``trionsq._speedups.tubemq_send_run``), as the frame splitting has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, NamedTuple, Protocol

from google.protobuf.internal import encoder
from google.protobuf.message import DecodeError, EncodeError

from ..speedups import compiled
from .tubemq import (
    _HEADERS_SEEN,
    _ONE_BLOCK,
    _RESPONSE_START,
    _SERVICE_METHODS,
    BEGIN_TOKEN,
    Frame,
    Method,
    _varint_bytes,
)
from .tubemq_proto import broker_pb2, rpc_pb2, sends_pb2

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .tubemq import FrameError

__all__ = ["SendCalls", "Stored", "encode_sent", "take_sends"]

_SEND_SERVICES: Final = frozenset(
    service for service, methods in _SERVICE_METHODS.items() if Method.SEND_MESSAGE in methods
)
"""The service types whose calls may be SendMessage (TubeMQ's table)."""
_METHOD_FIRST: Final = rpc_pb2.RequestBody(method=Method.SEND_MESSAGE).SerializePartialToString()
"""How a SendMessage RequestBody starts when its fields are in number order, as every
SDK writes them; a body that does not start so is read one by one."""
_CALL_TAG: Final = encoder.TagBytes(
    sends_pb2.SendMessageCalls.CALL_FIELD_NUMBER,
    2,  # wire type 2: length-delimited
)

_LEADS: dict[int, bytes | None] = {}
"""Room after the envelope prefix -> the length prefix of a RequestBody that fills it
(None: no length fits); see :func:`_lead`."""
_LEADS_MAX: Final = 4096


class SendCalls(NamedTuple):
    """A run of SendMessage calls: their serialNos and request messages, in order."""

    serial_nos: list[int]
    requests: Sequence[broker_pb2.SendMessageRequestP2B]


def _lead(room: int) -> bytes | None:
    """The length prefix of a message that fills ``room`` bytes together with it, as
    protobuf encodes it (None: no length fits); remembered, as a client's calls come
    in few sizes."""
    lead = _LEADS.get(room, b"")
    if lead != b"":
        return lead
    lead = None
    for width in range(1, 6):
        if room - width >= 0 and len(encoded := _varint_bytes(room - width)) == width:
            lead = encoded
            break
    if len(_LEADS) >= _LEADS_MAX:
        _LEADS.clear()
    _LEADS[room] = lead
    return lead


def _run_prefix(payload: bytes, services: frozenset[int]) -> bytes | None:
    """The seen envelope prefix ``payload`` starts with, when it is of a service
    that takes SendMessage and that this listener serves."""
    for prefix, service, _version in _HEADERS_SEEN:
        if payload.startswith(prefix):
            if service in _SEND_SERVICES and service in services:
                return prefix
            return None
    return None


def take_sends(
    frames: list[Frame | FrameError], start: int, services: frozenset[int]
) -> tuple[int, SendCalls | None]:
    """The run of SendMessage calls at ``frames[start]``: where it ends, and its calls
    (None: read ``frames[start:end]`` one by one). ``end == start``: no run starts
    there. ``services``: what the listener serves, as for ``decode_request``."""
    first = frames[start]
    if type(first) is not Frame:
        return start, None
    prefix = _run_prefix(first.payload, services)
    if prefix is None:
        return start, None
    end, serials, joined = _send_run(
        frames, start, Frame, prefix, _METHOD_FIRST, _LEADS, _lead, _CALL_TAG
    )
    if end == start:
        return start, None
    try:
        calls = sends_pb2.SendMessageCalls.FromString(joined)
        if calls.SerializeToString() != joined:  # not canonical: a field given twice?
            return end, None
    except (DecodeError, EncodeError):  # unreadable, or a required field missing
        return end, None
    return end, SendCalls(serials, [call.request for call in calls.call])


# a twin on purpose: _speedups.pyi's tubemq_send_run stub repeats this signature (a C
# function has none to import)
def _send_run_py(
    frames: list[Frame | FrameError],
    start: int,
    make: type[Frame],
    prefix: bytes,
    method_first: bytes,
    leads: dict[int, bytes | None],
    lead_for: Callable[[int], bytes | None],
    tag: bytes,
) -> tuple[int, list[int], bytes]:
    """From ``frames[start]`` on, the frames (of type ``make``) whose payload is
    ``prefix``, the length prefix of a body filling the rest (``leads`` by room, else
    ``lead_for(room)``) and a body starting with ``method_first``: where they end,
    their serialNos, and their bodies each behind ``tag`` and its length prefix.
    The pure-Python twin of ``trionsq._speedups.tubemq_send_run``."""
    at = len(prefix)
    serials: list[int] = []
    bodies: list[bytes] = []
    for frame in frames[start:]:
        if type(frame) is not make:
            break
        serial, payload = frame
        room = len(payload) - at
        if room < 0:
            break
        lead = leads.get(room, b"")
        if lead == b"":
            lead = lead_for(room)
        if (
            lead is None
            or not payload.startswith(prefix)
            or not payload.startswith(lead, at)
            or not payload.startswith(method_first, at + len(lead))
        ):
            break
        serials.append(serial)
        bodies.append(payload[at:])
    return start + len(serials), serials, tag + tag.join(bodies) if bodies else b""


_send_run: Final[
    Callable[
        [
            list[Frame | FrameError],
            int,
            type[Frame],
            bytes,
            bytes,
            dict[int, bytes | None],
            Callable[[int], bytes | None],
            bytes,
        ],
        tuple[int, list[int], bytes],
    ]
] = _send_run_py if compiled is None else compiled.tubemq_send_run
"""A run's frames gathered: compiled where built, else :func:`_send_run_py`."""


class Stored(Protocol):
    """What the reply to a stored message tells (a log record has it)."""

    @property
    def internal_id(self) -> int: ...
    @property
    def timestamp(self) -> int:
        """Nanoseconds since the Unix epoch."""

    @property
    def offset(self) -> int: ...


_SENT: Final = sends_pb2.SendMessageReply(
    method=Method.SEND_MESSAGE,
    data=broker_pb2.SendMessageResponseB2P(success=True, errCode=200, errMsg="", requireAuth=False),
)
_SENT_DATA: Final = _SENT.data
_LENGTHS: Final = tuple(_RESPONSE_START + _varint_bytes(size) for size in range(128))
"""The envelope and length prefix before a reply body of each size under 128 (they
all are: a success reply's body takes at most 66 bytes)."""


def encode_sent(serial_nos: Sequence[int], stored: Sequence[Stored]) -> bytes:
    """The reply frames of stored messages, one per serialNo: the same bytes as
    :func:`~.tubemq.encode_reply` of a SendMessageResponseB2P with success, errCode
    200, the id as errMsg (as TubeMQ does), requireAuth false, and the message's id,
    append time (ms) and offset."""
    data = _SENT_DATA
    serialize = _SENT.SerializePartialToString  # complete: every required field is set
    pack = _ONE_BLOCK.pack
    lengths = _LENGTHS
    parts: list[bytes] = []
    append = parts.append
    for serial_no, message in zip(serial_nos, stored, strict=True):
        message_id = message.internal_id
        data.errMsg = str(message_id)
        data.messageId = message_id
        data.appendTime = message.timestamp // 1_000_000
        data.appendOffset = message.offset
        body = serialize()
        size = len(body)
        start = lengths[size] if size < 128 else _RESPONSE_START + _varint_bytes(size)
        append(pack(BEGIN_TOKEN, serial_no & 0xFFFF_FFFF, 1, len(start) + size))
        append(start)
        append(body)
    return b"".join(parts)
