"""What a lookupd asks of the cluster for replicated topics (``--etcd-endpoints``).

The cluster package implements it (``cluster/lookupd_side.py``); without etcd the
lookupd has none and answers as before. A replicated topic's ``/lookup`` comes from
etcd (each partition's current leader), and ``/topic/create`` with ``replicator``
goes to the coordinator, which only the elected lookupd is: the others answer
Youzan's ``E_FAILED_ON_NOT_LEADER`` (http-api.md §5.3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .topics import TopicMeta

__all__ = ["ReplicatedTopics", "ReplicationRefused"]


class ReplicationRefused(Exception):
    """A create the cluster refused: the HTTP 400 text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ReplicatedTopics(Protocol):
    """The cluster's topics, as a lookupd serves them."""

    def lookup(
        self, topic: str, *, write: bool, partition: str, metainfo: bool
    ) -> dict[str, object] | None:
        """Youzan's ``/lookup`` document without ``channels`` (None: not replicated)."""
        ...

    async def create(self, topic: str, meta: TopicMeta, min_isr: int) -> None:
        """Create a replicated topic (an existing one with the same counts is fine).

        Raises:
            ReplicationRefused: not the coordinator, too few brokers, other counts.
        """
        ...

    async def move(
        self, topic: str, partition: int, source: str, target: str, within: float
    ) -> dict[str, object]:
        """Move a replica between brokers (ids as etcd names them: ``host:tcp_port``);
        the partition's placement once moved.

        Raises:
            ReplicationRefused: not the coordinator, no such replica or broker, or the
                new replica did not catch up ``within`` seconds.
        """
        ...
