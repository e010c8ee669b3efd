"""The one error type of the protocol package.

nsqd splits errors into fatal (reply, then close) and non-fatal (reply, carry on);
the protocol layer decides which, the I/O layer only sends the frame and acts.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ProtocolError"]


class ProtocolError(Exception):
    """An NSQ error reply: ``CODE description``, and whether it ends the connection.

    Instances are raised by the codecs and also appear as values in the event lists
    of :class:`~trionsq.protocol.server.ServerConnection`, where a non-fatal error
    sits between the commands around it and a fatal one ends the list.
    They compare by value so event lists can be compared in tests.
    """

    code: Final[str]
    description: Final[str | None]
    fatal: Final[bool]

    def __init__(self, code: str, description: str | None = "", *, fatal: bool = True) -> None:
        """Build an error; ``description=None`` sends the bare code (``E_BAD_PROTOCOL``)."""
        self.code = code
        self.description = description
        self.fatal = fatal
        super().__init__(self.text)

    @property
    def text(self) -> str:
        """The frame text: code, a space, the description (an empty one keeps the space)."""
        if self.description is None:
            return self.code
        return f"{self.code} {self.description}"

    @property
    def data(self) -> bytes:
        """The error frame's data bytes."""
        return self.text.encode("utf-8", "surrogateescape")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProtocolError):
            return NotImplemented
        return (self.code, self.description, self.fatal) == (
            other.code,
            other.description,
            other.fatal,
        )

    def __hash__(self) -> int:
        return hash((self.code, self.description, self.fatal))

    def __repr__(self) -> str:
        kind = "fatal" if self.fatal else "non-fatal"
        return f"ProtocolError({self.text!r}, {kind})"
