"""The client side of protocol V2, sans-IO: commands to bytes, bytes to frames.

:func:`encode_command` gives the exact wire bytes of every command event in
:mod:`.commands` (spec tcp-protocol §4 and §8.2), so a client, the tests and the
server state machine share one vocabulary. :class:`ClientConnection` parses what a
server sends (``[size][frame type][data]``, spec §2) into :data:`Frame` values,
decoding message frames in the layout the connection negotiated (spec §3, §8.8).

Nothing here does I/O: the caller writes the bytes and feeds what it reads.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Final, TypeVar, cast

import attrs

from .commands import (
    Auth,
    Cls,
    Command,
    Dpub,
    ExtMessage,
    Fin,
    Identify,
    InternalCreateTopic,
    Mpub,
    MpubExt,
    MpubTrace,
    Nop,
    Pub,
    PubExt,
    PubTrace,
    Pull,
    Rdy,
    Req,
    Sub,
    SubAdvanced,
    SubOrdered,
    Touch,
)
from .errors import ProtocolError
from .frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    GROUP_OWNER,
    MAGIC_V2,
)
from .identify import IdentifyRequest, encode_identify_request
from .message import Message, decode_message

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "MAGIC_V2",
    "NON_FATAL_ERROR_CODES",
    "TRACED_REPLY_SIZE",
    "ClientConnection",
    "ErrorReply",
    "Frame",
    "MessageFrame",
    "Response",
    "TracedReply",
    "decode_error_reply",
    "decode_traced_reply",
    "encode_command",
    "encode_commands",
    "encode_fin",
    "encode_identify",
    "encode_mpub_ext_parts",
    "encode_req",
    "encode_touch",
    "is_fatal_error_code",
]

_INT32: Final = struct.Struct(">i")
_UINT16: Final = struct.Struct(">H")
_UINT64: Final = struct.Struct(">Q")
_SIZE: Final = struct.Struct(">I")
_TRACED: Final = struct.Struct(">2sQQQI")
_INT32_MAX: Final = 2**31 - 1

TRACED_REPLY_SIZE: Final = _TRACED.size
"""The traced publish reply is 30 bytes (spec §8.4)."""

DEFAULT_MAX_FRAME_SIZE: Final = 16 * 1024 * 1024
"""Largest ``size`` field accepted by default: far above nsqd's default 1 MiB
max-msg-size plus a message header and a 64 KiB ext header. Pass the server's real
limit to :class:`ClientConnection` to hold a client to it."""

NON_FATAL_ERROR_CODES: Final = frozenset(
    {
        # upstream (spec §4.14): the id was not in flight or not ours
        "E_FIN_FAILED",
        "E_REQ_FAILED",
        "E_TOUCH_FAILED",
        # Youzan (spec §8.9): the server keeps the connection after these
        "E_EXT_NOT_SUPPORT",
        "E_INVALID_JSON_HEADER",
        "INVALID_TRACE_ID",
        "E_CREATE_TOPIC_FAILED",
        "E_PUB_FAILED",
        "E_MPUB_FAILED",
        "E_FAILED_ON_NOT_LEADER",
        "E_FAILED_ON_NOT_WRITABLE",
        # trionsq: a DPUB over its topic's publish limit (PUB and MPUB are above)
        "E_DPUB_FAILED",
    }
)
"""Error codes after which a server may keep the connection open.

