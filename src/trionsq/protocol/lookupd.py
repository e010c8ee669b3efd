"""The nsqd ⇄ nsqlookupd TCP protocol V1 (spec lookupd-tcp) as a sans-IO codec.

nsqd is the client, nsqlookupd the server. After the magic ``"  V1"`` the client
sends text lines ``CMD[ SP arg]*\\n`` (IDENTIFY is followed by ``[int32 size][JSON]``);
every server reply, success or error, is ``[int32 size][data]`` with no frame type,
an error being told apart only by its ``E_...`` text. Every error is fatal: the
server sends it and closes.

Server side: :class:`LookupServerConnection` turns bytes into command events
(:class:`LookupIdentify`, :class:`Register`, :class:`Unregister`, :class:`Ping`) and
:class:`~.errors.ProtocolError` values; :func:`encode_reply`, :data:`OK_REPLY`,
:func:`encode_error_reply` and :func:`encode_identify_reply` build the replies.

Client side (the broker's lookupd peer task): :data:`MAGIC_V1`,
:func:`encode_lookup_command`, :class:`LookupClientConnection` (splits replies),
:func:`is_error_reply`, :func:`reply_error` and :func:`decode_identify_reply`.

REGISTER and UNREGISTER come in two forms, upstream ``<topic> [<channel>]`` and
Youzan ``<topic> <partition> [<channel>]``: a second argument that is an integer
is a partition (see :meth:`LookupServerConnection.parse_registration`).
"""

from __future__ import annotations

import enum
import struct
from typing import Final

import attrs

from ..serialization import JsonDecodeError, dumps, make_converter, omit_defaults, structure_json
from .errors import ProtocolError
from .names import MAX_PARTITION_NUM, is_valid_name

__all__ = [
    "DEFAULT_MAX_REPLY_SIZE",
    "MAGIC_V1",
    "MAX_IDENTIFY_BODY_SIZE",
    "MAX_LINE_LENGTH",
    "MAX_PARTITION_ID",
    "OK_REPLY",
    "OLD_VERSION_PARTITION",
    "LookupClientConnection",
    "LookupCommand",
    "LookupEvent",
    "LookupIdentify",
    "LookupServerConnection",
    "LookupdInfo",
    "PeerInfo",
    "Ping",
    "Register",
    "Unregister",
    "decode_identify_reply",
    "decode_peer_info",
    "encode_error_reply",
    "encode_identify_reply",
    "encode_lookup_command",
    "encode_reply",
    "go_trim_space",
    "is_error_reply",
    "is_valid_partition_id",
    "reply_error",
]

MAGIC_V1: Final = b"  V1"

MAX_IDENTIFY_BODY_SIZE: Final = 1024 * 1024
"""Our bound on the IDENTIFY JSON body (1 MiB). nsqlookupd allocates whatever size the
client announces (and a negative one panics Go's ``make``); a real nsqd sends a few
hundred bytes, so anything above this is refused before any of it is buffered."""

MAX_LINE_LENGTH: Final = 4096
"""Our bound on a command line. nsqlookupd reads lines without a limit; the longest
valid one (``UNREGISTER``, a 64-byte topic, a partition, a 64-byte channel) is < 160."""

DEFAULT_MAX_REPLY_SIZE: Final = 5 * 1024 * 1024
"""nsqd bounds lookupd replies by its ``max-body-size``, 5 MiB by default."""

MAX_PARTITION_ID: Final = MAX_PARTITION_NUM - 1
"""Youzan: partition ids run 0..254."""

OLD_VERSION_PARTITION: Final = -11
"""Youzan's ``OLD_VERSION_PID``: the partition of an old (non-HA) nsqd's registrations."""

_INT32: Final = struct.Struct(">i")
_OUT_OF_RANGE: Final = 2**64


def _text(raw: bytes) -> str:
    """Bytes as text that encodes back to the same bytes (names and args in errors)."""
    return raw.decode("utf-8", "surrogateescape")


