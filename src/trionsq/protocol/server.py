"""The server side of protocol V2 as a sans-IO state machine: bytes in, events out.

``ServerConnection.receive_data(data)`` parses every complete command in ``data``
and returns them in order as command events (:mod:`.commands`) and
:class:`~.errors.ProtocolError` values. A non-fatal error sits between the commands
around it; a fatal one ends the list and the connection (later data is ignored).
``receive_data(b"")`` means EOF and yields the error nsqd sends for a command cut
short, if any.

Validation follows spec tcp-protocol §4 and §8 in the order given there. Checks
that need the broker (topic exists, permissions, back-pressure) are the broker's;
those that the spec places before a body is read go through the optional
``publish_gate`` so they still happen before the body is buffered.

Bodies are read field by field through small generators, so a command split
across any number of receives resumes where it stopped, each body is copied
exactly once (a slice when it arrived whole, one join when it did not), and a
size is checked against its limit before any of its body is kept.
"""

from __future__ import annotations

import functools
import re
import struct
from types import GeneratorType
from typing import TYPE_CHECKING, ClassVar

from .commands import (
    FIN_LINE_LENGTH,
    Auth,
    Cls,
    Fin,
    FinMany,
    Identify,
    InternalCreateTopic,
    Nop,
    OffsetSpec,
    Pull,
    Rdy,
    Req,
    Sub,
    SubAdvanced,
    SubOrdered,
    Touch,
)
from .errors import ProtocolError
from .frames import MAGIC_V2
from .identify import NegotiatedSettings, decode_identify_request, negotiate
from .names import go_quote, is_valid_name
from .parsing import (
    _MESSAGE_ID_LENGTH,
    _NO_NAMES,
    _NO_PIECES,
    BULK,
    ConnectionState,
    Event,
    PublishGate,
    PublishHeader,
    _EofError,
    _fatal,
    _invalid,
    _Reader,
    _text,
)
from .publish_readers import PublishReaders
from .settings import ServerSettings
from .strconv import (
    decimal_text,
    go_atoi,
    go_parse_bool,
    parse_base10,
    parse_decimal,
    to_int64,
)
from .whole_publishes import _INCOMPLETE, WholePublishes

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["ConnectionState", "Event", "PublishGate", "PublishHeader", "ServerConnection"]

_FIN_RUN = re.compile(rb"(?:FIN [0-9a-f]{16}\n){1,4096}")
"""FINs as every client sends them back (nsqd's ids are lowercase hex): a consumer
that finishes each message sends hundreds per read, parsed here at once into one
:class:`FinMany` instead of an event each (issue 19). 4,096 lines (86 KB) at most
per event: more than one read holds."""


_BINARY_FIN_RUN = re.compile(rb"(?:FIN [\x00-\xff]{16}\n){1,4096}")
"""The same with Youzan's binary ids (SUB_ORDERED, partitions, extend_support): the
16 bytes after ``FIN `` are the id whatever they are, as the line parser reads them."""
_BINARY_FIN_LINE = struct.Struct(">4sQ8sc")
"""``FIN ``, the internal id, the trace id, the newline."""


def _binary_fin_ids(data: bytes, start: int, stop: int) -> tuple[int, ...]:
    """The internal ids (first 8 bytes of each binary id) of a run of FIN lines."""
    return tuple([line[1] for line in _BINARY_FIN_LINE.iter_unpack(data[start:stop])])


def _fin_ids(data: bytes, start: int, stop: int) -> tuple[int, ...]:
    """The internal ids of the whole FIN lines in ``data[start:stop]``: the hex of
    all of them decoded at once, then read as big-endian 8-byte ints."""
    count = (stop - start) // FIN_LINE_LENGTH
    hex_digits = data[start:stop].replace(b"FIN ", b"").replace(b"\n", b"")
    ids: tuple[int, ...] = struct.unpack(f">{count}Q", bytes.fromhex(hex_digits.decode()))
    return ids


@functools.lru_cache(maxsize=16)
def _defaults(settings: ServerSettings) -> NegotiatedSettings:
    """What a connection has until IDENTIFY, shared: it is frozen, and one per idle
    connection was 160 bytes."""
    return NegotiatedSettings.defaults(settings)


