"""TubeMQ's client RPC on the wire: frames, the call envelopes and the method ids.

Sans-IO, as the rest of this package: bytes in, frames and calls out, and bytes
back; the services that answer live in :mod:`trionsq.tubemq`. Facts from Apache
TubeMQ (docs/tubemq.md has the sources); the code is trionsq's own.

A frame, every integer big-endian::

    [4 begin token 0xFF7FF4FE][4 serialNo][4 listSize] then listSize times [4 len][len bytes]

The blocks joined are the payload: length-prefixed protobuf messages (varint size,
then the message, as ``google.protobuf.proto`` writes them). A request is
``RpcConnHeader, RequestHeader, RequestBody`` (the method's own message in
``RequestBody.request``); a reply is ``RpcConnHeader, ResponseHeader`` and then
``RspResponseBody`` (status SUCCESS) or ``RspExceptionBody``. The server echoes the
request's serialNo, so a client may have many calls out on one connection.

What closes a connection (TubeMQ's decoder throws and the channel goes): a wrong
begin token, a listSize outside 1..:data:`MAX_LIST_SIZE`, a block longer than
:data:`MAX_BLOCK` or a payload over the reader's bound. Everything after the frame
is read whole is answered with an exception reply instead, worded as TubeMQ's Java
server words it, so its SDKs react as they do there.
"""

from __future__ import annotations

import enum
import io
import struct
from typing import TYPE_CHECKING, Final, NamedTuple, TypeVar

import attrs
from google.protobuf import proto
from google.protobuf.internal import decoder, encoder
from google.protobuf.message import DecodeError, Message

from ..speedups import compiled
from .tubemq_proto import broker_pb2, master_pb2, rpc_pb2

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "BEGIN_TOKEN",
    "BLOCK_SIZE",
    "MAX_BLOCK",
    "MAX_LIST_SIZE",
    "PROTOCOL_VERSION",
    "STANDBY_EXCEPTION",
    "CallRefused",
    "Frame",
    "FrameError",
    "FrameReader",
    "Method",
    "Reply",
    "Request",
    "Service",
    "decode_reply",
    "decode_request",
    "encode_exception",
    "encode_frame",
    "encode_reply",
    "encode_request",
]

BEGIN_TOKEN: Final = 0xFF7FF4FE
"""RPC_PROTOCOL_BEGIN_TOKEN: every frame starts with it."""
BLOCK_SIZE: Final = 8192
"""How long the blocks this side writes are: TubeMQ's Java and Go writers cut at 8,192."""
MAX_BLOCK: Final = 8196
"""The longest block accepted (the bound TubeMQ's protocol description gives)."""
MAX_LIST_SIZE: Final = 3584
"""TubeMQ's MAX_FRAME_MAX_LIST_SIZE: (20 MiB + 8 MiB) / 8,192 blocks."""
PROTOCOL_VERSION: Final = 3
"""The RPC protocol version TubeMQ's current server puts in its replies."""
REQUEST_FLAG: Final = 0
RESPONSE_FLAG: Final = 1

_HEAD: Final = struct.Struct(">III")
_LENGTH: Final = struct.Struct(">i")
_ONE_BLOCK: Final = struct.Struct(">IIIi")
_ONE_BLOCK_SIZE: Final = _ONE_BLOCK.size
_new_tuple: Final = tuple.__new__
"""Builds a :class:`Frame` without the Python-level ``__new__`` a NamedTuple has."""

# protobuf's own varint codec (not in its type stubs): the size prefixes of the
# envelope's messages, read and written without a stream object per message
_decode_varint32: Final[Callable[[bytes, int], tuple[int, int]]] = getattr(  # noqa: B009
    decoder, "_DecodeVarint32"
)
_varint_bytes: Final[Callable[[int], bytes]] = getattr(encoder, "_VarintBytes")  # noqa: B009
_HEADERS_SEEN: list[tuple[bytes, int, int]] = []
"""Envelope beginnings seen (RpcConnHeader and RequestHeader, each length-prefixed)
with their service type and protocol version: a client sends the same bytes with
every call, so they are parsed once; a call that starts with one of them is read
from its RequestBody on (the prefix of a valid envelope determines its parse)."""
_HEADERS_SEEN_MAX: Final = 16

