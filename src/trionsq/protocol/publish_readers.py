"""The publish commands of protocol V2 and Youzan's extension (PUB, DPUB, MPUB,
PUB_EXT, PUB_TRACE, MPUB_EXT, MPUB_TRACE): their arguments, the gate before the body,
and the generators that read their bodies field by field (spec §4.4-4.7, §8.3), but
for MPUB_EXT parts that carry only an idempotency key, read in bulk (keyed_parts.py).

A base of :class:`~.server.ServerConnection`, apart so the connection's state machine
and the publish bodies each read in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from .commands import (
    Dpub,
    ExtMessage,
    Mpub,
    MpubExt,
    MpubTrace,
    Pub,
    PubExt,
    PubTrace,
    TracedMessage,
)
from .errors import ProtocolError
from .ext_header import check_ext_header
from .keyed_parts import KEY_ONLY_START, is_plain_key, read_keyed_parts
from .parsing import (
    _EOF_BODY,
    _EOF_BODY_SIZE,
    _EOF_MPUB_BODY,
    _EOF_YOUZAN_BODY,
    _UINT16,
    _UINT64,
    BULK,
    CommandArguments,
    _fatal,
    _invalid,
    _text,
)
from .strconv import decimal_text, parse_decimal

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from .parsing import _Reader, _Request

__all__ = ["PublishReaders"]

T = TypeVar("T")


class PublishReaders(CommandArguments):
    """The publish commands' parsers and body readers."""

    __slots__ = ()

    # ---- upstream publishes

    def _pub(self, params: list[bytes]) -> _Reader:
        if len(params) < 2:
            raise _invalid("PUB insufficient number of parameters")
        topic = self._check_topic(params[1], "PUB")
        partition = self._partition(params[2]) if len(params) > 2 else None
        return self._read_pub("PUB", topic, partition)

    def _read_pub(self, verb: str, topic: str, partition: int | None) -> _Reader:
        size = yield from self._size_field(_EOF_BODY_SIZE[verb])
        if size <= 0:
            raise _fatal("E_BAD_MESSAGE", f"{verb} invalid message body size {size}")
        if size > self.settings.max_msg_size:
            raise _fatal(
                "E_BAD_MESSAGE", f"{verb} message too big {size} > {self.settings.max_msg_size}"
            )
        auth = self.settings.auth_enabled
        # With AUTH on, nothing about the topic is told before the auth check
        refusal = None if auth else self._gate(verb, topic, partition, size)
        body = yield size, _EOF_BODY[verb]
        self._require_auth(verb)
        if auth:
            refusal = self._gate(verb, topic, partition, size)
        return refusal if refusal is not None else Pub(topic, body, partition)

    def _dpub(self, params: list[bytes]) -> _Reader:
        if len(params) < 3:
            raise _invalid("DPUB insufficient number of parameters")
        topic = self._check_topic(params[1], "DPUB")
        defer_ms = parse_decimal(params[2])
        if defer_ms is None:
            raise _invalid(f"DPUB could not parse timeout {_text(params[2])}")
        max_ms = self.settings.max_req_timeout_ms
        if defer_ms > max_ms:
            # nsqd's form; the number as sent (nsqd wraps it modulo 2**64 first)
            raise _invalid(f"DPUB timeout {decimal_text(params[2])} out of range 0-{max_ms}")
        return self._read_dpub(topic, defer_ms)

    def _read_dpub(self, topic: str, defer_ms: int) -> _Reader:
        event = yield from self._read_pub("DPUB", topic, None)
        if isinstance(event, Pub):
            return Dpub(topic, defer_ms, event.body)
        return event

    def _mpub(self, params: list[bytes]) -> _Reader:
        if len(params) < 2:
            raise _invalid("MPUB insufficient number of parameters")
        topic = self._check_topic(params[1], "MPUB", prefix="E_BAD_TOPIC ")
        partition = self._partition(params[2]) if len(params) > 2 else None
        self._require_auth("MPUB")
        refusal = self._gate("MPUB", topic, partition, None)
        return self._read_mpub(topic, partition, refusal)

    def _read_mpub_head(self) -> Generator[_Request, bytes, tuple[int, int]]:
        """Body size and message count, checked as nsqd's MPUB checks them."""
        size = yield from self._read_batch_size("MPUB ")
        count = yield from self._read_message_count()
        return size, count

    def _read_batch_size(self, prefix: str) -> Generator[_Request, bytes, int]:
        """A batch's body size, within the limit; errors start with ``prefix``
        (nsqd's MPUB says ``MPUB``, Youzan's batches say nothing)."""
        max_body = self.settings.max_body_size
        eof = _fatal("E_BAD_BODY", f"{prefix}failed to read body size")
        size = yield from self._size_field(eof)
        if size <= 0:
            raise _fatal("E_BAD_BODY", f"{prefix}invalid body size {size}")
        if size > max_body:
            raise _fatal("E_BAD_BODY", f"{prefix}body too big {size} > {max_body}")
        return size

    def _read_message_count(self) -> Generator[_Request, bytes, int]:
        count = yield from self._size_field(
            _fatal("E_BAD_BODY", "MPUB failed to read message count")
        )
        if count <= 0 or count > (self.settings.max_body_size - 4) // 5:
            raise _fatal("E_BAD_BODY", f"MPUB invalid message count {count}")
        return count

    def _read_mpub_part_size(
        self, index: int, body_size: int, budget: int, minimum: int = 0
    ) -> Generator[_Request, bytes, int]:
        """One part's size: nsqd's checks, plus our bound of the parts by the body size,
        then Youzan's ``minimum`` (a trace id or a header length fits in a part).

        nsqd reads the parts without holding them to the declared body size; we refuse
        parts that would overrun it, so a lying header cannot make us buffer more than
        max-body-size.
        """
        size = yield from self._size_field(
            lambda: _fatal("E_BAD_MESSAGE", f"MPUB failed to read message({index}) body size")
        )
        if size <= 0:
            raise _fatal("E_BAD_MESSAGE", f"MPUB invalid message({index}) body size {size}")
        if size > self.settings.max_msg_size:
            raise _fatal(
                "E_BAD_MESSAGE", f"MPUB message too big {size} > {self.settings.max_msg_size}"
            )
        if size + 4 > budget:
            raise _fatal("E_BAD_BODY", f"MPUB body size {body_size} is smaller than its messages")
        if size <= minimum:
            raise _fatal("E_BAD_MESSAGE", f"MPUB invalid message({index}) body size {size}")
        return size

    def _read_mpub(
        self, topic: str, partition: int | None, refusal: ProtocolError | None
    ) -> _Reader:
        body_size, count = yield from self._read_mpub_head()
        budget = body_size - 4
        bodies: list[bytes] = []
        eof_body = _EOF_MPUB_BODY
        for index in range(count):
            size = yield from self._read_mpub_part_size(index, body_size, budget)
            budget -= size + 4
            bodies.append((yield size, eof_body))
        return refusal if refusal is not None else Mpub(topic, tuple(bodies), partition)

    # ---- Youzan publishes

    def _youzan_args(self, params: list[bytes]) -> tuple[str, int | None]:
        if len(params) < 2:
            raise _invalid("insufficient number of parameters")
        partition = self._partition(params[2]) if len(params) > 2 else None
        return _text(params[1]), partition

    def _pub_youzan(self, params: list[bytes]) -> _Reader:
        topic, partition = self._youzan_args(params)
        return self._read_pub_youzan(_text(params[0]), topic, partition)

    def _read_pub_youzan(self, verb: str, topic: str, partition: int | None) -> _Reader:
        size = yield from self._size_field(_fatal("E_BAD_BODY", "failed to read body size"))
        if size <= 0:
            raise _fatal("E_BAD_BODY", f"invalid body size {size}")
        if size > self.settings.max_msg_size:
            raise _fatal("E_BAD_MESSAGE", f"message too big {size} > {self.settings.max_msg_size}")
        self._require_auth("PUB")  # before anything that tells whether the topic exists
        self._require_existable(topic)
        refusal = self._gate(verb, topic, partition, size)
        eof_body = _EOF_YOUZAN_BODY
        if verb == "PUB_TRACE":
            if size <= 8:
                raise _fatal("E_BAD_BODY", f"invalid body size {size} with trace id enabled")
            trace_id: int = _UINT64.unpack((yield 8, eof_body))[0]
            body = yield size - 8, eof_body
            return refusal if refusal is not None else PubTrace(topic, trace_id, body, partition)
        if size <= 2:
            raise _fatal("E_BAD_BODY", f"invalid body size {size} with ext json header enabled")
        message = yield from self._read_ext_message(size, eof_body)
        if refusal is not None:
            return refusal
        if isinstance(message, ProtocolError):
            return message
        return PubExt(topic, message, partition)

    def _read_ext_message(
        self, size: int, eof_body: ProtocolError
    ) -> Generator[_Request, bytes, ExtMessage | ProtocolError]:
        """``[2 json_len][json][body]`` filling ``size`` bytes; bad JSON is non-fatal."""
        header_length: int = _UINT16.unpack((yield 2, eof_body))[0]
        if 2 + header_length >= size:
            raise _fatal(
                "E_BAD_BODY", f"invalid body size {size} in ext json header content length"
            )
        header = yield header_length, eof_body
        body = yield size - 2 - header_length, eof_body
        return _ext_message(header, body)

    def _mpub_youzan(self, params: list[bytes]) -> _Reader:
        topic, partition = self._youzan_args(params)
        return self._read_mpub_youzan(_text(params[0]), topic, partition)

    def _read_mpub_youzan(self, verb: str, topic: str, partition: int | None) -> _Reader:
        size = yield from self._read_batch_size("")
        self._require_auth("PUB")  # before anything that tells whether the topic exists
        self._require_existable(topic)
        refusal = self._gate(verb, topic, partition, size)
        count = yield from self._read_message_count()
        if verb == "MPUB_TRACE":
            traces = yield from self._read_traced_parts(size, count)
            return refusal if refusal is not None else MpubTrace(topic, traces, partition)
        exts, soft_error = yield from self._read_ext_parts(size, count)
        if refusal is not None:
            return refusal
        if soft_error is not None:
            return soft_error
        return MpubExt(topic, tuple(exts), partition)

    def _read_traced_parts(
        self, size: int, count: int
    ) -> Generator[_Request, bytes, tuple[TracedMessage, ...]]:
        budget = size - 4
        eof_body = _EOF_MPUB_BODY
        traces: list[TracedMessage] = []
        for index in range(count):
            part = yield from self._read_mpub_part_size(index, size, budget, 8)
            budget -= part + 4
            trace_id: int = _UINT64.unpack((yield 8, eof_body))[0]
            traces.append(TracedMessage(trace_id, (yield part - 8, eof_body)))
        return tuple(traces)

    def _read_ext_parts(
        self, size: int, count: int
    ) -> Generator[_Request, bytes, tuple[list[ExtMessage], ProtocolError | None]]:
        """An MPUB_EXT's parts, and the first header error (non-fatal).

        Parts whose header is only an idempotency key are read in bulk from whatever
        has arrived (:mod:`.keyed_parts`); a part cut short by the end of what arrived
        is read the exact way, and from the first other part on, every part is. So each
        error has one home, :meth:`_read_ext_part`, and comes at the same byte as it
        always did.
        """
        budget = size - 4
        max_msg = self.settings.max_msg_size
        exts: list[ExtMessage] = []
        soft_error: ProtocolError | None = None
        data = b""
        bulk = True
        index = 0
        while index < count:
            if bulk and not data and budget > 0:
                # whatever has come of the batch (never past its declared size)
                data = yield BULK + budget, _part_size_eof(index)
                at, taken, budget, unusual = read_keyed_parts(
                    data, 0, count - index, budget, max_msg, ExtMessage, exts
                )
                index += taken
                data = data[at:]
                bulk = not unusual
                if index == count or not data:
                    continue
            if data:
                reader = self._read_ext_part(index, size, budget)
                (message, part), data = yield from _fed(reader, data)
            else:  # as _read_ext_part, a generator fewer
                part = yield from self._read_mpub_part_size(index, size, budget, 2)
                message = yield from self._read_ext_message(part, _EOF_MPUB_BODY)
            budget -= part + 4
            index += 1
            if isinstance(message, ProtocolError):
                soft_error = soft_error or message
            else:
                exts.append(message)
        self._unread = len(data)  # the declared size was larger than the parts
        return exts, soft_error

    def _read_ext_part(
        self, index: int, size: int, budget: int
    ) -> Generator[_Request, bytes, tuple[ExtMessage | ProtocolError, int]]:
        """One MPUB_EXT part, field by field, and its size."""
        part = yield from self._read_mpub_part_size(index, size, budget, 2)
        message = yield from self._read_ext_message(part, _EOF_MPUB_BODY)
        return message, part