class ServerConnection(WholePublishes):
    """One client connection's protocol state, from the magic to the last command.

    One per connection, so kept small (slots, shared defaults until IDENTIFY, no
    dict of bound methods): 10,000 idle connections are a case the broker is
    measured on (issue 14).
    """

    __slots__ = (
        "_awaiting_magic",
        "_eof_error",
        "_fin_runs",
        "_magic",
        "_partial_line",
        "_reader",
        "_upgrading",
        "_want",
        "authenticated",
        "binary_ids",
        "closed",
        "gated_verbs",
        "negotiated",
        "publish_gate",
        "settings",
        "state",
        "tls",
        "trailing_data",
        "unparsed",
    )

    def __init__(
        self,
        settings: ServerSettings | None = None,
        *,
        publish_gate: PublishGate | None = None,
        gated_verbs: frozenset[str] | None = None,
        fin_runs: bool = False,
    ) -> None:
        """``gated_verbs``: the publish commands ``publish_gate`` sees (None: all), so
        a gate for some commands costs the others nothing; any publish naming a
        partition is gated too (the topic-partition must exist, spec §8.3 step 5).
        ``fin_runs``: consecutive plain FINs come as one :class:`FinMany` (the
        broker's fast path) instead of a :class:`Fin` each."""
        self.settings = settings if settings is not None else ServerSettings()
        self._fin_runs = fin_runs
        self.publish_gate = publish_gate
        self.gated_verbs = gated_verbs
        self.state = ConnectionState.INIT
        self.negotiated = _defaults(self.settings)
        """The client's settings; replaced by each successful IDENTIFY."""
        self.binary_ids = False
        """True once the client uses Youzan's 16-byte binary ids (extend_support, or a
        partition/ordered/advanced SUB); FIN/REQ/TOUCH are then parsed by position."""
        self.tls = False
        self.authenticated = False
        self.closed = False
        """Set by a fatal error or EOF; later data is ignored."""
        self.trailing_data = b""
        """Bytes that followed an IDENTIFY which negotiated TLS or compression: they
        belong to the upgraded stream, so parsing stopped before them."""
        self.unparsed = b""
        """Bytes received but not parsed yet, because ``receive_data`` reached its
        ``max_events``; :meth:`take_unparsed` hands them back for the next call."""
        self._upgrading = False
        self._magic = b""
        self._awaiting_magic = True
        self._partial_line = b""
        self._reader: _Reader | None = None
        self._unread = 0
        self._want = 0
        self._eof_error: _EofError | None = None
        self._names: dict[bytes, str] = _NO_NAMES
        self._pieces = _NO_PIECES
        self._have = 0
        self._held_need = 0
        """Bytes a PUB/MPUB whose start is held in ``_pieces`` needs in all (0: none
        held; :data:`_NOT_AGAIN`: the command now parsed is not held again)."""

    # ------------------------------------------------------------------ I/O layer calls

    @property
    def buffered(self) -> int:
        """Bytes held for a command not complete yet: a partial line, or the body
        field being read (at most ``max_line_length`` or the body limits)."""
        return len(self._partial_line) + self._have

    def tls_established(self) -> None:
        """The I/O layer finished the TLS handshake; TLS-required commands may follow."""
        self.tls = True

    def take_unparsed(self) -> bytes:
        """What the last ``receive_data`` left unparsed (see :attr:`unparsed`)."""
        data, self.unparsed = self.unparsed, b""
        return data

    def receive_data(
        self, data: bytes | bytearray | memoryview, max_events: int = 0
    ) -> list[Event]:
        """Parse ``data`` (``b""`` = EOF) and return every event it completes.

        ``max_events`` > 0 stops after that many events and keeps the rest in
        :attr:`unparsed`: the I/O layer bounds the work of one turn (64 KB of
        ``NOP`` is 16,384 commands) and lets other connections run before the rest.
        """
        if (
            type(data) is bytes
            and data.startswith(b"PUB ")
            and self._reader is None
            and not self._held_need
            and not self._partial_line
            and not self._awaiting_magic
            and not self.closed
        ):  # one PUB per round trip: whole, it needs none of the loop below
            pub = self._lone_pub(data)
            if pub is not None:
                if isinstance(pub, ProtocolError) and pub.fatal:
                    self._close()  # the gate's verdict ends it, as in the loop
                return [pub]
        events: list[Event] = []
        if self.closed:
            return events
        if type(data) is not bytes:
            data = bytes(data)  # slices must be bytes; a bytearray would leak into events
        if self._held_need > 0:
            held = self._take_held(data)
            if not data:  # EOF: what was held goes to the body reader first
                events = self.receive_data(held)
                self._receive_eof(events)
                return events
            data = held
        if not data:
            self._receive_eof(events)
            return events
        pos = 0
        end = len(data)
        if self._awaiting_magic:
            pos = self._receive_magic(data, events)
            if pos < 0:
                return events
        while pos < end:
            if max_events and len(events) >= max_events:
                self.unparsed = data[pos:]
                break
            try:
                if self._reader is not None:
                    pos = self._continue_reader(data, pos, end, events)
                    continue
                if self._fin_runs and data.startswith(b"FIN ", pos) and not self._partial_line:
                    run = self._fin_run(data, pos)
                    if run > pos:
                        ids = _binary_fin_ids if self.binary_ids else _fin_ids
                        events.append(FinMany(ids(data, pos, run), data[pos:run]))
                        pos = run
                        continue
                line, pos = self._read_line(data, pos, end)
                if line is None:
                    break
                pos = self._dispatch(line, data, pos, end, events)
            except ProtocolError as error:
                events.append(error)
                if error.fatal:
                    self._close()
                    break
            if self._upgrading:
                # What follows is TLS or compressed: hand it back unparsed.
                self._upgrading = False
                self.trailing_data = data[pos:]
                break
        return events

    # ------------------------------------------------------------------ framing

    def _receive_magic(self, data: bytes, events: list[Event]) -> int:
        need = 4 - len(self._magic)
        self._magic += data[:need]
        if len(self._magic) < 4:
            return -1
        self._awaiting_magic = False
        magic, self._magic = self._magic, b""  # not kept for the connection's life
        if magic != MAGIC_V2:
            events.append(ProtocolError("E_BAD_PROTOCOL", None))
            self._close()
            return -1
        return need

    def _receive_eof(self, events: list[Event]) -> None:
        error = self._eof_error
        if self._reader is not None and error is not None:
            events.append(error if isinstance(error, ProtocolError) else error())
        self._close()

    def _close(self) -> None:
        self.closed = True
        if self._reader is not None:
            self._reader.close()
        self._reader = None
        self._pieces = _NO_PIECES
        self._have = 0
        self._held_need = 0
        self._partial_line = b""

    def _newline_search_start(self, buf: bytes) -> int:
        """Where ``\\n`` may first end a line: past a binary id in FIN/REQ/TOUCH."""
        if self.binary_ids:
            if buf.startswith((b"FIN ", b"REQ ")):
                return 4 + _MESSAGE_ID_LENGTH
            if buf.startswith(b"TOUCH "):
                return 6 + _MESSAGE_ID_LENGTH
        return 0

    def _read_line(self, data: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
        limit = self.settings.max_line_length
        if self._partial_line:
            previous = len(self._partial_line)
            head = self._partial_line + data[pos : pos + limit + 1 - previous]
            newline = head.find(b"\n", self._newline_search_start(head))
            if newline < 0:
                if len(head) > limit:
                    raise _invalid(f"command line longer than {limit} bytes")
                self._partial_line = head
                return None, end
            self._partial_line = b""
            return head[:newline], pos + newline + 1 - previous
        start = pos
        if self.binary_ids:
            start += self._newline_search_start(data[pos : pos + 6])
        newline = data.find(b"\n", start)
        if newline < 0 or newline - pos > limit:
            if end - pos > limit:
                raise _invalid(f"command line longer than {limit} bytes")
            self._partial_line = data[pos:end]
            return None, end
        return data[pos:newline], newline + 1

    def _fin_run(self, data: bytes, pos: int) -> int:
        """Where the run of whole ``FIN <id>`` lines from ``pos`` ends (``pos``: no run
        here, the line parser takes it, errors and all)."""
        if self.settings.tls_required and not self.tls:
            return pos
        if (
            self.state is not ConnectionState.SUBSCRIBED
            and self.state is not ConnectionState.CLOSING
        ):
            return pos
        match = (_BINARY_FIN_RUN if self.binary_ids else _FIN_RUN).match(data, pos)
        return pos if match is None else match.end()

    def _dispatch(self, line: bytes, data: bytes, pos: int, end: int, events: list[Event]) -> int:
        # A binary id may end in \r: positional commands keep the raw line.
        positional = self.binary_ids and line.startswith((b"FIN ", b"REQ ", b"TOUCH "))
        if line.endswith(b"\r") and not positional:
            line = line[:-1]
        params = line.split(b" ")
        verb = params[0]
        if self.settings.tls_required and not self.tls and verb != b"IDENTIFY":
            raise _invalid(f"cannot {_text(verb)} in current state (TLS required)")
        if verb == b"PUB" or verb == b"MPUB":
            done = self._publish_fast_path(verb, params, data, pos, end, events)
            if done >= 0:
                return done
            if done == _INCOMPLETE and not self._held_need:
                return self._hold(line, data, pos, end)
            self._held_need = 0
        result: _Reader | Event | None
        if positional:
            result = self._positional(line)
        else:
            handler = self._HANDLERS.get(verb)
            if handler is None:
                raise _invalid(f"invalid command {_text(verb)}")
            result = handler(self, params)
        if result is None:
            return pos
        if type(result) is GeneratorType:
            return self._start_reader(result, data, pos, end, events)
        events.append(result)  # type: ignore[arg-type]
        return pos

    # ------------------------------------------------------------------ body readers

    def _start_reader(
        self, reader: _Reader, data: bytes, pos: int, end: int, events: list[Event]
    ) -> int:
        return self._advance(reader, None, data, pos, end, events)

    def _advance(
        self,
        reader: _Reader,
        field: bytes | None,
        data: bytes,
        pos: int,
        end: int,
        events: list[Event],
    ) -> int:
        """Send ``field`` (None: start), then every field ``data`` completes; park the
        reader when data runs out, emit its event when it finishes."""
        try:
            want, self._eof_error = next(reader) if field is None else reader.send(field)
            while True:
                while end - pos >= want:
                    field = data[pos : pos + want]
                    pos += want
                    want, self._eof_error = reader.send(field)
                if want < BULK or pos == end:
                    break
                take = min(want - BULK, end - pos)  # whatever has come, at most that
                field = data[pos : pos + take]
                pos += take
                want, self._eof_error = reader.send(field)
        except StopIteration as done:
            self._reader = None
            if self._unread:  # the reader took more than its command: the rest is next
                pos -= self._unread
                self._unread = 0
            if done.value is not None:
                self._emit(done.value, events)
            return pos
        except ProtocolError:
            self._reader = None
            raise
        self._reader = reader
        self._want = want
        self._pieces = [memoryview(data)[pos:end]] if pos < end else []
        self._have = end - pos
        return end

    def _continue_reader(self, data: bytes, pos: int, end: int, events: list[Event]) -> int:
        """Complete a parked reader's field from ``data`` (one join), then go on."""
        reader = self._reader
        if reader is None:  # pragma: no cover - receive_data only calls with a reader
            return pos
        if self._want >= BULK:  # any bytes will do: nothing was kept
            take = min(self._want - BULK, end - pos)
            return self._advance(reader, data[pos : pos + take], data, pos + take, end, events)
        take = min(self._want - self._have, end - pos)
        self._pieces.append(memoryview(data)[pos : pos + take])
        self._have += take
        pos += take
        if self._have < self._want:
            return pos
        field = b"".join(self._pieces)
        self._pieces = _NO_PIECES
        self._have = 0
        return self._advance(reader, field, data, pos, end, events)

    def _emit(self, event: Event, events: list[Event]) -> None:
        if isinstance(event, ProtocolError) and event.fatal:
            raise event
        events.append(event)

    # ------------------------------------------------------------------ commands

    def _identify(self, params: list[bytes]) -> _Reader:
        if self.state != ConnectionState.INIT:
            raise _invalid("cannot IDENTIFY in current state")
        return self._read_identify()

    def _read_identify(self) -> _Reader:
        size = yield from self._size_field(
            _fatal("E_BAD_BODY", "IDENTIFY failed to read body size")
        )
        if size > self.settings.max_body_size:
            raise _fatal(
                "E_BAD_BODY", f"IDENTIFY body too big {size} > {self.settings.max_body_size}"
            )
        if size <= 0:
            raise _fatal("E_BAD_BODY", f"IDENTIFY invalid body size {size}")
        body = yield size, _fatal("E_BAD_BODY", "IDENTIFY failed to read body")
        request = decode_identify_request(body)
        negotiated, response = negotiate(request, self.settings)
        self.negotiated = negotiated
        if negotiated.extend_support:
            self.binary_ids = True
        self._upgrading = negotiated.tls_v1 or negotiated.snappy or negotiated.deflate
        return Identify(request, negotiated, response)

    def _auth(self, params: list[bytes]) -> _Reader:
        if self.state != ConnectionState.INIT:
            raise _invalid("cannot AUTH in current state")
        if len(params) != 1:
            raise _invalid("AUTH invalid number of parameters")
        return self._read_auth()

    def _read_auth(self) -> _Reader:
        size = yield from self._size_field(_fatal("E_BAD_BODY", "AUTH failed to read body size"))
        if size > self.settings.max_body_size:
            raise _fatal("E_BAD_BODY", f"AUTH body too big {size} > {self.settings.max_body_size}")
        if size <= 0:
            raise _fatal("E_BAD_BODY", f"AUTH invalid body size {size}")
        secret = yield size, _fatal("E_BAD_BODY", "AUTH failed to read body")
        if self.authenticated:
            raise _invalid("AUTH already set")
        if not self.settings.auth_enabled:
            raise _fatal("E_AUTH_DISABLED", "AUTH disabled")
        # Every AUTH failure the broker finds is fatal, so from here on the
        # connection either is authenticated or is gone.
        self.authenticated = True
        return Auth(secret)

    def _sub(self, params: list[bytes]) -> Event:
        verb = _text(params[0])
        if self.state != ConnectionState.INIT:
            raise _invalid(f"cannot {verb} in current state")
        if self.negotiated.heartbeat_interval_ms <= 0:
            raise _invalid(f"cannot {verb} with heartbeats disabled")
        if len(params) < 3:
            raise _invalid(f"{verb} insufficient number of parameters")
        topic = self._check_topic(params[1], verb)
        if not is_valid_name(params[2]):
            raise _fatal("E_BAD_CHANNEL", f"{verb} channel name {go_quote(params[2])} is not valid")
        channel = _text(params[2])
        partition: int | None = None
        offset: OffsetSpec | None = None
        if verb == "SUB":
            if len(params) == 4:
                partition = self._partition(params[3])
        elif len(params) >= 4:
            partition = self._partition(params[3])
        self._require_auth("SUB")
        if verb == "SUB_ADVANCED" and len(params) >= 5:
            offset = _offset_spec(params[4])
        if verb == "SUB_ORDERED" and self.negotiated.sample_rate != 0:
            raise _invalid("order consume is not allowed while sample rate is not 0")
        # Every SUB failure the broker finds is fatal, so the state moves now.
        self.state = ConnectionState.SUBSCRIBED
        if verb == "SUB":
            if len(params) == 4:  # only Youzan clients send a partition, even -1
                self.binary_ids = True
            return Sub(topic, channel, partition)
        self.binary_ids = True
        if verb == "SUB_ORDERED":
            return SubOrdered(topic, channel, partition)
        return SubAdvanced(topic, channel, partition, offset)

    def _closing(self, verb: str) -> bool:
        """RDY's and PULL's state rule: ignored while closing (True), refused unless
        subscribed."""
        if self.state == ConnectionState.CLOSING:
            return True
        if self.state != ConnectionState.SUBSCRIBED:
            raise _invalid(f"cannot {verb} in current state")
        return False

    def _rdy(self, params: list[bytes]) -> Event | None:
        if self._closing("RDY"):
            return None
        if len(params) < 2:
            return Rdy(1)
        parsed = parse_base10(params[1])
        if parsed is None:
            raise _invalid(f"RDY could not parse count {_text(params[1])}")
        count = to_int64(parsed)  # nsqd's reading, wrap included: its error text exactly
        if not 0 <= count <= self.settings.max_rdy_count:
            raise _invalid(f"RDY count {count} out of range 0-{self.settings.max_rdy_count}")
        return Rdy(count)

    def _pull(self, params: list[bytes]) -> Event | None:
        """PULL <count> (trionsq): as RDY's checks, with the count required."""
        if self._closing("PULL"):
            return None
        if len(params) < 2:
            raise _invalid("PULL insufficient number of params")
        raw = params[1]
        count = parse_decimal(raw)
        if count is None:
            raise _invalid(f"PULL could not parse count {_text(raw)}")
        if count > self.settings.max_rdy_count:  # quoted as sent, never wrapped
            text = decimal_text(raw)
            raise _invalid(f"PULL count {text} out of range 0-{self.settings.max_rdy_count}")
        return Pull(count)

    def _answered_id(self, verb: str, params: list[bytes], wanted: int = 2) -> bytes:
        """FIN's, REQ's and TOUCH's checks in nsqd's order (state, params, id): the id."""
        self._require_consuming(verb)
        if len(params) < wanted:
            raise _invalid(f"{verb} insufficient number of params")
        return self._check_message_id(params[1])

    def _fin(self, params: list[bytes]) -> Event:
        return Fin(self._answered_id("FIN", params))

    def _req(self, params: list[bytes]) -> Event:
        message_id = self._answered_id("REQ", params, 3)
        return Req(message_id, self._req_timeout(params[2]))

    def _req_timeout(self, raw: bytes) -> int:
        timeout = parse_base10(raw)
        if timeout is None:
            raise _invalid(f"REQ could not parse timeout {_text(raw)}")
        return to_int64(timeout)

    def _touch(self, params: list[bytes]) -> Event:
        return Touch(self._answered_id("TOUCH", params))

    def _positional(self, line: bytes) -> Event:
        """FIN/REQ/TOUCH with a binary id: the id is the 16 bytes after ``VERB ``."""
        verb, _, _ = line.partition(b" ")
        start = len(verb) + 1
        id_end = start + _MESSAGE_ID_LENGTH
        message_id = line[start:id_end]
        rest = line[id_end:]
        if rest.endswith(b"\r"):
            rest = rest[:-1]
        if verb == b"REQ":
            self._require_consuming("REQ")
            if not rest:
                raise _invalid("REQ insufficient number of params")
            if not rest.startswith(b" "):
                raise _invalid("invalid message ID")
            return Req(message_id, self._req_timeout(rest[1:].split(b" ", 1)[0]))
        self._require_consuming(_text(verb))
        if rest and not rest.startswith(b" "):
            raise _invalid("invalid message ID")
        return Fin(message_id) if verb == b"FIN" else Touch(message_id)

    def _cls(self, params: list[bytes]) -> Event:
        if self.state != ConnectionState.SUBSCRIBED:
            raise _invalid("cannot CLS in current state")
        self.state = ConnectionState.CLOSING
        return Cls()

    def _nop(self, params: list[bytes]) -> Event:
        return Nop()

    def _internal_create_topic(self, params: list[bytes]) -> Event:
        if len(params) < 3:
            raise _invalid("CREATE_TOPIC insufficient number of parameters")
        topic = self._check_topic(params[1], "CREATE_TOPIC")
        value = go_atoi(params[2])
        if isinstance(value, str):
            raise _fatal("E_BAD_PARTITION", f"topic partition is not valid: {value}")
        if value < 0:
            raise _fatal("E_BAD_PARTITION", "partition should not less than 0")
        ext = False
        if len(params) > 3:
            parsed = go_parse_bool(params[3])
            if isinstance(parsed, str):
                raise _fatal("E_BAD_EXT", f"topic ext is not valid: {parsed}")
            ext = parsed
        return InternalCreateTopic(topic, value, ext)

    _HANDLERS: ClassVar[
        dict[bytes, Callable[[ServerConnection, list[bytes]], _Reader | Event | None]]
    ] = {
        b"IDENTIFY": _identify,
        b"AUTH": _auth,
        b"SUB": _sub,
        b"SUB_ORDERED": _sub,
        b"SUB_ADVANCED": _sub,
        b"RDY": _rdy,
        b"PULL": _pull,
        b"FIN": _fin,
        b"REQ": _req,
        b"TOUCH": _touch,
        b"CLS": _cls,
        b"NOP": _nop,
        b"PUB": PublishReaders._pub,
        b"MPUB": PublishReaders._mpub,
        b"DPUB": PublishReaders._dpub,
        b"PUB_TRACE": PublishReaders._pub_youzan,
        b"PUB_EXT": PublishReaders._pub_youzan,
        b"MPUB_TRACE": PublishReaders._mpub_youzan,
        b"MPUB_EXT": PublishReaders._mpub_youzan,
        b"INTERNAL_CREATE_TOPIC": _internal_create_topic,
    }
    """Each verb's parser, by its word. A class attribute of plain functions: a dict of
    bound methods per connection was 1.8 KB of each, and a reference cycle that only
    the collector could free (issue 14)."""


def _offset_spec(raw: bytes) -> OffsetSpec:
    """``<kind>:<int64>``; anything else is ``E_INVALID`` with the reason."""
    spec = OffsetSpec.parse(raw)
    if spec is None:
        raise _invalid(f"invalid consume offset: {_text(raw)}")
    return spec
