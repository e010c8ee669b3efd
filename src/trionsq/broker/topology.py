"""What a broker tells its lookupds: topics and channels coming to exist and going away.

The broker announces each change to its listeners (the lookupd peers) synchronously,
never on the message path; a listener queues and returns. On (re)connect a peer
registers everything at once from :func:`registrations`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .topic import Topic

__all__ = ["TopologyChange", "TopologyListeners", "registrations"]


@attrs.frozen
class TopologyChange:
    """A topic (``channel`` None) or a channel came to exist or went away.

    What nsqd tells every nsqlookupd (REGISTER/UNREGISTER), ephemeral names included.
    A channel counts once over a topic's partitions: it exists while any has it.
    """

    topic: str
    channel: str | None
    exists: bool


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