def _part_size_eof(index: int) -> Callable[[], ProtocolError]:
    """What the exact reader answers when the stream ends before part ``index``."""
    return lambda: _fatal("E_BAD_MESSAGE", f"MPUB failed to read message({index}) body size")


def _fed(
    reader: Generator[_Request, bytes, T], data: bytes
) -> Generator[_Request, bytes, tuple[T, bytes]]:
    """Run a body reader, giving it ``data`` first and then what it asks for; returns
    its value and what it left of ``data``."""
    at = 0
    try:
        want, eof = next(reader)
        while True:
            have = len(data) - at
            if have >= want:
                field = data[at : at + want]
                at += want
            elif have:
                field = data[at:] + (yield want - have, eof)
                at = len(data)
            else:
                field = yield want, eof
            want, eof = reader.send(field)
    except StopIteration as done:
        return done.value, data[at:]


def _ext_message(header: bytes, body: bytes) -> ExtMessage | ProtocolError:
    """Check a JSON header the way Youzan's PUB_EXT does; its errors are non-fatal.

    The header is kept as the client sent it; the rules are :func:`check_ext_header`'s.
    A header that is only ``{"##idempotency_key":"<printable ASCII>"}`` (the Spark
    sink's, one per message) is read without a JSON parser: the same result, at a
    fraction of the cost.
    """
    if header.startswith(KEY_ONLY_START) and header.endswith(b'"}'):
        key = header[len(KEY_ONLY_START) : -2]
        if is_plain_key(key):
            return ExtMessage(header, body, None, None, key.decode("ascii"))
    checked = check_ext_header(header)
    if isinstance(checked, ProtocolError):
        return checked
    return ExtMessage(header, body, checked.trace_id, checked.tag, checked.idempotency_key)
