"""What a broker tells its lookupds: topics, partitions and channels coming to exist
and going away.

The broker announces each change to its listeners (the lookupd peers) synchronously,
never on the message path; a listener queues and returns. On (re)connect a peer
registers everything at once: nsqd's way from :func:`registrations` (a lookupd that
knows no partitions), Youzan's nsqd's way from :func:`partition_registrations`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .topic import Topic

__all__ = ["TopologyChange", "TopologyListeners", "partition_registrations", "registrations"]


@attrs.frozen
class TopologyChange:
    """A topic (``channel`` None) or a channel came to exist or went away, in some of
    the topic's partitions.

    What nsqd tells every nsqlookupd (REGISTER/UNREGISTER), ephemeral names included:
    Youzan's nsqd one command per partition, nsqd 1.3 one per name and only when
    ``whole``.
    """

    topic: str
    channel: str | None
    exists: bool
    partitions: tuple[int, ...] = (0,)
    """The partitions that gained or lost the topic or channel (a topic's new
    partitions, when it grows)."""
    whole: bool = True
    """The name itself came or went: a topic created or deleted, a channel in its
    first partition or out of its last. False when a topic grows or a channel comes
    to (or leaves) one more partition."""


class TopologyListeners:
    """The callables told of every :class:`TopologyChange`, in the order added."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[TopologyChange], None]] = []

    def __bool__(self) -> bool:
        return bool(self._listeners)

    def add(self, listener: Callable[[TopologyChange], None]) -> None:
        self._listeners.append(listener)

    def remove(self, listener: Callable[[TopologyChange], None]) -> None:
        """Stop telling ``listener`` (one that is not there is ignored)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def tell(self, change: TopologyChange) -> None:
        for listener in list(self._listeners):
            listener(change)


def registrations(topics: Mapping[str, Topic]) -> list[tuple[str, str | None]]:
    """What a lookupd is told on (re)connect: each channel as (topic, channel), and
    (topic, None) for a topic without channels (a channel registers its topic too)."""
    found: list[tuple[str, str | None]] = []
    for name, topic in topics.items():
        channels = dict.fromkeys(c for p in topic.partitions for c in p.channels)
        if channels:
            found.extend((name, channel) for channel in channels)
        else:
            found.append((name, None))
    return found


def partition_registrations(topics: Mapping[str, Topic]) -> list[tuple[str, int, str | None]]:
    """Youzan's nsqd's registrations on (re)connect: each partition as (topic,
    partition, None), followed by each of its channels as (topic, partition, channel)."""
    found: list[tuple[str, int, str | None]] = []
    for name, topic in topics.items():
        for partition in topic.partitions:
            found.append((name, partition.index, None))
            found.extend((name, partition.index, channel) for channel in partition.channels)
    return found