JAVA_EXCEPTION: Final = "java.lang.Exception"
PROTOBUF_EXCEPTION: Final = "com.google.protobuf.InvalidProtocolBufferException"
STANDBY_EXCEPTION: Final = "org.apache.inlong.tubemq.corerpc.exception.StandbyException"
"""A master that is not the active one: SDKs look for ``StandbyException`` in the name
and register with the next master address."""
_APACHE_PREFIX: Final = "org.apache.inlong.tubemq."
_OLD_PREFIXES: Final = {1: "com.tencent.tubemq.", 2: "com.apache.tubemq."}
"""Older clients (protocol versions 1 and 2) know TubeMQ's classes by these names."""


class Service(enum.IntEnum):
    """``RequestHeader.serviceType``."""

    MASTER = 1
    BROKER_READ = 2
    BROKER_WRITE = 3


class Method(enum.IntEnum):
    """``RequestBody.method``: the calls of producers and consumers."""

    PRODUCER_REGISTER = 1
    PRODUCER_HEARTBEAT = 2
    PRODUCER_CLOSE = 3
    CONSUMER_REGISTER = 4
    CONSUMER_HEARTBEAT = 5
    CONSUMER_CLOSE = 6
    SEND_MESSAGE = 13
    BROKER_CONSUMER_REGISTER = 15
    BROKER_CONSUMER_HEARTBEAT = 16
    GET_MESSAGE = 17
    COMMIT_OFFSET = 18


_REQUESTS: Final[dict[int, type[Message]]] = {
    Method.PRODUCER_REGISTER: master_pb2.RegisterRequestP2M,
    Method.PRODUCER_HEARTBEAT: master_pb2.HeartRequestP2M,
    Method.PRODUCER_CLOSE: master_pb2.CloseRequestP2M,
    Method.CONSUMER_REGISTER: master_pb2.RegisterRequestC2M,
    Method.CONSUMER_HEARTBEAT: master_pb2.HeartRequestC2M,
    Method.CONSUMER_CLOSE: master_pb2.CloseRequestC2M,
    Method.SEND_MESSAGE: broker_pb2.SendMessageRequestP2B,
    Method.BROKER_CONSUMER_REGISTER: broker_pb2.RegisterRequestC2B,
    Method.BROKER_CONSUMER_HEARTBEAT: broker_pb2.HeartBeatRequestC2B,
    Method.GET_MESSAGE: broker_pb2.GetMessageRequestC2B,
    Method.COMMIT_OFFSET: broker_pb2.CommitOffsetRequestC2B,
}
"""The request message of each method served (the broker-to-master calls and the
client-balance consumer's are TubeMQ-internal or unsupported: "Unsupported method")."""
_REPLIES: Final[dict[int, type[Message]]] = {
    Method.PRODUCER_REGISTER: master_pb2.RegisterResponseM2P,
    Method.PRODUCER_HEARTBEAT: master_pb2.HeartResponseM2P,
    Method.PRODUCER_CLOSE: master_pb2.CloseResponseM2P,
    Method.CONSUMER_REGISTER: master_pb2.RegisterResponseM2C,
    Method.CONSUMER_HEARTBEAT: master_pb2.HeartResponseM2C,
    Method.CONSUMER_CLOSE: master_pb2.CloseResponseM2C,
    Method.SEND_MESSAGE: broker_pb2.SendMessageResponseB2P,
    Method.BROKER_CONSUMER_REGISTER: broker_pb2.RegisterResponseB2C,
    Method.BROKER_CONSUMER_HEARTBEAT: broker_pb2.HeartBeatResponseB2C,
    Method.GET_MESSAGE: broker_pb2.GetMessageResponseB2C,
    Method.COMMIT_OFFSET: broker_pb2.CommitOffsetResponseB2C,
}
_SERVICE_METHODS: Final[dict[int, frozenset[int]]] = {
    Service.MASTER: frozenset({1, 2, 3, 4, 5, 6, 7, 8, 9, 20, 21, 22}),
    Service.BROKER_READ: frozenset(range(11, 20)),
    Service.BROKER_WRITE: frozenset({11, 12, 13, 14}),
}
"""Which method ids each service type admits (TubeMQ's own table)."""


