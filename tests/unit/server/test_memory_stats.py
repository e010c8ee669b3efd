"""The ``memory`` block's figures (server/memory_stats.py)."""

from __future__ import annotations

import gc

import attrs

from trionsq.server import memory_stats
from trionsq.server.memory_stats import memory_statistics

from .test_stats import MEMORY_KEYS


def test_gc_pause_percentile_rule() -> None:
    ordered = list(range(1, 11))
    assert memory_stats._go_percentile(100.0, ordered) == 10
    assert memory_stats._go_percentile(95.0, ordered) == 10
    assert memory_stats._go_percentile(50.0, ordered) == 6
    assert memory_stats._go_percentile(99.0, []) == 0


def test_memory_statistics_follow_the_collector() -> None:
    before = memory_statistics()
    gc.collect()
    after = memory_statistics()
    assert [field.name for field in attrs.fields(type(after))] == MEMORY_KEYS
    assert after.gc_total_runs > before.gc_total_runs
    assert after.gc_pause_usec_100 >= after.gc_pause_usec_99 >= after.gc_pause_usec_95 >= 0
    assert after.heap_objects > 0
    assert after.heap_in_use_bytes > 0