def _raw(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _fatal(code: str, description: str) -> ProtocolError:
    return ProtocolError(code, description, fatal=True)


# ---------------------------------------------------------------------- events


@attrs.frozen
class PeerInfo:
    """The IDENTIFY JSON an nsqd sends; absent keys and ``null`` keep the defaults.

    Unknown keys are ignored. Ports are the nsqd's *broadcast* ports. Upstream ≥ 1.3
    sends the topology fields, Youzan sends ``distributed_id`` instead; the encoder
    leaves those three out when they are empty.
    """

    version: str = ""
    tcp_port: int = 0
    http_port: int = 0
    hostname: str = ""
    broadcast_address: str = ""
    topology_zone: str = ""
    topology_region: str = ""
    distributed_id: str = ""

    @property
    def is_complete(self) -> bool:
        """nsqlookupd's required fields are set (else ``IDENTIFY missing fields``)."""
        return bool(
            self.broadcast_address and self.tcp_port != 0 and self.http_port != 0 and self.version
        )


@attrs.frozen
class LookupIdentify:
    """``IDENTIFY`` with its decoded, complete JSON body."""

    peer: PeerInfo


@attrs.frozen
class Register:
    """``REGISTER``: ``channel`` is ``None`` for a topic registration; ``partition``
    is ``None`` for the upstream form and an int (0..254 or -11) for Youzan's."""

    topic: str
    channel: str | None = None
    partition: int | None = None


@attrs.frozen
class Unregister:
    """``UNREGISTER``, with the same fields as :class:`Register`."""

    topic: str
    channel: str | None = None
    partition: int | None = None


@attrs.frozen
class Ping:
    """``PING`` (allowed before IDENTIFY)."""


LookupCommand = LookupIdentify | Register | Unregister | Ping
LookupEvent = LookupCommand | ProtocolError


@attrs.frozen
class LookupdInfo:
    """nsqlookupd's JSON reply to IDENTIFY (its own addresses); keys in this order."""

    tcp_port: int = 0
    http_port: int = 0
    version: str = ""
    broadcast_address: str = ""
    hostname: str = ""


_converter = make_converter()
omit_defaults(_converter, PeerInfo, "topology_zone", "topology_region", "distributed_id")


# ---------------------------------------------------------------------- helpers


_ASCII_SPACE: Final = b" \t\n\v\f\r"
_UNICODE_SPACES: Final = tuple(
    chr(code).encode("utf-8")
    for code in (0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000)
)


def go_trim_space(line: bytes) -> bytes:
    """Go's ``strings.TrimSpace``: strip ASCII and Unicode white space from both ends.

    Unicode spaces (``unicode.IsSpace``: U+0085, U+00A0, U+1680, U+2000..U+200A,
    U+2028, U+2029, U+202F, U+205F, U+3000) count only as valid UTF-8, as in Go.
    """
    while True:
        line = line.strip(_ASCII_SPACE)
        before = len(line)
        if line and line[0] >= 0x80:
            for space in _UNICODE_SPACES:
                if line.startswith(space):
                    line = line[len(space) :]
                    break
        if line and line[-1] >= 0x80:
            for space in _UNICODE_SPACES:
                if line.endswith(space):
                    line = line[: -len(space)]
                    break
        if len(line) == before:
            return line


def _is_integer_literal(raw: bytes) -> bool:
    """Go ``strconv.Atoi`` syntax, range aside: an optional sign, then ASCII digits."""
    digits = raw[1:] if raw[:1] in (b"+", b"-") else raw
    return digits.isdigit()  # bytes.isdigit: ASCII only, False when empty


def is_valid_partition_id(partition: int) -> bool:
    """Youzan's ``GetValidPartitionID`` range: 0..254, or -11 (old-version marker)."""
    return 0 <= partition <= MAX_PARTITION_ID or partition == OLD_VERSION_PARTITION


# ---------------------------------------------------------------------- server side


class _Stage(enum.Enum):
    MAGIC = enum.auto()
    LINE = enum.auto()
    BODY_SIZE = enum.auto()
    BODY = enum.auto()


_EOF_BODY_SIZE: Final = _fatal("E_BAD_BODY", "IDENTIFY failed to read body size")
_EOF_BODY: Final = _fatal("E_BAD_BODY", "IDENTIFY failed to read body")


class LookupServerConnection:
    """One nsqd connection as nsqlookupd sees it, from the magic to the last command.

    ``receive_data(data)`` parses every complete command in ``data`` and returns the
    events in order; a :class:`ProtocolError` (always fatal here) ends the list and
    the connection, and later data is ignored. ``receive_data(b"")`` means EOF: in
    the middle of an IDENTIFY body it yields nsqlookupd's read error; between
    commands, or in the middle of a line or the magic, it yields nothing.

    The IDENTIFY body is copied exactly once: a slice when it arrived whole, one join
    of the pieces when it did not. Its size is checked against
    ``max_identify_body_size`` (:data:`MAX_IDENTIFY_BODY_SIZE`, 1 MiB) before any of
    it is kept: a negative size is ``E_BAD_BODY IDENTIFY invalid body size <n>``, a
    larger one ``E_BAD_BODY IDENTIFY body too big <n> > <limit>`` (nsqlookupd checks
    neither). Lines are bounded by ``max_line_length`` (``E_INVALID command line
    longer than <limit> bytes``; nsqlookupd has no bound).
    """

    def __init__(
        self,
        *,
        max_identify_body_size: int = MAX_IDENTIFY_BODY_SIZE,
        max_line_length: int = MAX_LINE_LENGTH,
    ) -> None:
        self.max_identify_body_size: Final = max_identify_body_size
        self.max_line_length: Final = max_line_length
        self.peer: PeerInfo | None = None
        """The IDENTIFY body once a valid IDENTIFY was parsed."""
        self.closed = False
        """Set by a fatal error or EOF; later data is ignored."""
        self._stage = _Stage.MAGIC
        self._magic = b""
        self._partial_line = b""
        self._size_bytes = b""
        self._body_size = 0
        self._pieces: list[memoryview] = []
        self._have = 0

    @property
    def identified(self) -> bool:
        """True once IDENTIFY succeeded (REGISTER/UNREGISTER need it)."""
        return self.peer is not None

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[LookupEvent]:
        """Parse ``data`` (``b""`` = EOF) and return every event it completes."""
        # the opening lines are a twin of ServerConnection.receive_data's on purpose:
        # each parser keeps its loop whole (that one is the broker's hot path)
        events: list[LookupEvent] = []
        if self.closed:
            return events
        if type(data) is not bytes:
            data = bytes(data)  # slices must be bytes; a bytearray would leak into events
        if not data:
            self._receive_eof(events)
            return events
        pos = 0
        end = len(data)
        try:
            while pos < end:
                stage = self._stage
                if stage is _Stage.LINE:
                    line, pos = self._read_line(data, pos, end)
                    if line is None:
                        break
                    self._dispatch(line, events)
                elif stage is _Stage.BODY:
                    pos = self._read_body(data, pos, end, events)
                elif stage is _Stage.BODY_SIZE:
                    pos = self._read_body_size(data, pos, end, events)
                else:
                    pos = self._read_magic(data, pos, end)
        except ProtocolError as error:
            events.append(error)
            self._close()
        return events

    # ---- framing

    def _read_magic(self, data: bytes, pos: int, end: int) -> int:
        need = 4 - len(self._magic)
        self._magic += data[pos : pos + need]
        if len(self._magic) < 4:
            return end
        if self._magic != MAGIC_V1:
            raise ProtocolError("E_BAD_PROTOCOL", None)
        self._stage = _Stage.LINE
        return pos + need

    def _read_line(self, data: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
        limit = self.max_line_length
        if self._partial_line:
            previous = len(self._partial_line)
            head = self._partial_line + data[pos : pos + limit + 1 - previous]
            newline = head.find(b"\n", previous)
            if newline < 0:
                if len(head) > limit:
                    raise _fatal("E_INVALID", f"command line longer than {limit} bytes")
                self._partial_line = head
                return None, end
            self._partial_line = b""
            return head[:newline], pos + newline + 1 - previous
        newline = data.find(b"\n", pos, pos + limit + 1)
        if newline < 0:
            if end - pos > limit:
                raise _fatal("E_INVALID", f"command line longer than {limit} bytes")
            self._partial_line = data[pos:end]
            return None, end
        return data[pos:newline], newline + 1

    def _read_body_size(self, data: bytes, pos: int, end: int, events: list[LookupEvent]) -> int:
        raw, self._size_bytes, pos = _take_size_field(self._size_bytes, data, pos, end)
        if raw is None:
            return pos
        size: int = _INT32.unpack(raw)[0]
        if size < 0:
            raise _fatal("E_BAD_BODY", f"IDENTIFY invalid body size {size}")
        if size > self.max_identify_body_size:
            raise _fatal(
                "E_BAD_BODY", f"IDENTIFY body too big {size} > {self.max_identify_body_size}"
            )
        self._body_size = size
        self._stage = _Stage.BODY
        if size == 0:  # nothing to wait for: decode the empty body now
            self._identify(b"", events)
        return pos

    def _read_body(self, data: bytes, pos: int, end: int, events: list[LookupEvent]) -> int:
        want = self._body_size - self._have
        if not self._pieces and end - pos >= want:
            body = data[pos : pos + want]
            self._identify(body, events)
            return pos + want
        take = min(want, end - pos)
        self._pieces.append(memoryview(data)[pos : pos + take])
        self._have += take
        pos += take
        if self._have == self._body_size:
            body = b"".join(self._pieces)
            self._pieces = []
            self._have = 0
            self._identify(body, events)
        return pos

    def _receive_eof(self, events: list[LookupEvent]) -> None:
        if self._stage is _Stage.BODY_SIZE:
            events.append(_EOF_BODY_SIZE)
        elif self._stage is _Stage.BODY:
            events.append(_EOF_BODY)
        self._close()

    def _close(self) -> None:
        self.closed = True
        self._partial_line = b""
        self._size_bytes = b""
        self._pieces = []
        self._have = 0

    # ---- commands

    def _dispatch(self, line: bytes, events: list[LookupEvent]) -> None:
        params = go_trim_space(line).split(b" ")
        verb = params[0]
        if verb == b"PING":
            events.append(Ping())
        elif verb == b"REGISTER":
            events.append(self._registration(Register, "REGISTER", params[1:]))
        elif verb == b"UNREGISTER":
            events.append(self._registration(Unregister, "UNREGISTER", params[1:]))
        elif verb == b"IDENTIFY":
            if self.peer is not None:
                raise _fatal("E_INVALID", "cannot IDENTIFY again")
            self._stage = _Stage.BODY_SIZE
        else:
            raise _fatal("E_INVALID", f"invalid command {_text(verb)}")

    def _identify(self, body: bytes, events: list[LookupEvent]) -> None:
        self._stage = _Stage.LINE
        peer = decode_peer_info(body)
        if not peer.is_complete:
            raise _fatal("E_BAD_BODY", "IDENTIFY missing fields")
        self.peer = peer
        events.append(LookupIdentify(peer))

    def _registration(
        self, cls: type[Register] | type[Unregister], verb: str, args: list[bytes]
    ) -> Register | Unregister:
        if self.peer is None:
            raise _fatal("E_INVALID", "client must IDENTIFY")
        topic, channel, partition = self.parse_registration(verb, args)
        return cls(topic, channel, partition)

    @staticmethod
    def parse_registration(verb: str, args: list[bytes]) -> tuple[str, str | None, int | None]:
        """The topic, channel and partition of a REGISTER/UNREGISTER's arguments.

        Which form: **a second argument that is an integer (Go's ``strconv.Atoi``
        syntax: an optional ``+``/``-`` then ASCII digits) is a partition**, giving
        Youzan's ``<topic> <partition> [<channel>]``; anything else is upstream's
        ``<topic> [<channel>]``, where arguments past the channel are ignored, as
        upstream ignores them. So an all-digit channel name (valid upstream, e.g.
        ``REGISTER t 7``) is read as partition 7, and ``REGISTER t -5`` or
        ``REGISTER t 99999999999999999999`` is a bad partition, not a channel. An
        empty argument (two spaces in a row) is no channel, as in Go. The upstream
        form gives ``partition=None`` (Youzan records an old peer's registration
        under -11, :data:`OLD_VERSION_PARTITION`; that is the registry's business).

        Checks, in nsqlookupd's order: at least one argument (``E_INVALID <verb>
        insufficient number of params``); topic name (``E_BAD_TOPIC``); channel name
        (``E_BAD_CHANNEL``); partition range 0..254 or -11 (``E_BAD_PARTITIONID``).
        Names are quoted with single quotes, unescaped, as nsqlookupd's ``'%s'``.

        Raises:
            ProtocolError: the fatal error nsqlookupd sends.
        """
        if not args:
            raise _fatal("E_INVALID", f"{verb} insufficient number of params")
        raw_topic = args[0]
        if not is_valid_name(raw_topic):
            raise _fatal("E_BAD_TOPIC", f"{verb} topic name '{_text(raw_topic)}' is not valid")
        partition: int | None = None
        raw_partition = b""
        raw_channel = b""
        if len(args) >= 2:
            if _is_integer_literal(args[1]):
                raw_partition = args[1]
                # a long literal is out of range anyway; int() refuses > 4300 digits
                partition = int(raw_partition) if len(raw_partition) <= 24 else _OUT_OF_RANGE
                if len(args) >= 3:
                    raw_channel = args[2]
            else:
                raw_channel = args[1]
        if raw_channel and not is_valid_name(raw_channel):
            raise _fatal(
                "E_BAD_CHANNEL", f"{verb} channel name '{_text(raw_channel)}' is not valid"
            )
        if partition is not None and not is_valid_partition_id(partition):
            raise _fatal(
                "E_BAD_PARTITIONID", f"{verb} partition id '{_text(raw_partition)}' is not valid"
            )
        return _text(raw_topic), (_text(raw_channel) if raw_channel else None), partition


def decode_peer_info(body: bytes) -> PeerInfo:
    """Parse an IDENTIFY body as nsqlookupd's ``json.Unmarshal`` into its PeerInfo.

    A JSON ``null`` body decodes to all defaults (Go leaves the struct untouched), so
    it fails later as ``missing fields``; it does not check the required fields.

    Raises:
        ProtocolError: ``E_BAD_BODY IDENTIFY failed to decode JSON body``.
    """
    try:
        return structure_json(body, PeerInfo, _converter)
    except JsonDecodeError:
        if body.strip(b" \t\r\n") == b"null":
            return PeerInfo()
        raise _fatal("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from None


# ---------------------------------------------------------------------- replies


def encode_reply(data: bytes) -> bytes:
    """One reply: ``[int32 size][data]`` (no frame type, unlike protocol V2)."""
    return _INT32.pack(len(data)) + data


OK_REPLY: Final = encode_reply(b"OK")


def encode_error_reply(error: ProtocolError) -> bytes:
    """An error reply, ``[size]CODE description`` (or the bare code, ``E_BAD_PROTOCOL``)."""
    return encode_reply(error.data)


def encode_identify_reply(info: LookupdInfo) -> bytes:
    """The reply to IDENTIFY: lookupd's own addresses as JSON, size-prefixed.

    Keys come in :class:`LookupdInfo`'s order (the spec's); nsqlookupd marshals a Go
    map, so its keys come sorted. JSON readers, nsqd's included, do not care.
    """
    return encode_reply(dumps(info, _converter))


# ---------------------------------------------------------------------- client side


def _check_registration(cmd: Register | Unregister) -> None:
    if not is_valid_name(_raw(cmd.topic)):
        raise ValueError(f"invalid topic name {cmd.topic!r}")
    if cmd.channel is not None and not is_valid_name(_raw(cmd.channel)):
        raise ValueError(f"invalid channel name {cmd.channel!r}")
    if cmd.partition is not None and not is_valid_partition_id(cmd.partition):
        raise ValueError(f"invalid partition id {cmd.partition}")


def encode_lookup_command(cmd: LookupCommand) -> bytes:
    """The bytes nsqd sends for ``cmd`` (without the magic, which opens the stream).

    ``Register``/``Unregister`` use the Youzan form when ``partition`` is set,
    else upstream's. Note that a lookupd following trionsq's rule reads an all-digit
    channel in the upstream form as a partition (see ``parse_registration``).

    Raises:
        ValueError: an invalid topic/channel name or partition id, which would make
            a line the server refuses (or, with a space or newline, a different one).
    """
    if isinstance(cmd, Ping):
        return b"PING\n"
    if isinstance(cmd, LookupIdentify):
        body = dumps(cmd.peer, _converter)
        return b"IDENTIFY\n" + _INT32.pack(len(body)) + body
    _check_registration(cmd)
    verb = b"REGISTER" if isinstance(cmd, Register) else b"UNREGISTER"
    parts = [verb, _raw(cmd.topic)]
    if cmd.partition is not None:
        parts.append(b"%d" % cmd.partition)
    if cmd.channel is not None:
        parts.append(_raw(cmd.channel))
    return b" ".join(parts) + b"\n"


def is_error_reply(data: bytes) -> bool:
    """True when a reply is an error text (``E_...``)."""
    return data.startswith(b"E_")


def reply_error(data: bytes) -> ProtocolError | None:
    """The fatal :class:`ProtocolError` an ``E_...`` reply carries, else ``None``.

    ``CODE description`` splits at the first space; a reply without one is a bare
    code (``description=None``), so ``error.data`` gives back the same bytes.
    """
    if not is_error_reply(data):
        return None
    code, space, description = _text(data).partition(" ")
    return ProtocolError(code, description if space else None, fatal=True)


def decode_identify_reply(data: bytes) -> LookupdInfo:
    """Parse lookupd's IDENTIFY reply (nsqd closes the peer when this fails).

    Raises:
        ProtocolError: the lookupd's own error (an ``E_...`` reply), or
            ``E_BAD_RESPONSE`` when the reply is not the JSON object expected.
    """
    error = reply_error(data)
    if error is not None:
        raise error
    try:
        return structure_json(data, LookupdInfo, _converter)
    except JsonDecodeError as exc:
        raise ProtocolError("E_BAD_RESPONSE", f"IDENTIFY reply is not valid: {exc}") from None


class LookupClientConnection:
    """nsqd's side of the reply stream: splits ``[int32 size][data]`` replies.

    ``receive_data(data)`` returns the data of every reply ``data`` completes;
    ``b""`` means EOF. A size that is negative or above ``max_reply_size`` (nsqd's
    ``max-body-size``), or EOF in the middle of a reply, is a
    :class:`ProtocolError` (``E_BAD_RESPONSE``): raised at once when no reply was
    completed by the same call, else raised by the next call, so no good reply is
    lost. After an error or EOF the connection is closed.
    """

    def __init__(self, max_reply_size: int = DEFAULT_MAX_REPLY_SIZE) -> None:
        self.max_reply_size: Final = max_reply_size
        self.closed = False
        self._error: ProtocolError | None = None
        self._size_bytes = b""
        self._size: int | None = None
        self._pieces: list[memoryview] = []
        self._have = 0

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete reply held (size field included)."""
        return len(self._size_bytes) + (4 + self._have if self._size is not None else 0)

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Parse ``data`` (``b""`` = EOF) and return every reply it completes."""
        if self._error is not None:
            raise self._error
        replies: list[bytes] = []
        if self.closed:
            return replies
        if type(data) is not bytes:
            data = bytes(data)
        try:
            if not data:
                self.closed = True
                if self.buffered:
                    raise ProtocolError(
                        "E_BAD_RESPONSE", "connection closed in the middle of a reply"
                    )
                return replies
            self._parse(data, replies)
        except ProtocolError as error:
            self.closed = True
            self._size_bytes = b""
            self._size = None
            self._pieces = []
            if not replies:
                raise
            self._error = error
        return replies

    def _parse(self, data: bytes, replies: list[bytes]) -> None:
        pos = 0
        end = len(data)
        while pos < end:
            size = self._size
            if size is None:
                raw, self._size_bytes, pos = _take_size_field(self._size_bytes, data, pos, end)
                if raw is None:
                    return
                size = _INT32.unpack(raw)[0]
                if size < 0:
                    raise ProtocolError("E_BAD_RESPONSE", f"invalid response body size {size}")
                if size > self.max_reply_size:
                    raise ProtocolError(
                        "E_BAD_RESPONSE",
                        f"response body size ({size}) is greater than limit "
                        f"({self.max_reply_size})",
                    )
                if end - pos < size:
                    self._size = size
                    continue
                replies.append(data[pos : pos + size])
                pos += size
                continue
            take = min(size - self._have, end - pos)
            self._pieces.append(memoryview(data)[pos : pos + take])
            self._have += take
            pos += take
            if self._have == size:
                replies.append(b"".join(self._pieces))
                self._pieces = []
                self._have = 0
                self._size = None


def _take_size_field(
    partial: bytes, data: bytes, pos: int, end: int
) -> tuple[bytes | None, bytes, int]:
    """The 4 bytes of a size field from ``partial`` then ``data[pos:end]``.

    Returns (the field, or None while incomplete; the bytes still held; new pos).
    """
    if not partial and end - pos >= 4:
        return data[pos : pos + 4], b"", pos + 4
    take = min(4 - len(partial), end - pos)
    partial += data[pos : pos + take]
    pos += take
    if len(partial) < 4:
        return None, partial, pos
    return partial, b"", pos
