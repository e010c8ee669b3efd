"""End-to-end processing latency over a sliding window: nsqd's ``e2e_processing_latency``.

nsqd records, on every FIN, the time since the message was published and reports
the configured quantiles of what was recorded during the last
``--e2e-processing-latency-window-time``. Its window is two half-window streams: the
older half is cleared each time half a window passes, so a report covers between
half a window and a whole one. :class:`LatencyWindow` keeps the same two halves with
the same rotation rule (a half is stale once *more* than half a window has passed),
so ``count`` is what nsqd would count.

Each half is a relative-error sketch instead of nsqd's CKMS stream: a positive
value ``v`` is counted in bucket ``ceil(log(v) / log(GAMMA))``, every bucket covers
values within :data:`RELATIVE_ERROR` of its representative, and the reported value
is clamped to the smallest and largest value seen (kept exactly). The quantile
``q`` of ``n`` values is the one of rank ``ceil(q * n)`` (nearest rank), within 1 %. Memory is
bounded by the value range, not the message rate: latencies are int64 nanoseconds,
so a half holds at most :data:`MAX_BUCKETS` counters (about 2,200), a window twice
that. Values below 1 ns (clock steps) share one bucket.

Pure: the caller passes the time (``now``, Unix seconds, the clock the FIN was
timed with); nothing here reads a clock.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

import attrs

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "MAX_BUCKETS",
    "RELATIVE_ERROR",
    "LatencyResult",
    "LatencySettings",
    "LatencySketch",
    "LatencyWindow",
    "aggregate",
]

RELATIVE_ERROR: Final = 0.01
"""A reported value is within 1 % of the sample of that rank."""
GAMMA: Final = (1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)
_LOG_GAMMA: Final = math.log(GAMMA)
MAX_BUCKETS: Final = math.ceil(math.log(2**63) / _LOG_GAMMA) + 2
"""Counters one half-window can hold: int64 nanoseconds, plus the below-1-ns bucket."""


@attrs.frozen
class LatencySettings:
    """What ``--e2e-processing-latency-percentile`` and ``-window-time`` configure."""

    percentiles: tuple[float, ...]
    """Quantiles in (0, 1], reported in this order."""
    window: float
    """Seconds a recorded latency counts for (at least half of it, at most all)."""


@attrs.frozen
class LatencyResult:
    """nsqd's quantile ``Result``: how many latencies, and the value at each quantile."""

    count: int
    percentiles: tuple[tuple[float, float], ...]
    """``(quantile, nanoseconds)`` in the configured order; values are 0 when empty."""
    total_count: int = 0
    total_ns: float = 0.0
    """Every latency recorded since the channels began, however old, and their sum:
    a Prometheus summary's ``_count`` and ``_sum`` (/metrics), which only grow."""


class LatencySketch:
    """Counts of latencies by logarithmic bucket, mergeable by adding counts."""

    __slots__ = ("buckets", "count", "low", "low_max", "maximum", "minimum")

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.low = 0
        """Values below 1 ns (zero or negative: the wall clock stepped back)."""
        self.low_max = -math.inf
        self.count = 0
        self.minimum = math.inf
        self.maximum = -math.inf

    def add(self, value: float) -> None:
        """Count one latency in nanoseconds."""
        self.count += 1
        self.minimum = min(self.minimum, value)
        self.maximum = max(self.maximum, value)
        if value < 1:
            self.low += 1
            self.low_max = max(self.low_max, value)
            return
        key = math.ceil(math.log(value) / _LOG_GAMMA)
        buckets = self.buckets
        buckets[key] = buckets.get(key, 0) + 1

    def merge(self, other: LatencySketch) -> None:
        """Add ``other``'s counts to these."""
        buckets = self.buckets
        for key, count in other.buckets.items():
            buckets[key] = buckets.get(key, 0) + count
        self.low += other.low
        self.low_max = max(self.low_max, other.low_max)
        self.count += other.count
        self.minimum = min(self.minimum, other.minimum)
        self.maximum = max(self.maximum, other.maximum)

    def quantiles(self, percentiles: Iterable[float]) -> tuple[tuple[float, float], ...]:
        """The value of nearest rank ``ceil(q * count)`` for each ``q``; 0 when empty."""
        wanted = tuple(float(q) for q in percentiles)
        if not self.count:
            return tuple((q, 0.0) for q in wanted)
        keys = sorted(self.buckets)
        result: list[tuple[float, float]] = []
        for q in wanted:
            rank = min(max(math.ceil(q * self.count - 1e-9), 1), self.count)
            result.append((q, self._value_at(rank, keys)))
        return tuple(result)

    def _value_at(self, rank: int, keys: list[int]) -> float:
        if rank == self.count:  # the extremes are known exactly
            return float(self.maximum)
        if rank == 1:
            return float(self.minimum)
        if rank <= self.low:
            estimate = self.low_max
        else:
            seen = self.low
            estimate = self.maximum
            for key in keys:
                seen += self.buckets[key]
                if seen >= rank:
                    estimate = 2 * GAMMA**key / (GAMMA + 1)
                    break
        return float(min(max(estimate, self.minimum), self.maximum))


