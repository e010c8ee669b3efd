"""Rate limits (issue 20): token buckets for deliveries and publishes.

Opt-in and off by default: nothing here exists for a channel, a consumer or a topic
that asked for nothing, so the router's pass and a publish only ever check for
``None``. A limit is messages/s and/or bytes/s; a message's size is its body plus
:data:`MESSAGE_OVERHEAD` (the fixed part of the frame that carries it).

A bucket holds up to :data:`BURST_SECONDS` of its rate (at least one token) and
starts full. The messages bucket of a delivery limit is exact: a routing pass takes
at most the whole tokens it holds. A bytes bucket, and both buckets of a publish
limit, work on debt: they let a batch through while their balance holds a token
and charge it afterwards, which may drive the balance below zero; nothing more goes
until it has refilled. So a batch larger than the bucket still goes, and over any
window ``t`` no more than ``rate * t + capacity`` (plus the one batch that went
into debt) passes. Pure state with time passed in (``now``: monotonic seconds).

A router held back by a bucket looks again once it holds a *step*
(:data:`STEP_SECONDS` of its rate, at least one token), not once it is full: a
channel at 1,000/s sends 10 messages every 10 ms rather than 100 every 100 ms, and
a router that wakes late loses nothing (what accrued meanwhile is still in the
bucket, up to its capacity); a throttled producer waits the same way. A publish
limit (:class:`PublishLimit`) either throttles its producers (the default) or refuses
them (:class:`PublishMode`).
"""

from __future__ import annotations

import enum
import math
from typing import TYPE_CHECKING, Final

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = [
    "BURST_SECONDS",
    "MESSAGE_OVERHEAD",
    "MIN_WAIT",
    "STEP_SECONDS",
    "UNLIMITED",
    "PublishLimit",
    "PublishMode",
    "RateLimit",
    "Rates",
    "TokenBucket",
    "batch_size",
]

BURST_SECONDS: Final = 0.05
"""A bucket's capacity in seconds of its rate: short enough that a limit holds over a
second and a burst after an idle spell stays small (any 100 ms window delivers at
most 1.5x the rate's 100 ms), long enough that a router waking up to 40 ms late (five
:data:`STEP_SECONDS` waits fit in it) loses nothing of the rate."""
STEP_SECONDS: Final = 0.01
"""What a held-back router waits to have, in seconds of the rate (at least a token):
at most 100 passes a second for a throttled channel, each a hundredth of its rate, so
any 100 ms window delivers at most the rate's 100 ms plus the bucket's burst."""
MESSAGE_OVERHEAD: Final = 34
"""Bytes charged per message on top of its body: a message frame's size, type,
timestamp, attempts and id fields (4 + 4 + 8 + 2 + 16)."""
UNLIMITED: Final = 1 << 62
"""Room of a limit that does not bound the count now (its bytes balance holds)."""
MIN_WAIT: Final = 1e-6
"""The least a refill time lies ahead of ``now``: float rounding must never make the
channel's timer fire again at once with nothing refilled (a busy loop under
MockClock)."""
_TOLERANCE: Final = 1e-6
"""A refill computed at exactly its time may come out a hair below a whole token
(float rounding of large monotonic times); a millionth of a token is ignored."""


class TokenBucket:
    """Tokens refilled at ``rate`` per second up to ``capacity``; starts full."""

    __slots__ = ("balance", "capacity", "rate", "step", "updated")

    def __init__(self, rate: float, now: float) -> None:
        self.rate: Final = float(rate)
        self.capacity: Final = max(self.rate * BURST_SECONDS, 1.0)
        self.step: Final = min(max(self.rate * STEP_SECONDS, 1.0), self.capacity)
        """What a held-back router waits for (:data:`STEP_SECONDS` of the rate)."""
        self.balance = self.capacity
        """Tokens held; below zero after a charge on debt."""
        self.updated = now

    def refill(self, now: float) -> None:
        """Add what ``rate`` gave since the last look."""
        elapsed = now - self.updated
        if elapsed > 0:
            self.balance = min(self.capacity, self.balance + elapsed * self.rate)
            self.updated = now

    def tokens(self, now: float) -> int:
        """Whole tokens held now (0 while in debt)."""
        self.refill(now)
        return max(0, math.floor(self.balance + _TOLERANCE))

    def is_open(self, now: float) -> bool:
        """Whether it holds a token now (a batch may go on debt)."""
        self.refill(now)
        return self.balance + _TOLERANCE >= 1.0

    def charge(self, amount: float) -> None:
        """Take ``amount`` tokens (may go below zero: debt)."""
        self.balance -= amount

    def holds_at(self, now: float, amount: float) -> float:
        """When it holds ``amount`` tokens (at most its capacity; ``now`` if it does)."""
        self.refill(now)
        if self.balance + _TOLERANCE >= amount:
            return now
        return max(now + (amount - self.balance) / self.rate, now + MIN_WAIT)


@attrs.frozen
class Rates:
    """A limit's settings: 0 turns either off."""

    msgs_per_sec: int = 0
    bytes_per_sec: int = 0

    def __bool__(self) -> bool:
        return bool(self.msgs_per_sec or self.bytes_per_sec)