Some of them are fatal in another context (upstream's store failures, Youzan's
not-leader answer to SUB); the server then closes the socket, which the client
sees as EOF, so treating the code as non-fatal never keeps a dead connection."""


def is_fatal_error_code(code: str) -> bool:
    """True when an error with this code ends the connection (spec §4.14, §8.9)."""
    return code not in NON_FATAL_ERROR_CODES


# ---------------------------------------------------------------------- commands


def _sized(body: bytes) -> bytes:
    """``[int32 size][body]``; a body an int32 cannot size is a caller error."""
    if len(body) > _INT32_MAX:
        raise ValueError(f"body of {len(body)} bytes does not fit an int32 size")
    return _INT32.pack(len(body)) + body


def _arg(text: str) -> bytes:
    """A topic or channel name as its wire bytes (the server's surrogateescape inverse).

    A space or newline would change the command's arguments, so it is refused.
    """
    raw = text.encode("utf-8", "surrogateescape")
    if b" " in raw or b"\n" in raw:
        raise ValueError(f"argument {text!r} contains a space or newline")
    return raw


def _line(*params: bytes) -> bytes:
    return b" ".join(params) + b"\n"


def _with_partition(verb: bytes, topic: str, partition: int | None) -> bytes:
    if partition is None:
        return _line(verb, _arg(topic))
    return _line(verb, _arg(topic), b"%d" % partition)


def _multi(parts: Iterable[bytes]) -> bytes:
    """An MPUB-style body: ``[int32 size][int32 count]([int32 size][part])*``."""
    pieces = [_sized(part) for part in parts]
    return _sized(_INT32.pack(len(pieces)) + b"".join(pieces))


def _ext_part(message: ExtMessage) -> bytes:
    """``[uint16 json_len][json header][body]`` (spec §8.2)."""
    if len(message.header) > 0xFFFF:
        raise ValueError(f"ext header of {len(message.header)} bytes does not fit a uint16")
    return _UINT16.pack(len(message.header)) + message.header + message.body


def _encode_identify(cmd: Identify) -> bytes:
    return b"IDENTIFY\n" + _sized(encode_identify_request(cmd.request))


def _encode_auth(cmd: Auth) -> bytes:
    return b"AUTH\n" + _sized(cmd.secret)


def _sub_line(verb: bytes, topic: str, channel: str, partition: int | None) -> bytes:
    if partition is None:
        return _line(verb, _arg(topic), _arg(channel))
    return _line(verb, _arg(topic), _arg(channel), b"%d" % partition)


def _encode_sub(cmd: Sub) -> bytes:
    return _sub_line(b"SUB", cmd.topic, cmd.channel, cmd.partition)


def _encode_sub_ordered(cmd: SubOrdered) -> bytes:
    return _sub_line(b"SUB_ORDERED", cmd.topic, cmd.channel, cmd.partition)


def _encode_sub_advanced(cmd: SubAdvanced) -> bytes:
    if cmd.offset is None:
        return _sub_line(b"SUB_ADVANCED", cmd.topic, cmd.channel, cmd.partition)
    # the offset spec is the 5th argument, so a default partition is spelled -1
    partition = -1 if cmd.partition is None else cmd.partition
    spec = b"%s:%d" % (cmd.offset.kind.encode("ascii"), cmd.offset.value)
    return _line(b"SUB_ADVANCED", _arg(cmd.topic), _arg(cmd.channel), b"%d" % partition, spec)


def _encode_pub(cmd: Pub) -> bytes:
    return _with_partition(b"PUB", cmd.topic, cmd.partition) + _sized(cmd.body)


def _encode_mpub(cmd: Mpub) -> bytes:
    return _with_partition(b"MPUB", cmd.topic, cmd.partition) + _multi(cmd.bodies)


def _encode_dpub(cmd: Dpub) -> bytes:
    return _line(b"DPUB", _arg(cmd.topic), b"%d" % cmd.defer_ms) + _sized(cmd.body)


def _encode_pub_trace(cmd: PubTrace) -> bytes:
    head = _with_partition(b"PUB_TRACE", cmd.topic, cmd.partition)
    return head + _sized(_UINT64.pack(cmd.trace_id) + cmd.body)


def _encode_mpub_trace(cmd: MpubTrace) -> bytes:
    head = _with_partition(b"MPUB_TRACE", cmd.topic, cmd.partition)
    return head + _multi(_UINT64.pack(m.trace_id) + m.body for m in cmd.messages)


def _encode_pub_ext(cmd: PubExt) -> bytes:
    head = _with_partition(b"PUB_EXT", cmd.topic, cmd.partition)
    return head + _sized(_ext_part(cmd.message))


def _encode_mpub_ext(cmd: MpubExt) -> bytes:
    head = _with_partition(b"MPUB_EXT", cmd.topic, cmd.partition)
    return head + _multi(_ext_part(m) for m in cmd.messages)


def encode_mpub_ext_parts(topic: str, partition: int | None, count: int, parts: bytes) -> bytes:
    """MPUB_EXT of ``count`` parts encoded already (``[int32 size][uint16 json_len]
    [json header][body]`` each, as :func:`encode_command` writes them): for a client
    that builds a batch in bulk (the Spark sink), with one copy of the parts."""
    head = _with_partition(b"MPUB_EXT", topic, partition)
    if len(parts) + 4 > _INT32_MAX:
        raise ValueError(f"body of {len(parts) + 4} bytes does not fit an int32 size")
    return b"".join((head, _INT32.pack(len(parts) + 4), _INT32.pack(count), parts))


def _encode_rdy(cmd: Rdy) -> bytes:
    return b"RDY %d\n" % cmd.count


def _encode_pull(cmd: Pull) -> bytes:
    return b"PULL %d\n" % cmd.count


def encode_fin(message_id: bytes) -> bytes:
    """FIN for one message id, without building a :class:`Fin` first (a consumer's
    hot path: one per message)."""
    return b"FIN " + message_id + b"\n"


def encode_req(message_id: bytes, timeout_ms: int) -> bytes:
    """REQ for one message id and delay."""
    return b"REQ " + message_id + b" %d\n" % timeout_ms


def encode_touch(message_id: bytes) -> bytes:
    """TOUCH for one message id."""
    return b"TOUCH " + message_id + b"\n"


def _encode_fin(cmd: Fin) -> bytes:
    return encode_fin(cmd.message_id)


def _encode_req(cmd: Req) -> bytes:
    return encode_req(cmd.message_id, cmd.timeout_ms)


def _encode_touch(cmd: Touch) -> bytes:
    return encode_touch(cmd.message_id)


def _encode_cls(cmd: Cls) -> bytes:
    return b"CLS\n"


def _encode_nop(cmd: Nop) -> bytes:
    return b"NOP\n"


def _encode_internal_create_topic(cmd: InternalCreateTopic) -> bytes:
    params = [b"INTERNAL_CREATE_TOPIC", _arg(cmd.topic), b"%d" % cmd.partition]
    if cmd.ext:
        params.append(b"true")
    return _line(*params)


_C = TypeVar("_C", bound=Command)
_Encoder = Callable[[Command], bytes]
_ENCODERS: Final[dict[type, _Encoder]] = {}


def _register(cls: type[_C], encoder: Callable[[_C], bytes]) -> None:
    # The key is the encoder's own argument type, so the cast is sound.
    _ENCODERS[cls] = cast("_Encoder", encoder)


_register(Identify, _encode_identify)
_register(Auth, _encode_auth)
_register(Sub, _encode_sub)
_register(SubOrdered, _encode_sub_ordered)
_register(SubAdvanced, _encode_sub_advanced)
_register(Pub, _encode_pub)
_register(Mpub, _encode_mpub)
_register(Dpub, _encode_dpub)
_register(PubTrace, _encode_pub_trace)
_register(MpubTrace, _encode_mpub_trace)
_register(PubExt, _encode_pub_ext)
_register(MpubExt, _encode_mpub_ext)
_register(Rdy, _encode_rdy)
_register(Pull, _encode_pull)
_register(Fin, _encode_fin)
_register(Req, _encode_req)
_register(Touch, _encode_touch)
_register(Cls, _encode_cls)
_register(Nop, _encode_nop)
_register(InternalCreateTopic, _encode_internal_create_topic)


def encode_command(cmd: Command) -> bytes:
    """The exact bytes a client sends for ``cmd`` (the magic is not included).

    Partition arguments appear only when not ``None``; SUB_ADVANCED with an offset
    but no partition sends partition ``-1`` (the default partition) before it.

    Raises:
        ValueError: a name contains a space or newline, or a body or header is too
            large for its size field.
        TypeError: ``cmd`` is not a command.
    """
    encoder = _ENCODERS.get(type(cmd))
    if encoder is None:
        raise TypeError(f"not a command: {cmd!r}")
    return encoder(cmd)


def encode_commands(cmds: Iterable[Command]) -> bytes:
    """Several commands joined for one write."""
    return b"".join(encode_command(cmd) for cmd in cmds)


def encode_identify(request: IdentifyRequest) -> bytes:
    """IDENTIFY for ``request``, without building an :class:`Identify` event first."""
    return b"IDENTIFY\n" + _sized(encode_identify_request(request))


# ---------------------------------------------------------------------- frames


@attrs.frozen
class TracedReply:
    """The 30-byte answer to PUB_TRACE, MPUB_TRACE and traced PUB_EXT (spec §8.4)."""

    internal_id: int
    """The message's internal id (the batch's first for MPUB_TRACE)."""
    trace_id: int
    """The trace id echoed back; 0 for MPUB_TRACE."""
    offset: int
    """Virtual offset of the (first) record in the partition log."""
    raw_size: int
    """Bytes the record (or batch) takes in the log, length prefixes included."""


def decode_traced_reply(data: bytes) -> TracedReply:
    """Parse a traced reply's response data.

    Raises:
        ProtocolError: ``E_BAD_RESPONSE`` when ``data`` is not 30 bytes starting ``OK``.
    """
    if len(data) != TRACED_REPLY_SIZE or not data.startswith(b"OK"):
        raise ProtocolError("E_BAD_RESPONSE", f"not a traced reply: {bytes(data[:40])!r}")
    _, internal_id, trace_id, offset, raw_size = _TRACED.unpack(data)
    return TracedReply(internal_id, trace_id, offset, raw_size)


@attrs.frozen
class Response:
    """A response frame: ``OK``, ``_heartbeat_``, ``CLOSE_WAIT``, JSON or a traced reply."""

    data: bytes

    @property
    def is_ok(self) -> bool:
        """The plain ``OK``."""
        return self.data == b"OK"

    @property
    def is_heartbeat(self) -> bool:
        """A heartbeat, which the client must answer with NOP."""
        return self.data == b"_heartbeat_"

    @property
    def is_close_wait(self) -> bool:
        """The answer to CLS."""
        return self.data == b"CLOSE_WAIT"

    @property
    def is_group_owner(self) -> bool:
        """trionsq's notice that the member now owns the partition (not an answer)."""
        return self.data == GROUP_OWNER

    @property
    def is_traced(self) -> bool:
        """A traced publish reply (30 bytes starting ``OK``)."""
        return len(self.data) == TRACED_REPLY_SIZE and self.data.startswith(b"OK")

    def traced(self) -> TracedReply:
        """This response as a traced reply; ``ProtocolError`` when it is not one."""
        return decode_traced_reply(self.data)


