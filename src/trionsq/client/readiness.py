"""How a consumer's ``max_in_flight`` is spread as RDY over its connections, and
how failures slow it down: go-nsq's rules, without I/O or clocks of their own.

- Each connection gets ``max_in_flight // connections`` (at least 1).
- With more connections than ``max_in_flight``, only ``max_in_flight`` of them get
  RDY 1 at a time; :meth:`ReadyControl.redistribute` (called every few seconds)
  takes it from those that have been idle and gives it to others at random, so
  every nsqd is drained eventually.
- Closing: RDY 0 everywhere for good (:meth:`ReadyControl.close`), the first step
  of a consumer's graceful stop.
- Backoff: a failed message raises the level and stops delivery (RDY 0
  everywhere) for ``backoff_unit * 2**(level-1)`` seconds, capped; then one
  connection gets RDY 1 to test the water; a success lowers the level (full RDY
  again at level 0), a failure raises it. Results that arrive while stopped are
  not counted, as go-nsq does.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Final

from ..protocol.commands import Pull, Rdy
from .errors import NsqConfigError

if TYPE_CHECKING:
    from .connection import Connection
    from .discovery import Target

__all__ = ["Link", "ReadyControl"]

MAX_BACKOFF_LEVEL: Final = 8


class Link:
    """One subscribed connection, as readiness sees it."""

    __slots__ = ("connection", "last_message", "pulled", "rdy", "target")

    def __init__(self, connection: Connection, target: Target, now: float) -> None:
        self.connection = connection
        self.target = target
        self.rdy = 0
        self.pulled = 0
        """Pull consumption: messages asked for (PULL) and not arrived yet."""
        self.last_message = now
        """When a message last arrived on it (or when it was subscribed)."""

    def pull(self, count: int) -> None:
        """PULL ``count`` more; queued, not awaited."""
        if not self.connection.closed:
            self.pulled += count
            self.connection.send(Pull(count))

    def set_rdy(self, count: int) -> None:
        """Send RDY when it changes; queued, not awaited."""
        if count != self.rdy and not self.connection.closed:
            self.rdy = count
            self.connection.send(Rdy(count))


class ReadyControl:
    """The RDY counts of one consumer's links, and its backoff state."""

    def __init__(
        self,
        max_in_flight: int,
        *,
        backoff_unit: float = 1.0,
        max_backoff: float = 120.0,
        chooser: random.Random | None = None,
        pulling: bool = False,
    ) -> None:
        """``pulling``: the consumer pulls (PULL, :meth:`Consumer.fetch`): no RDY is
        ever sent."""
        if max_in_flight < 1:
            raise NsqConfigError("max_in_flight must be at least 1")
        self.max_in_flight = max_in_flight
        self.backoff_unit = backoff_unit
        self.max_backoff = max_backoff
        self.links: list[Link] = []
        self.level = 0
        """Backoff level: 0 = full speed."""
        self.stopped = False
        """In a backoff wait: RDY 0 everywhere, results not counted."""
        self.pulling = pulling
        self.closing = False
        """The consumer is stopping: RDY stays 0 on every link, new ones included."""
        self._random = chooser or random.Random()  # noqa: S311 - spreading load, not secrets

    @property
    def crowded(self) -> bool:
        """More connections than ``max_in_flight``: some must wait with RDY 0."""
        return not self.pulling and len(self.links) > self.max_in_flight

    def add(self, link: Link) -> None:
        self.links.append(link)
        self.rebalance()

    def remove(self, link: Link) -> None:
        if link in self.links:
            self.links.remove(link)
            self.rebalance()

    def rebalance(self) -> None:
        """Set every link's RDY for the current connections and backoff state."""
        links = self.links
        if not links or self.pulling:
            return
        if self.stopped or self.closing:
            for link in links:
                link.set_rdy(0)
        elif self.level:
            self._one_tester()
        elif not self.crowded:
            share = max(1, self.max_in_flight // len(links))
            for link in links:
                link.set_rdy(share)
        else:
            ready = [link for link in links if link.rdy > 0][: self.max_in_flight]
            waiting = [link for link in links if link.rdy == 0]
            self._random.shuffle(waiting)
            ready += waiting[: self.max_in_flight - len(ready)]
            chosen = {id(link) for link in ready}
            for link in links:
                link.set_rdy(1 if id(link) in chosen else 0)

    def close(self) -> None:
        """The consumer is stopping: RDY 0 on every link, and no more RDY after."""
        self.closing = True
        self.rebalance()

    def redistribute(self, now: float, idle: float) -> None:
        """Crowded: links idle for ``idle`` seconds give their RDY 1 to waiting ones."""
        if not self.crowded or self.stopped or self.closing or self.level:
            return
        freed = [link for link in self.links if link.rdy > 0 and now - link.last_message >= idle]
        waiting = [link for link in self.links if link.rdy == 0]
        self._random.shuffle(waiting)
        for old, new in zip(freed, waiting, strict=False):
            old.set_rdy(0)
            new.set_rdy(1)
            new.last_message = now  # its turn starts now

    # ------------------------------------------------------------------ backoff

    def succeeded(self) -> float | None:
        """A message was handled; the seconds to stop for, if backoff goes on."""
        if self.stopped or not self.level:
            return None
        self.level -= 1
        if not self.level:
            self.rebalance()
            return None
        return self._stop()

    def failed(self) -> float | None:
        """A message failed; the seconds to stop delivery for (None while stopped)."""
        if self.stopped:
            return None
        self.level = min(self.level + 1, MAX_BACKOFF_LEVEL)
        return self._stop()

    def resume(self) -> None:
        """The backoff wait is over: one connection tests with RDY 1."""
        self.stopped = False
        self.rebalance()

    def _stop(self) -> float:
        self.stopped = True
        self.rebalance()
        return float(min(self.max_backoff, self.backoff_unit * 2.0 ** (self.level - 1)))

    def _one_tester(self) -> None:
        testers = [link for link in self.links if link.rdy > 0]
        tester = testers[0] if testers else self._random.choice(self.links)
        for link in self.links:
            link.set_rdy(1 if link is tester else 0)
