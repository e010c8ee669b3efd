"""What the broker asks of replication (docs/replication.md), whatever implements it.

A broker started with ``--etcd-endpoints`` gets a :class:`ReplicationHook`
(``cluster/replica_manager.py``, handed in by nursery_tree.py, so the broker never
imports the cluster package); without it ``Broker.replication`` is None and no
publish or subscription path does anything more than that one check.

For a replicated topic the hook refuses a write this broker may not take (not the
partition's leader; fewer in-sync replicas than the topic's ``min_isr``; a lease
it cannot renew) with Youzan's errors, is told of each append, and lets a
publisher wait until its records are committed (on every in-sync replica).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..protocol import broker_errors

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..protocol.errors import ProtocolError

__all__ = ["ReplicaRefusal", "ReplicationHook", "not_leader", "not_writable"]


class ReplicaRefusal(Exception):
    """This broker may not take a write (or serve a read) of a replicated partition now."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason
        """Why, for the log (Youzan's error frames carry no text)."""

    def error(self, *, fatal: bool) -> ProtocolError:
        """The Youzan error frame's error (fatal for SUB, not for publishes)."""
        if self.code == "E_FAILED_ON_NOT_LEADER":
            return broker_errors.failed_on_not_leader(fatal=fatal)
        return broker_errors.failed_on_not_writable(fatal=fatal)


def not_leader(reason: str) -> ReplicaRefusal:
    """``E_FAILED_ON_NOT_LEADER``: another broker leads the partition (or none yet)."""
    return ReplicaRefusal("E_FAILED_ON_NOT_LEADER", reason)


def not_writable(reason: str) -> ReplicaRefusal:
    """``E_FAILED_ON_NOT_WRITABLE``: this broker leads, but may not commit now."""
    return ReplicaRefusal("E_FAILED_ON_NOT_WRITABLE", reason)


class ReplicationHook(Protocol):
    """The cluster's side of a broker's replicated topics."""

    def replicated(self, topic: str) -> bool:
        """Whether ``topic`` is replicated (its writes wait for the ISR)."""
        ...

    def check_write(self, topic: str, partition: int) -> None:
        """Before an append.

        Raises:
            ReplicaRefusal: this broker may not take it now.
        """
        ...

    def default_partition(self, topic: str) -> int | None:
        """Where a publish or SUB naming no partition goes (a plain NSQ client): the
        lowest partition of replicated ``topic`` this broker leads, so every broker
        lookupd lists as a producer takes plain clients; None: not replicated here,
        or this broker leads none of it (the lowest partition then, as standalone)."""
        ...

    def check_read(self, topic: str, partition: int) -> None:
        """Before a subscription.

        Raises:
            ReplicaRefusal: consumers must go to the partition's leader.
        """
        ...

    def appended(self, topic: str, partition: int) -> None:
        """The leader appended to the partition's log (followers get it now)."""
        ...

    def reached(self, topic: str, partition: int, end: int) -> bool:
        """Whether every record below ``end`` is committed.

        Raises:
            ReplicaRefusal: this broker no longer leads the partition.
        """
        ...

    def on_commit(self, topic: str, partition: int, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, when the commit end next moves or leadership ends
        (a connection answers its held publishes then, without a task of its own)."""
        ...

    def partition_status(self, topic: str, partition: int) -> dict[str, object] | None:
        """/stats' ``replication`` of a partition (None: not replicated)."""
        ...

    def degraded(self) -> str | None:
        """Why the broker cannot coordinate now (etcd unreachable, lease not renewed),
        for /ping; None when all is well."""
        ...

    async def committed(self, topic: str, partition: int, end: int) -> None:
        """Until every record below ``end`` is on every in-sync replica.

        Raises:
            ReplicaRefusal: leadership was lost meanwhile (the records may or may not
                survive: the publisher retries, with an idempotency key to store once).
        """
        ...
