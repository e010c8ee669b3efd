"""What the server's protocol V2 parser is built from: its event type, the publish
header its gate sees, the connection states, the body-reader protocol, error
helpers, and the argument checks every command shares (:class:`CommandArguments`).

Split from :mod:`.server` so the publish readers (:mod:`.publish_readers`) and the
connection's other commands use one definition of each; no I/O, no trio.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Final

import attrs

from .broker_errors import topic_not_exist
from .commands import Command, FinMany
from .errors import ProtocolError
from .names import go_quote, is_valid_name
from .strconv import go_atoi

if TYPE_CHECKING:
    from .identify import NegotiatedSettings
    from .settings import ServerSettings

__all__ = [
    "CommandArguments",
    "ConnectionState",
    "Event",
    "PublishGate",
    "PublishHeader",
]

Event = Command | FinMany | ProtocolError
"""What parsing yields: a command (a run of FINs as one :class:`FinMany`), or an error
(fatal ones end the list)."""

_INT32: Final = struct.Struct(">i")
_UINT16: Final = struct.Struct(">H")
_UINT64: Final = struct.Struct(">Q")
_MESSAGE_ID_LENGTH: Final = 16
_NO_NAMES: Final[dict[bytes, str]] = {}
"""A connection's name cache until its first name: never written to."""
_NO_PIECES: Final[list[memoryview]] = []
"""A connection's pieces until its first parked reader (which brings its own list):
never written to."""


class ConnectionState(enum.IntEnum):
    """nsqd's client states; the number is what /stats reports."""

    INIT = 0
    SUBSCRIBED = 3
    CLOSING = 4


@attrs.frozen
class PublishHeader:
    """What the broker sees of a publish before its body is read."""

    verb: str
    """The command, e.g. ``PUB``, ``MPUB_EXT``."""
    topic: str
    partition: int | None
    body_size: int | None
    """``None`` for MPUB, which nsqd authorizes before it reads the body size."""


PublishGate = Callable[[PublishHeader], ProtocolError | None]
"""Broker checks placed before a publish body is read; a fatal error stops the
command there, a non-fatal one is answered after the body has been skipped."""

# A body reader yields (bytes wanted, error to send if the stream ends first) and
# is sent exactly that many bytes; it returns its event, or raises ProtocolError.
# The EOF error may be a zero-argument factory, so the hot path builds no errors.
# BULK + n asks for whatever has arrived, from 1 to n bytes (a bulk reader,
# publish_readers.py; as large as no field can be, so the loop that sends exact
# fields stays as it was); a reader that took more than its command sets
# ``_unread`` to how many bytes of the last field it sent belong to what follows.
_EofError = ProtocolError | Callable[[], ProtocolError]
_Request = tuple[int, _EofError]
_Reader = Generator[_Request, bytes, Event | None]
BULK: Final = 1 << 62


def _text(raw: bytes) -> str:
    """Bytes as text that encodes back to the same bytes (names, args in errors)."""
    return raw.decode("utf-8", "surrogateescape")


def _fatal(code: str, description: str) -> ProtocolError:
    return ProtocolError(code, description, fatal=True)


def _invalid(description: str) -> ProtocolError:
    return ProtocolError("E_INVALID", description, fatal=True)


_EOF_BODY_SIZE: Final = {
    verb: _fatal("E_BAD_MESSAGE", f"{verb} failed to read message body size")
    for verb in ("PUB", "DPUB")
}
_EOF_YOUZAN_BODY: Final = _fatal("E_BAD_MESSAGE", "failed to read message body")
_EOF_MPUB_BODY: Final = _fatal("E_BAD_MESSAGE", "MPUB failed to read message body")
_EOF_BODY: Final = {
    verb: _fatal("E_BAD_MESSAGE", f"{verb} failed to read message body") for verb in ("PUB", "DPUB")
}


class CommandArguments:
    """Argument checks shared by every command parser of :class:`~.server.ServerConnection`
    (a base class with no state of its own: the connection holds the slots)."""

    __slots__ = ("_names", "_unread")

    settings: ServerSettings
    negotiated: NegotiatedSettings
    publish_gate: PublishGate | None
    gated_verbs: frozenset[str] | None
    state: ConnectionState
    authenticated: bool
    binary_ids: bool
    _unread: int
    _names: dict[bytes, str]
    """Valid names' texts by their bytes (a connection rarely uses many)."""

    def _size_field(self, eof: _EofError) -> Generator[_Request, bytes, int]:
        raw = yield 4, eof
        size: int = _INT32.unpack(raw)[0]
        return size

    def _gate(
        self, verb: str, topic: str, partition: int | None, size: int | None
    ) -> ProtocolError | None:
        if self.publish_gate is None:
            return None
        if self.gated_verbs is not None and verb not in self.gated_verbs and partition is None:
            return None
        verdict = self.publish_gate(PublishHeader(verb, topic, partition, size))
        if verdict is not None and verdict.fatal:
            raise verdict
        return verdict

    # ------------------------------------------------------------------ argument checks

    def _check_topic(self, raw: bytes, verb: str, prefix: str = "") -> str:
        name = self._names.get(raw)
        if name is not None:
            return name
        if not is_valid_name(raw):
            raise _fatal("E_BAD_TOPIC", f"{prefix}{verb} topic name {go_quote(raw)} is not valid")
        return self._remember_name(raw)

    def _remember_name(self, raw: bytes) -> str:
        """Cache a valid name's text, so the next command with it skips the regex."""
        names = self._names
        if names is _NO_NAMES or len(names) >= 1024:  # bounded: a client rarely uses many
            names = self._names = {}
        name = names[raw] = _text(raw)
        return name

    def _partition(self, raw: bytes) -> int | None:
        value = go_atoi(raw)
        if isinstance(value, str):
            raise _fatal("E_BAD_PARTITION", f"topic partition is not valid: {value}")
        if value == -1:
            return None
        if value < 0:
            raise _fatal("E_BAD_PARTITION", "partition should not less than 0")
        return value

    def _require_existable(self, topic: str) -> None:
        """Youzan publishes never auto-create, and a name that is not valid cannot exist."""
        raw = topic.encode("utf-8", "surrogateescape")
        if raw not in self._names:
            if not is_valid_name(raw):
                raise topic_not_exist()
            self._remember_name(raw)

    def _require_auth(self, verb: str) -> None:
        if self.settings.auth_enabled and not self.authenticated:
            raise _fatal("E_AUTH_FIRST", f"AUTH required before {verb}")

    def _check_message_id(self, raw: bytes) -> bytes:
        if len(raw) != _MESSAGE_ID_LENGTH:
            raise _invalid("invalid message ID")
        return raw

    def _require_consuming(self, verb: str) -> None:
        if self.state not in (ConnectionState.SUBSCRIBED, ConnectionState.CLOSING):
            raise _invalid(f"cannot {verb} in current state")
