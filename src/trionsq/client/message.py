"""A message as a consumer holds it: the delivered fields and the answers it may
give, which only queue bytes on the connection it came from."""

from __future__ import annotations

from typing import Protocol

import attrs

from ..protocol.client import encode_fin, encode_req, encode_touch
from ..protocol.message import Message
from .connection import Connection

__all__ = ["ClientMessage", "MessageFields", "Outcomes"]


class Outcomes(Protocol):
    """Who hears how messages ended (the consumer, for backoff)."""

    backing_off: bool

    def outcome(self, succeeded: bool) -> None: ...

    def requeued(self, message: ClientMessage) -> None:
        """``message`` was requeued (an ordered window goes back to it)."""


class MessageFields:
    """What a delivered message carries, read from its ``message``: shared by the
    async client's messages and the blocking client's."""

    __slots__ = ()
    message: Message

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def id(self) -> bytes:
        return self.message.id

    @property
    def attempts(self) -> int:
        return self.message.attempts

    @property
    def timestamp(self) -> int:
        """Publish time, nanoseconds since the Unix epoch."""
        return self.message.timestamp

    @property
    def offset(self) -> int | None:
        """Its place in the partition's log (ordered or SUB_ADVANCED consumers)."""
        return self.message.offset

    @property
    def ext(self) -> bytes:
        """Youzan's JSON header or tag, as published (ext topics)."""
        return self.message.ext


@attrs.define(eq=False)
class ClientMessage(MessageFields):
    """A delivered message and what its consumer may answer (FIN or REQ once)."""

    message: Message
    _connection: Connection = attrs.field(repr=False)
    _outcomes: Outcomes = attrs.field(repr=False)
    partition: int | None = None
    """The Youzan partition it came from (None: a plain SUB)."""
    responded: bool = attrs.field(default=False, init=False)

    @property
    def connection(self) -> Connection:
        """The connection it came on (its answer goes back there)."""
        return self._connection

    def finish(self) -> None:
        """FIN: done with it. Queued, not awaited."""
        self._respond(encode_fin(self.message.id))
        if self._outcomes.backing_off:
            self._outcomes.outcome(True)

    def requeue(self, delay: float = 0.0, *, backoff: bool = True) -> None:
        """REQ: deliver it again after ``delay`` seconds; with ``backoff`` the
        consumer also slows down, as go-nsq's ``Requeue`` does."""
        self._respond(encode_req(self.message.id, round(delay * 1000)))
        self._outcomes.requeued(self)
        if backoff:
            self._outcomes.outcome(False)

    def touch(self) -> None:
        """TOUCH: more time before the broker redelivers it (may be repeated)."""
        if not self.responded and not self._connection.closed:
            self._connection.send_bytes(encode_touch(self.message.id))

    def give_back(self) -> None:
        """REQ at once, no backoff, unless answered already: its consumer is stopping
        and nobody will answer it any more (so it does not wait for msg_timeout)."""
        if not self.responded:
            self.responded = True
            connection = self._connection
            if not connection.closed and not connection.fenced:
                connection.send_bytes(encode_req(self.message.id, 0))

    def _respond(self, command: bytes) -> None:
        if self.responded:
            raise RuntimeError(
                "this message was already finished or requeued"
                " (or given back when its consumer stopped)"
            )
        self.responded = True
        if not self._connection.closed:  # else the broker redelivers it anyway
            self._connection.send_bytes(command)