# ----------------------------------------------------------------------- frames


class Frame(NamedTuple):
    """One whole frame: its serialNo and its blocks joined (a tuple: one is made per
    call, and a frozen attrs class costs four times as much to build)."""

    serial_no: int
    payload: bytes


@attrs.frozen
class FrameError:
    """Bytes that are not TubeMQ's framing: the connection is closed (nothing is sent)."""

    reason: str


class FrameReader:
    """Splits a byte stream into frames (sans-IO: feed reads, take frames).

    Holds at most one frame being received: ``max_payload`` bounds it, so a peer
    cannot make it buffer more than that plus one read. The bytes are kept as read
    (``bytes``, not copied into a growing buffer): a frame's payload is one slice of
    them, and only what is left unframed is copied, when the next read comes.
    """

    __slots__ = (
        "_blocks",
        "_buffer",
        "_eof",
        "_incoming",
        "_left",
        "_pos",
        "_serial",
        "_size",
        "closed",
        "max_payload",
    )

    def __init__(self, max_payload: int) -> None:
        self.max_payload = max_payload
        self.closed = False
        self._buffer = b""
        self._pos = 0
        """Where the unframed part of :attr:`_buffer` starts."""
        self._incoming: list[bytes] = []
        """Reads not yet joined to the buffer (joined once, by :meth:`next_frames`)."""
        self._serial: int | None = None
        """The frame being received, once its header is read."""
        self._left = 0
        self._size = 0
        self._blocks: list[bytes] = []
        self._eof = False

    @property
    def buffered(self) -> int:
        """Bytes held: the frame in progress and what follows it."""
        waiting = sum(len(data) for data in self._incoming)
        return len(self._buffer) - self._pos + waiting + self._size

    def receive_data(self, data: bytes) -> None:
        """Bytes read from the connection; ``b""`` is its end."""
        if self.closed:
            return
        if data:
            self._incoming.append(data)
        else:
            self._eof = True

    def next_frames(self, limit: int) -> list[Frame | FrameError]:
        """Up to ``limit`` whole frames; a :class:`FrameError` ends the list and closes
        the reader. At the end of the stream, a frame left half-read is an error."""
        if self._incoming:
            rest = self._buffer[self._pos :] if self._pos < len(self._buffer) else b""
            self._buffer = b"".join((rest, *self._incoming)) if rest else b"".join(self._incoming)
            self._pos = 0
            self._incoming.clear()
        found: list[Frame | FrameError] = []
        while not self.closed and len(found) < limit:
            if self._serial is None:
                self._whole_frames(found, limit)
                if len(found) >= limit:
                    break
            frame = self._next()
            if frame is None:
                break
            found.append(frame)
        if not self.closed and self._eof and len(found) < limit:
            self.closed = True
            if self._serial is not None or self._pos < len(self._buffer):
                found.append(FrameError("the connection ended inside a frame"))
        return found

    def _whole_frames(self, found: list[Frame | FrameError], limit: int) -> None:
        """The usual frames, one block each and already whole, in one tight loop
        (anything else is left to :meth:`_next`)."""
        longest = min(MAX_BLOCK, self.max_payload)
        self._pos = _split_frames(self._buffer, self._pos, limit, longest, Frame, found)

    def _fail(self, reason: str) -> FrameError:
        self.closed = True
        self._buffer = b""
        self._incoming.clear()
        self._pos = self._size = 0
        self._serial = None
        self._blocks = []
        return FrameError(reason)

    def _next(self) -> Frame | FrameError | None:
        """One frame, read block by block as its blocks arrive (None: not whole yet)."""
        buffer = self._buffer
        pos = self._pos
        if self._serial is None:
            if len(buffer) - pos < _HEAD.size:
                return None
            token, serial, count = _HEAD.unpack_from(buffer, pos)
            if token != BEGIN_TOKEN:
                return self._fail(f"unknown protocol: begin token {token:#010x}")
            if not 0 < count <= MAX_LIST_SIZE:
                return self._fail(f"list size {count} is outside 1..{MAX_LIST_SIZE}")
            pos += _HEAD.size
            self._pos = pos
            self._serial, self._left, self._size, self._blocks = serial, count, 0, []
        while self._left:
            if len(buffer) - pos < _LENGTH.size:
                return None
            (length,) = _LENGTH.unpack_from(buffer, pos)
            if not 0 <= length <= MAX_BLOCK:
                return self._fail(f"block length {length} is outside 0..{MAX_BLOCK}")
            if self._size + length > self.max_payload:
                return self._fail(f"frame longer than {self.max_payload} bytes")
            start = pos + _LENGTH.size
            if len(buffer) - start < length:
                return None
            self._blocks.append(buffer[start : start + length])
            self._size += length
            pos = self._pos = start + length
            self._left -= 1
        blocks = self._blocks
        frame = Frame(self._serial, blocks[0] if len(blocks) == 1 else b"".join(blocks))
        self._serial, self._size, self._blocks = None, 0, []
        return frame


