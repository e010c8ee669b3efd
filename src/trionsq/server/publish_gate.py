"""The check a Youzan publish passes before its body is read (spec §8.3 steps 5-6).

The protocol parser calls it with the command's header; it needs the broker's
topics and the connection's AUTH grants, not the connection, so connections
without AUTH share one gate per broker and no reference cycle ties a closed
connection to it (issue 14).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import trio

from ..protocol import broker_errors

if TYPE_CHECKING:
    from ..auth.session import AuthSession
    from ..broker.broker import Broker
    from ..protocol.errors import ProtocolError
    from ..protocol.server import PublishHeader

__all__ = ["PublishGate", "gate_for"]


class PublishGate:
    """The session's ``publish_gate``: it knows the broker and the grants, not the
    session, so no reference cycle keeps a closed connection for the collector.
    Sessions without AUTH share their broker's (:func:`gate_for`)."""

    __slots__ = ("__weakref__", "auth", "broker")

    def __init__(self, broker: Broker, auth: AuthSession | None) -> None:
        self.broker = broker
        self.auth = auth

    def __call__(self, header: PublishHeader) -> ProtocolError | None:
        """Before the body (spec §8.3 steps 5-6): Youzan's publishes never create
        topics and a named partition must exist; an ordered topic needs a partition.

        PUB/MPUB reach here only when they name a partition.

        With AUTH on, the grants are checked first, so a client learns nothing of
        a topic it may not use. When that cannot be decided without awaiting (the
        grants expired, or AUTH came in this same read) nothing is refused here:
        the auth check after the body comes first, then the handler's own checks.
        """
        auth = self.auth
        if auth is not None:
            allowed = None
            if auth.state is not None:
                allowed = auth.verdict(header.topic, "", trio.current_time())
            if allowed is None:
                return None
            if not allowed:
                verb = "MPUB" if header.verb == "MPUB" else "PUB"  # Youzan's verbs check as PUB
                return broker_errors.unauthorized(verb, header.topic)
        topic = self.broker.topics.get(header.topic)
        if topic is None or (header.partition or 0) >= len(topic.partitions):
            return broker_errors.topic_not_exist()
        if header.partition is None and topic.ordered:
            return broker_errors.bad_partition_for_ordered()
        return None


_SHARED_GATES: weakref.WeakValueDictionary[int, PublishGate] = weakref.WeakValueDictionary()
"""Each broker's gate for sessions without AUTH, by ``id(broker)``, while one is in use."""


def gate_for(broker: Broker, auth: AuthSession | None) -> PublishGate:
    """A gate of the session's own only with AUTH (its grants are the session's)."""
    if auth is not None:
        return PublishGate(broker, auth)
    gate = _SHARED_GATES.get(id(broker))
    if gate is None or gate.broker is not broker:
        gate = _SHARED_GATES[id(broker)] = PublishGate(broker, None)
    return gate
