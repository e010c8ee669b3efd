"""The client's one way of waiting before trying again: jittered delays that double
from a first one up to a cap, optionally never past a deadline. The consumer waits so
between reconnects, the producer between retries of a publish a rate limit refused or
an outage failed."""

from __future__ import annotations

import random

import trio

__all__ = ["Backoff"]


class Backoff:
    """Delays of ``first``, then twice as long each time up to ``most``, each one
    jittered down to half (so many clients do not come back in step)."""

    __slots__ = ("first", "most", "next")

    def __init__(self, first: float, most: float) -> None:
        self.first = first
        self.most = most
        self.next = first
        """The next delay before jitter."""

    def reset(self) -> None:
        """It worked: the next delay is the first again."""
        self.next = self.first

    def delay(self) -> float:
        """The next delay (jittered), and the one after it doubled."""
        delay = self.next * random.uniform(0.5, 1.0)  # noqa: S311 - jitter, not secrets
        self.next = min(self.next * 2, self.most)
        return delay

    def delay_before(self, deadline: float) -> float | None:
        """The next delay, or None if waiting it would end past ``deadline`` (Trio's
        clock): then it is time to give up."""
        delay = self.delay()
        return None if trio.current_time() + delay > deadline else delay