# a twin on purpose: _speedups.pyi's tubemq_frames stub repeats this signature (a C
# function has none to import)
def _split_frames_py(
    buffer: bytes,
    pos: int,
    limit: int,
    longest: int,
    make: type[Frame],
    out: list[Frame | FrameError],
) -> int:
    """Append to ``out``, until it holds ``limit``, the frames from ``buffer[pos:]`` on
    that are whole and of one block of at most ``longest`` bytes; where they end.
    The pure-Python twin of ``trionsq._speedups.tubemq_frames``."""
    end = len(buffer)
    unpack = _ONE_BLOCK.unpack_from
    append = out.append
    while end - pos >= _ONE_BLOCK_SIZE and len(out) < limit:
        token, serial, count, length = unpack(buffer, pos)
        start = pos + _ONE_BLOCK_SIZE
        if token != BEGIN_TOKEN or count != 1 or not 0 <= length <= longest:
            break
        if end - start < length:
            break
        pos = start + length
        append(_new_tuple(make, (serial, buffer[start:pos])))
    return pos


_split_frames: Final[
    Callable[[bytes, int, int, int, type[Frame], list[Frame | FrameError]], int]
] = _split_frames_py if compiled is None else compiled.tubemq_frames
"""Whole one-block frames: compiled where built, else :func:`_split_frames_py`."""


