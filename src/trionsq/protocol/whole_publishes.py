"""PUB and MPUB that arrive whole and valid, parsed without a body reader (the fast
path), and a PUB/MPUB whose body has begun to come held until the next read so it
can take that path then.

Only the happy path lives here: anything short, invalid or unusual goes to the body
readers of :mod:`.publish_readers`, so every error text has one home. A base of
:class:`~.server.ServerConnection`, apart so the state machine stays one module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..speedups import compiled
from .commands import Mpub, Pub
from .parsing import _INT32, _NO_PIECES, PublishHeader
from .publish_readers import PublishReaders

if TYPE_CHECKING:
    from collections.abc import Callable

    from .errors import ProtocolError
    from .parsing import Event

__all__ = ["WholePublishes"]

_INCOMPLETE = -2
"""The fast path's answer for a PUB/MPUB valid so far whose body has not all come."""
_NOT_AGAIN = -1
"""``_held_need`` while a held command is parsed again without all of it: the body
reader takes it (once held is enough: it keeps the error timing of the reader)."""


# a twin on purpose: _speedups.pyi's mpub_bodies stub repeats this signature (a C
# function has none to import)
def _mpub_bodies_py(
    data: bytes, cursor: int, count: int, stop: int, end: int, max_msg: int
) -> tuple[list[bytes], int] | int:
    """The ``count`` parts of an MPUB body from ``data[cursor:]``, each a 4-byte signed
    size and that many bytes, within the body's ``stop`` and what has come (``end``):
    the bodies and where the last ended; -1 when a part is not 1..``max_msg`` bytes or
    overruns ``stop`` (the body reader answers it); :data:`_INCOMPLETE` when valid so
    far but not all come. The pure-Python twin of ``trionsq._speedups.mpub_bodies``."""
    unpack = _INT32.unpack_from
    within = min(stop, end)
    bodies: list[bytes] = []
    append = bodies.append
    for _ in range(count):
        if within - cursor < 4:
            return _INCOMPLETE if stop > end else -1
        part: int = unpack(data, cursor)[0]
        cursor += 4
        if part <= 0 or part > max_msg or stop - cursor < part:
            return -1
        if end - cursor < part:
            return _INCOMPLETE
        append(data[cursor : cursor + part])
        cursor += part
    return bodies, cursor


_mpub_bodies: Final[Callable[[bytes, int, int, int, int, int], tuple[list[bytes], int] | int]] = (
    _mpub_bodies_py if compiled is None else compiled.mpub_bodies
)
"""An MPUB's bodies on the fast path: compiled where built (about 0.3 us a body in
Python), else :func:`_mpub_bodies_py`."""