class RateLimit:
    """A messages bucket and/or a bytes bucket for one channel, consumer or producer."""

    __slots__ = ("bytes", "mean_size", "msgs", "rates", "throttled")

    def __init__(self, rates: Rates, now: float) -> None:
        self.rates: Final = rates
        self.msgs = TokenBucket(rates.msgs_per_sec, now) if rates.msgs_per_sec else None
        self.bytes = TokenBucket(rates.bytes_per_sec, now) if rates.bytes_per_sec else None
        self.throttled = 0
        """Routing passes (or publishes) it held back (/stats)."""
        self.mean_size = 0.0
        """Bytes a message counted for in the last charge (0: none yet): how many
        messages the bytes bucket's balance stands for."""

    def room(self, now: float) -> int:
        """Messages it lets out now: the whole message tokens, and as many messages as
        the bytes balance holds at the last charge's mean size (at least one, on debt;
        :data:`UNLIMITED` before any); 0 while any bucket is empty."""
        room = UNLIMITED if self.msgs is None else self.msgs.tokens(now)
        size = self.bytes
        if size is not None:
            if not size.is_open(now):
                return 0
            if self.mean_size:
                room = min(room, max(1, int(size.balance // self.mean_size)))
        return room

    def charge(self, count: int, size: int) -> None:
        """``count`` messages of ``size`` bytes in all went out."""
        if self.msgs is not None:
            self.msgs.charge(count)
        if self.bytes is not None:
            self.bytes.charge(size)
            if count:
                self.mean_size = size / count

    def is_open(self, now: float) -> bool:
        """Whether every bucket holds a token now (a publish may go, on debt)."""
        msgs, size = self.msgs, self.bytes
        return (msgs is None or msgs.is_open(now)) and (size is None or size.is_open(now))

    def admit(self, now: float, count: int, size: int) -> bool:
        """A publish of ``count`` messages, ``size`` bytes: let through (and charged, on
        debt) while every bucket holds a token, else refused and not charged."""
        if not self.is_open(now):
            self.throttled += 1
            return False
        self.charge(count, size)
        return True

    def exhausted(self) -> bool:
        """Whether a bucket lacks a token, as of its last refill: right after a
        routing pass charged it (no time has passed), without refilling again."""
        msgs, size = self.msgs, self.bytes
        return (msgs is not None and msgs.balance + _TOLERANCE < 1.0) or (
            size is not None and size.balance + _TOLERANCE < 1.0
        )

    def open_at(self, now: float) -> float:
        """When every bucket holds a token again: when a refused publish may be sent
        again (HTTP's ``Retry-After``)."""
        return self._when(now, _one_token)

    def ready_at(self, now: float) -> float:
        """When every bucket without a token holds its step again: when a router or a
        throttled producer held back by this limit goes on (at most 100 times a
        second, each time a hundredth of the rate, instead of one burst of a tenth
        every 100 ms)."""
        return self._when(now, _step)

    def _when(self, now: float, amount: Callable[[TokenBucket], float]) -> float:
        ready = now
        for bucket in (self.msgs, self.bytes):
            if bucket is not None and not bucket.is_open(now):
                ready = max(ready, bucket.holds_at(now, amount(bucket)))
        return ready


def _one_token(bucket: TokenBucket) -> float:
    return 1.0


def _step(bucket: TokenBucket) -> float:
    return bucket.step


class PublishMode(enum.Enum):
    """What a topic's publish limit does with a publish its bucket cannot take now."""

    THROTTLE = "throttle"
    """Hold it (Kafka's quotas): TCP reads the connection no further until the bucket
    holds its step again, then stores it and answers OK; HTTP answers when the bucket
    has a token, within :data:`~trionsq.server.publish_api.HTTP_THROTTLE_SECONDS`,
    else 429. Clients that pipeline never see an error."""
    REFUSE = "refuse"
    """Refuse it at once: a non-fatal ``E_PUB_FAILED ... rate limit exceeded`` over
    TCP, 429 with ``Retry-After`` over HTTP; nothing is stored."""


class PublishLimit:
    """A topic's publish limit: its rates and mode, and the one bucket HTTP publishes
    share (each TCP connection keeps its own, made from :attr:`rates`)."""

    __slots__ = ("http", "mode", "rates", "refused", "throttled")

    def __init__(self, rates: Rates, now: float, mode: PublishMode = PublishMode.THROTTLE) -> None:
        self.rates: Final = rates
        self.mode: Final = mode
        self.http: Final = RateLimit(rates, now)
        self.refused = 0
        """Publishes refused for it, over TCP and HTTP (/stats)."""
        self.throttled = 0
        """Publishes it held until their bucket allowed them, over TCP and HTTP (/stats)."""


def batch_size(bodies: Sequence[bytes]) -> int:
    """Bytes a batch of bodies counts for (body plus :data:`MESSAGE_OVERHEAD` each)."""
    return sum(map(len, bodies)) + MESSAGE_OVERHEAD * len(bodies)