def encode_frame(serial_no: int, payload: bytes) -> bytes:
    """A frame of ``payload`` in blocks of at most :data:`BLOCK_SIZE` bytes."""
    if len(payload) <= BLOCK_SIZE:
        return _ONE_BLOCK.pack(BEGIN_TOKEN, serial_no & 0xFFFF_FFFF, 1, len(payload)) + payload
    blocks = [payload[i : i + BLOCK_SIZE] for i in range(0, len(payload), BLOCK_SIZE)] or [b""]
    parts = [_HEAD.pack(BEGIN_TOKEN, serial_no & 0xFFFF_FFFF, len(blocks))]
    for block in blocks:
        parts.append(_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


# ----------------------------------------------------------------------- calls


class Request(NamedTuple):
    """A call the server is to answer (a tuple, as :class:`Frame`)."""

    serial_no: int
    service: int
    method: int
    body: Message
    """The method's request message (required fields present)."""
    protocol_version: int = 0
    timeout_ms: int = 0


@attrs.frozen
class CallRefused:
    """A call answered with an exception reply (TubeMQ's status, class name and text)."""

    serial_no: int
    exception: str
    text: str
    status: int = rpc_pb2.ResponseHeader.ERROR
    protocol_version: int = 0


_M = TypeVar("_M", bound="Message")


class _Unreadable(Exception):
    """A payload that does not hold the envelope's messages."""


def _read_delimited(stream: io.BytesIO, kind: type[_M]) -> _M:
    try:
        message = proto.parse_length_prefixed(kind, stream)
    except (DecodeError, ValueError, IndexError, OverflowError) as error:
        # OverflowError: a length varint past 2**63 (protobuf's reader cannot slice it)
        raise _Unreadable(str(error)) from None
    if message is None:
        raise _Unreadable(f"missing {kind.DESCRIPTOR.name}")
    _check_required(message)
    return message


def _check_required(message: Message) -> None:
    if not message.IsInitialized():
        # the runtime has it; the stubs only know IsInitialized
        missing = ", ".join(message.FindInitializationErrors())  # type: ignore[attr-defined]
        raise _Unreadable(f"Message missing required fields: {missing}")


def _span(payload: bytes, pos: int) -> tuple[int, int]:
    """Where the length-prefixed message at ``pos`` is: (start, end)."""
    size, start = _decode_varint32(payload, pos)
    end = start + size
    if end > len(payload):
        raise _Unreadable("Truncated message")
    return start, end


def _headers(payload: bytes) -> tuple[int, int, int]:
    """(service type, protocol version, where RequestBody starts) of a request."""
    for prefix, service, version in _HEADERS_SEEN:
        if payload.startswith(prefix):
            return service, version, len(prefix)
    conn_start, conn_end = _span(payload, 0)
    head_start, head_end = _span(payload, conn_end)
    _check_required(rpc_pb2.RpcConnHeader.FromString(payload[conn_start:conn_end]))
    header = rpc_pb2.RequestHeader.FromString(payload[head_start:head_end])
    if len(_HEADERS_SEEN) < _HEADERS_SEEN_MAX:
        _HEADERS_SEEN.append((payload[:head_end], header.serviceType, header.protocolVer))
    return header.serviceType, header.protocolVer, head_end


def decode_request(frame: Frame, services: frozenset[int]) -> Request | CallRefused:
    """The call in ``frame``, or the exception reply TubeMQ's server sends for it.

    ``services``: the service types this listener serves (a master call sent to the
    broker listener is refused as TubeMQ's broker refuses it).
    """
    serial = frame.serial_no
    payload = frame.payload
    try:
        service, version, pos = _headers(payload)
        if pos >= len(payload):
            raise _Unreadable("missing RequestBody")
        body_start, body_end = _span(payload, pos)
        body = rpc_pb2.RequestBody.FromString(payload[body_start:body_end])
        _check_required(body)
    except (_Unreadable, DecodeError, IndexError, ValueError) as error:
        text = f"IPC server unable to read call parameters:{error}"
        return CallRefused(serial, PROTOBUF_EXCEPTION, text, rpc_pb2.ResponseHeader.FATAL)
    method = body.method
    kind = _REQUESTS.get(method)
    if kind is None:
        text = f"IPC server handle request error :Unsupported method ID :{method}"
        return _refused(serial, JAVA_EXCEPTION, text, version, fatal=True)
    try:
        message = kind.FromString(body.request)
        _check_required(message)
    except (DecodeError, _Unreadable) as error:
        text = f"IPC server handle request error :{error}"
        return _refused(serial, PROTOBUF_EXCEPTION, text, version, fatal=True)
    allowed = _SERVICE_METHODS.get(service)
    if allowed is None:
        return _refused(serial, JAVA_EXCEPTION, "Service Type is invalid!", version)
    if method not in allowed:
        text = f"Unsupported method {method}in service type {service}!"  # sic: TubeMQ's text
        return _refused(serial, JAVA_EXCEPTION, text, version)
    if service not in services:
        return _refused(
            serial, JAVA_EXCEPTION, f"No service {service} found on the server", version
        )
    return Request(serial, service, method, message, version, body.timeout)


def _refused(
    serial: int, exception: str, text: str, version: int, *, fatal: bool = False
) -> CallRefused:
    status = rpc_pb2.ResponseHeader.FATAL if fatal else rpc_pb2.ResponseHeader.ERROR
    return CallRefused(serial, exception, text, status, version)


def _delimited(message: Message) -> bytes:
    out = io.BytesIO()
    proto.serialize_length_prefixed(message, out)
    return out.getvalue()


_RESPONSE_START: Final = _delimited(rpc_pb2.RpcConnHeader(flag=RESPONSE_FLAG)) + _delimited(
    rpc_pb2.ResponseHeader(status=rpc_pb2.ResponseHeader.SUCCESS, protocolVer=PROTOCOL_VERSION)
)
"""What every successful reply starts with (built once)."""


def encode_reply(serial_no: int, method: int, message: Message) -> bytes:
    """A successful reply frame carrying ``message`` (which must be complete)."""
    body = rpc_pb2.RspResponseBody(method=method, data=message.SerializeToString())
    data = body.SerializeToString()
    return encode_frame(serial_no, _RESPONSE_START + _varint_bytes(len(data)) + data)


def exception_name(name: str, protocol_version: int) -> str:
    """TubeMQ's class name as a client of ``protocol_version`` knows it."""
    old = _OLD_PREFIXES.get(protocol_version)
    if old is None or not name.startswith(_APACHE_PREFIX):
        return name
    return old + name[len(_APACHE_PREFIX) :]


def encode_exception(refused: CallRefused) -> bytes:
    """An exception reply frame."""
    header = rpc_pb2.ResponseHeader(status=refused.status, protocolVer=PROTOCOL_VERSION)  # type: ignore[arg-type]
    body = rpc_pb2.RspExceptionBody(
        exceptionName=exception_name(refused.exception, refused.protocol_version),
        stackTrace=refused.text,
    )
    conn = rpc_pb2.RpcConnHeader(flag=RESPONSE_FLAG)
    return encode_frame(refused.serial_no, _delimited(conn) + _delimited(header) + _delimited(body))


# ----------------------------------------------------------------------- client side


@attrs.frozen
class Reply:
    """A reply a client received: the method's message, or the exception's name and text."""

    serial_no: int
    method: int = 0
    body: Message | None = None
    exception: str = ""
    text: str = ""
    status: int = rpc_pb2.ResponseHeader.SUCCESS


def encode_request(
    serial_no: int,
    service: int,
    method: int,
    message: Message,
    *,
    protocol_version: int = 2,
    timeout_ms: int = 10_000,
) -> bytes:
    """A request frame, as TubeMQ's SDKs build one (the client side, for tests and tools)."""
    payload = (
        _delimited(rpc_pb2.RpcConnHeader(flag=REQUEST_FLAG))
        + _delimited(rpc_pb2.RequestHeader(serviceType=service, protocolVer=protocol_version))
        + _delimited(
            rpc_pb2.RequestBody(
                method=method, timeout=timeout_ms, request=message.SerializeToString()
            )
        )
    )
    return encode_frame(serial_no, payload)


def decode_reply(frame: Frame) -> Reply:
    """A reply frame, read as TubeMQ's SDKs read it.

    Raises:
        ValueError: the payload is not a reply (the SDKs drop the connection).
    """
    stream = io.BytesIO(frame.payload)
    try:
        _read_delimited(stream, rpc_pb2.RpcConnHeader)
        header = _read_delimited(stream, rpc_pb2.ResponseHeader)
        if header.status != rpc_pb2.ResponseHeader.SUCCESS:
            failure = _read_delimited(stream, rpc_pb2.RspExceptionBody)
            return Reply(
                frame.serial_no,
                exception=failure.exceptionName,
                text=failure.stackTrace,
                status=header.status,
            )
        body = _read_delimited(stream, rpc_pb2.RspResponseBody)
        kind = _REPLIES.get(body.method)
        if kind is None:
            raise _Unreadable(f"Unsupported method ID :{body.method}")
        message = kind.FromString(body.data)
        _check_required(message)
    except (_Unreadable, DecodeError) as error:
        raise ValueError(str(error)) from None
    return Reply(frame.serial_no, body.method, message)