@attrs.frozen
class ErrorReply:
    """An error frame: ``CODE description``, classified fatal or not by its code."""

    error: ProtocolError

    @property
    def code(self) -> str:
        """The code, e.g. ``E_INVALID``."""
        return self.error.code

    @property
    def fatal(self) -> bool:
        """True when the server closes the connection after this error."""
        return self.error.fatal


@attrs.frozen
class MessageFrame:
    """A message frame, decoded in the connection's layout."""

    message: Message


Frame = Response | ErrorReply | MessageFrame


def decode_error_reply(data: bytes) -> ProtocolError:
    """Split an error frame's data at its first space (spec §5).

    No space means a bare code (``description`` is ``None``, as for
    ``E_BAD_PROTOCOL``); an empty description keeps its space (``E_TOPIC_NOT_EXIST ``).
    """
    text = data.decode("utf-8", "surrogateescape")
    code, space, description = text.partition(" ")
    return ProtocolError(
        code, description if space else None, fatal=code not in NON_FATAL_ERROR_CODES
    )


@attrs.define(kw_only=True, eq=False)
class ClientConnection:
    """What a client reads from one server connection, frame by frame.

    ``receive_data(data)`` returns every frame ``data`` completes, in order;
    ``receive_data(b"")`` means EOF. Message frames are decoded with the layout
    flags as they are when the frame completes: set :attr:`extended` and
    :attr:`detail` before sending the SUB that makes the server use them (the
    server sends no message before SUB, so no frame is decoded in the wrong layout).

    A frame that cannot be parsed (size field over :attr:`max_frame_size` or under
    4, unknown frame type, a message too short for its layout, EOF inside a frame)
    is a fatal :class:`ProtocolError`. Frames completed before it in the same call
    are returned first and the error is raised by the next call; once raised, it is
    raised again by every later call: the stream cannot be resynchronised.
    """

    extended: bool = False
    """Messages carry Youzan's ext version/header (``extend_support`` on an ext topic)."""
    detail: bool = False
    """Messages carry offset and raw size (SUB_ORDERED or SUB_ADVANCED)."""
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    """Largest accepted ``size`` field (frame type plus data). Not frozen with an
    ``on_setattr`` hook: any hook gives the class a Python ``__setattr__``, which every
    frame's state update would then pay."""
    closed: bool = attrs.field(default=False, init=False)
    """Set by EOF; later data is ignored."""
    _buffer: bytearray = attrs.field(factory=bytearray, init=False, repr=False)
    _need: int = attrs.field(default=4, init=False)
    """Buffered bytes needed before another frame can complete."""
    _error: ProtocolError | None = attrs.field(default=None, init=False)

    @property
    def error(self) -> ProtocolError | None:
        """The error that broke the stream, if one did."""
        return self._error

    @property
    def buffered(self) -> int:
        """Bytes held for a frame that has not completed yet."""
        return len(self._buffer)

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Parse ``data`` (``b""`` = EOF) and return every frame it completes.

        Raises:
            ProtocolError: the stream is broken (see the class docstring).
        """
        if self._error is not None:
            raise self._error
        if self.closed:
            return []
        if not data:
            self.closed = True
            if self._buffer:
                raise self._fail(
                    ProtocolError(
                        "E_BAD_FRAME", f"EOF inside a frame ({len(self._buffer)} bytes pending)"
                    )
                )
            return []
        if self._buffer:
            self._buffer += data
            if len(self._buffer) < self._need:
                return []
            buf = bytes(self._buffer)
        else:
            buf = data if type(data) is bytes else bytes(data)
        frames: list[Frame] = []
        try:
            pos = self._parse(buf, frames)
        except ProtocolError as error:
            self._buffer = bytearray()
            self._fail(error)
            if frames:
                return frames
            raise
        self._buffer = bytearray(buf[pos:]) if pos < len(buf) else bytearray()
        return frames

    def _fail(self, error: ProtocolError) -> ProtocolError:
        self._error = error
        self.closed = True
        return error

    def _parse(self, buf: bytes, frames: list[Frame]) -> int:
        """Append every complete frame in ``buf``; return where the incomplete rest starts."""
        pos = 0
        end = len(buf)
        limit = self.max_frame_size
        append = frames.append
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size > limit:
                raise ProtocolError("E_BAD_FRAME", f"frame size {size} > {limit}")
            if size < 4:
                raise ProtocolError("E_BAD_FRAME", f"frame size {size} < 4")
            stop = pos + 4 + size
            if stop > end:
                self._need = stop - pos
                return pos
            (frame_type,) = _INT32.unpack_from(buf, pos + 4)
            data = buf[pos + 8 : stop]
            if frame_type == FRAME_TYPE_MESSAGE:
                append(
                    MessageFrame(decode_message(data, extended=self.extended, detail=self.detail))
                )
            elif frame_type == FRAME_TYPE_RESPONSE:
                append(Response(data))
            elif frame_type == FRAME_TYPE_ERROR:
                append(ErrorReply(decode_error_reply(data)))
            else:
                raise ProtocolError("E_BAD_FRAME", f"unknown frame type {frame_type}")
            pos = stop
        self._need = 4
        return pos