class LatencyWindow:
    """One channel's latencies over the last window, in two rotating halves."""

    __slots__ = (
        "_current",
        "_half",
        "_moved_at",
        "_previous",
        "settings",
        "total_count",
        "total_ns",
    )

    def __init__(self, settings: LatencySettings, *, start: float | None = None) -> None:
        """``start``: when the first half began (Unix seconds); None: at first use."""
        self.settings: Final = settings
        self._half = settings.window / 2
        self._moved_at = start
        self._current = LatencySketch()
        self._previous = LatencySketch()
        self.total_count = 0
        self.total_ns = 0.0
        """Every latency recorded, and their sum (never rotated out)."""

    def insert(self, latency_ns: float, now: float) -> None:
        """Record one FIN's latency (FIN time minus publish time) at time ``now``."""
        self._rotate(now)
        self._current.add(latency_ns)
        self.total_count += 1
        self.total_ns += latency_ns

    def sketch(self, now: float) -> LatencySketch:
        """Everything still inside the window at ``now``, as one new sketch."""
        self._rotate(now)
        merged = LatencySketch()
        merged.merge(self._previous)
        merged.merge(self._current)
        return merged

    def result(self, now: float) -> LatencyResult:
        """Count and quantiles of the window at ``now``."""
        return _result(self.sketch(now), self.settings, self.total_count, self.total_ns)

    def version(self, now: float) -> tuple[int, float | None]:
        """What the window holds at ``now``, in two numbers: a FIN moves the first, a
        rotation the second, so equal versions mean equal results (the admin stream
        reuses a topic's snapshot while its figures stand still)."""
        self._rotate(now)
        return self.total_count, self._moved_at

    def _rotate(self, now: float) -> None:
        """Start a new half for every half-window passed since the current one began."""
        moved_at = self._moved_at
        if moved_at is None:
            self._moved_at = now
            return
        elapsed = now - moved_at
        half = self._half
        if half <= 0:  # no window: nothing outlives the moment it was recorded at
            if elapsed > 0:
                self._previous, self._current = LatencySketch(), LatencySketch()
                self._moved_at = now
            return
        if elapsed <= half:
            return
        moves = max(math.ceil(elapsed / half) - 1, 1)
        if moves == 1:
            self._previous, self._current = self._current, LatencySketch()
        else:
            self._previous, self._current = LatencySketch(), LatencySketch()
        self._moved_at = moved_at + moves * half


def aggregate(windows: Iterable[LatencyWindow], now: float) -> LatencyResult | None:
    """Several windows as one (a topic's channels, as nsqd merges them), at ``now``.

    The quantiles are the first window's. None when no window was given: nsqd reports
    a topic without channels (or with latency tracking off) as
    ``{"count": 0, "percentiles": null}``.
    """
    merged: LatencySketch | None = None
    settings: LatencySettings | None = None
    total_count, total_ns = 0, 0.0
    for window in windows:
        if merged is None:
            merged, settings = LatencySketch(), window.settings
        merged.merge(window.sketch(now))
        total_count += window.total_count
        total_ns += window.total_ns
    if merged is None or settings is None:
        return None
    return _result(merged, settings, total_count, total_ns)


def _result(
    sketch: LatencySketch, settings: LatencySettings, total_count: int, total_ns: float
) -> LatencyResult:
    return LatencyResult(
        sketch.count, sketch.quantiles(settings.percentiles), total_count, total_ns
    )