class WholePublishes(PublishReaders):
    """The publish fast path and the held publish of :class:`~.server.ServerConnection`
    (which sets these slots up)."""

    __slots__ = ("_have", "_held_need", "_pieces")

    _pieces: list[memoryview]
    _have: int
    _held_need: int
    tls: bool

    def _lone_pub(self, data: bytes) -> Pub | ProtocolError | None:
        """The PUB that is all of ``data`` (one PUB per round trip, issue 37), when
        it is whole and valid, names a topic this connection named before, and no
        gate, AUTH or TLS requirement has a say: the event the parsing loop would
        give, without its steps. A Youzan client's PUB names a partition (plain
        digits, as the loop's fast path takes them): the gate sees it, as there, and
        its verdict is the event (the caller closes on a fatal one, as the loop
        does). None for anything else (the loop parses it, errors and all). The
        caller checked that no command is under way."""
        settings = self.settings
        gate = self.publish_gate
        if (
            settings.auth_enabled
            or (settings.tls_required and not self.tls)
            or (gate is not None and (self.gated_verbs is None or "PUB" in self.gated_verbs))
        ):
            return None
        newline = data.find(b"\n", 4, settings.max_line_length + 1)
        if newline < 0:
            return None
        names = self._names
        topic = names.get(data[4:newline])
        partition = None
        if topic is None:  # "PUB <topic> <partition>"?
            space = data.rfind(b" ", 4, newline)
            digits = data[space + 1 : newline]
            if space < 5 or not digits.isdigit() or len(digits) >= 10:
                return None
            topic = names.get(data[4:space])
            if topic is None:
                return None
            partition = int(digits)
        start = newline + 5
        if len(data) < start:
            return None
        size: int = _INT32.unpack_from(data, newline + 1)[0]
        if size <= 0 or size > settings.max_msg_size or len(data) - start != size:
            return None
        if partition is not None and gate is not None:
            verdict = gate(PublishHeader("PUB", topic, partition, size))
            if verdict is not None:
                return verdict
        return Pub(topic, data[start:], partition)

    def _publish_fast_path(
        self, verb: bytes, params: list[bytes], data: bytes, pos: int, end: int, events: list[Event]
    ) -> int:
        """PUB/MPUB that arrived whole and valid, without a body reader; else -1, or
        :data:`_INCOMPLETE` when what has come of its body is valid but not all of it.

        Only the happy path lives here: anything short, invalid or unusual returns -1
        and the body reader handles it, so every error text has one home.
        """
        if self.settings.auth_enabled:
            return -1
        if len(params) == 2:
            partition = None
        elif len(params) == 3 and params[2].isdigit() and len(params[2]) < 10:
            partition = int(params[2])  # a Youzan client's partition (anything else: the reader)
        else:
            return -1
        topic = self._names.get(params[1])
        if topic is None:
            return -1
        unpack = _INT32.unpack_from
        if end - pos < 4:
            return -1
        size: int = unpack(data, pos)[0]
        if size <= 0:
            return -1
        start = pos + 4
        if verb == b"PUB":
            if size > self.settings.max_msg_size:
                return -1
            if end - start < size:
                return self._incomplete("PUB", topic, partition, size)
            refusal = self._gate("PUB", topic, partition, size)
            events.append(refusal or Pub(topic, data[start : start + size], partition))
            return start + size
        # MPUB: walk the parts; nsqd's limits, and the parts must fit the body size
        if size > self.settings.max_body_size or size < 4 or end - start < 4:
            return -1
        count: int = unpack(data, start)[0]
        stop = start + size
        if count <= 0 or count > (self.settings.max_body_size - 4) // 5:
            return -1
        parts = _mpub_bodies(data, start + 4, count, stop, end, self.settings.max_msg_size)
        if isinstance(parts, int):
            return self._incomplete("MPUB", topic, partition, None) if parts == _INCOMPLETE else -1
        bodies, cursor = parts
        refusal = self._gate("MPUB", topic, partition, None)
        events.append(refusal or Mpub(topic, tuple(bodies), partition))
        return cursor

    def _incomplete(self, verb: str, topic: str, partition: int | None, size: int | None) -> int:
        """:data:`_INCOMPLETE`, once the gate saw the header where the body reader shows
        it, before the body: a fatal verdict is raised now, not when the rest comes
        (the gate, a look at the broker's topics, is asked again then)."""
        if not self._held_need:
            self._gate(verb, topic, partition, size)
        return _INCOMPLETE

    def _hold(self, line: bytes, data: bytes, pos: int, end: int) -> int:
        """Keep a PUB/MPUB whose body has begun to come, valid so far, until the next
        read (pipelined MPUBs of 40 KB read 64 KB at a time are split three times in
        four): whole then, it takes the fast path. Returns the end of ``data``."""
        size: int = _INT32.unpack_from(data, pos)[0]
        head = line + b"\n"
        self._pieces = [memoryview(head), memoryview(data)[pos:end]]
        self._have = len(head) + end - pos
        self._held_need = len(head) + 4 + size
        return end

    def _take_held(self, data: bytes) -> bytes:
        """The held command's bytes followed by ``data``, parsed from its line again: by
        the fast path if now whole, else by the body reader (held once only, so an
        error in what comes later is told as soon as the reader would tell it)."""
        held = b"".join([*self._pieces, data])
        self._held_need = 0 if len(held) >= self._held_need else _NOT_AGAIN
        self._pieces = _NO_PIECES
        self._have = 0
        return held
