"""The ``memory`` block of /stats and statsd's ``mem.*``: nsqd's Go ``runtime.MemStats``
keys, filled with what the interpreter can tell cheaply, and the process's resident
set size (which the admin stream's snapshots carry too)."""

from __future__ import annotations

import gc
import math
import os
import sys
import time
from collections import deque
from typing import Final

import attrs

__all__ = ["MemoryStatistics", "memory_statistics", "resident_bytes"]


@attrs.frozen
class MemoryStatistics:
    """nsqd's ``memStats`` keys, filled with what CPython can tell cheaply.

    - ``heap_objects``: memory blocks the interpreter has allocated
      (``sys.getallocatedblocks()``);
    - ``heap_in_use_bytes``: the process's resident set size (``/proc/self/statm``;
      0 where there is no procfs);
    - ``heap_idle_bytes``, ``heap_released_bytes``: 0 (pymalloc does not report them);
    - ``gc_pause_usec_100/99/95``: those percentiles of the last 256 garbage
      collections' durations in microseconds (nsqd's rule over Go's 256 last pauses),
      timed from when this module was imported;
    - ``next_gc_bytes``: container allocations left before the next generation-0
      collection (CPython's trigger is a count, not bytes);
    - ``gc_total_runs``: collections of every generation since the process started.
    """

    heap_objects: int
    heap_idle_bytes: int
    heap_in_use_bytes: int
    heap_released_bytes: int
    gc_pause_usec_100: int
    gc_pause_usec_99: int
    gc_pause_usec_95: int
    next_gc_bytes: int
    gc_total_runs: int


def memory_statistics() -> MemoryStatistics:
    """The ``memory`` block: see :class:`MemoryStatistics` for what each figure is."""
    pauses = sorted(_GC_PAUSES.durations_ns)
    threshold, *_ = gc.get_threshold()
    pending, *_ = gc.get_count()
    return MemoryStatistics(
        heap_objects=sys.getallocatedblocks(),
        heap_idle_bytes=0,
        heap_in_use_bytes=resident_bytes(),
        heap_released_bytes=0,
        gc_pause_usec_100=_go_percentile(100.0, pauses) // 1000,
        gc_pause_usec_99=_go_percentile(99.0, pauses) // 1000,
        gc_pause_usec_95=_go_percentile(95.0, pauses) // 1000,
        next_gc_bytes=max(threshold - pending, 0),
        gc_total_runs=sum(generation["collections"] for generation in gc.get_stats()),
    )


class _GcPauses:
    """Durations of the last 256 collections, like the ring Go keeps in ``PauseNs``."""

    def __init__(self) -> None:
        self.durations_ns: deque[int] = deque(maxlen=256)
        self._started = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        elif self._started:
            self.durations_ns.append(time.perf_counter_ns() - self._started)
            self._started = 0


_GC_PAUSES: Final = _GcPauses()
gc.callbacks.append(_GC_PAUSES)  # once per process, when the HTTP API is first imported


def _go_percentile(percent: float, ordered: list[int]) -> int:
    """nsqd's ``percentile``: the element at ``floor(p/100 * n + 0.5)``, capped at the last."""
    if not ordered:
        return 0
    index = min(math.floor(percent / 100.0 * len(ordered) + 0.5), len(ordered) - 1)
    return ordered[index]


def resident_bytes() -> int:
    """Resident set size from procfs; 0 where there is none."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            fields = statm.read().split()
    except OSError:
        return 0
    return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")
