"""The e2e latency window: nsqd's half-window rotation, nearest-rank quantiles within 1 %."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from trionsq.broker.latency import (
    MAX_BUCKETS,
    RELATIVE_ERROR,
    LatencyResult,
    LatencySettings,
    LatencySketch,
    LatencyWindow,
    aggregate,
)

SETTINGS = LatencySettings(percentiles=(0.5, 0.99, 1.0), window=10.0)


def nearest_rank(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(max(math.ceil(q * len(ordered) - 1e-9), 1), len(ordered)) - 1]


def test_an_empty_window_counts_nothing_and_reports_zero_values_in_configured_order() -> None:
    window = LatencyWindow(LatencySettings(percentiles=(0.99, 0.5), window=600.0), start=0.0)
    assert window.result(1.0) == LatencyResult(count=0, percentiles=((0.99, 0.0), (0.5, 0.0)))


def test_one_sample_is_reported_exactly() -> None:
    window = LatencyWindow(SETTINGS, start=0.0)
    window.insert(1_234_567, 1.0)
    assert window.result(1.0) == LatencyResult(
        count=1,
        percentiles=((0.5, 1_234_567.0), (0.99, 1_234_567.0), (1.0, 1_234_567.0)),
        total_count=1,
        total_ns=1_234_567.0,
    )


def test_totals_keep_every_latency_the_window_forgets() -> None:
    """A Prometheus summary's _count and _sum only grow; the window's count does not."""
    first, second = LatencyWindow(SETTINGS, start=0.0), LatencyWindow(SETTINGS, start=0.0)
    first.insert(1000, 1.0)
    first.insert(3000, 2.0)
    second.insert(500, 30.0)
    assert (first.result(30.0).count, first.result(30.0).total_count) == (0, 2)
    assert first.result(30.0).total_ns == 4000.0
    merged = aggregate([first, second], 30.0)
    assert merged is not None
    assert (merged.count, merged.total_count, merged.total_ns) == (1, 3, 4500.0)


def test_quantiles_are_nearest_rank_within_one_percent() -> None:
    window = LatencyWindow(SETTINGS, start=0.0)
    samples = [n * 1_000_000.0 for n in range(1, 101)]  # 1..100 ms
    for value in samples:
        window.insert(value, 1.0)
    result = window.result(1.0)
    assert result.count == 100
    for q, value in result.percentiles:
        exact = nearest_rank(samples, q)
        assert abs(value - exact) <= RELATIVE_ERROR * exact
    assert result.percentiles[2] == (1.0, 100_000_000.0)  # the maximum is kept exactly


def test_a_sample_counts_until_the_half_after_its_own_has_passed() -> None:
    """Window 10 s: halves (0, 5], (5, 10], ...; a half is stale only *after* 5 s."""
    window = LatencyWindow(SETTINGS, start=0.0)
    window.insert(1000, 0.0)
    assert window.result(5.0).count == 1
    assert window.result(10.0).count == 1  # one rotation: now the previous half
    assert window.result(10.001).count == 0  # a second rotation clears it


def test_rotation_keeps_the_previous_half_and_drops_older_ones() -> None:
    window = LatencyWindow(SETTINGS, start=0.0)
    window.insert(1000, 4.0)  # half (0, 5]
    window.insert(2000, 6.0)  # half (5, 10]
    assert window.result(9.0).count == 2
    assert window.result(10.5).count == 1  # (0, 5] is gone, (5, 10] is the previous half
    window.insert(3000, 11.0)
    assert window.result(14.0).count == 2
    assert window.result(100.0).count == 0  # many halves at once


def test_without_a_start_the_first_use_starts_the_window() -> None:
    window = LatencyWindow(SETTINGS)
    window.insert(1000, 1_000.0)
    assert window.result(1_010.0).count == 1
    assert window.result(1_010.5).count == 0


def test_a_clock_that_steps_back_loses_nothing() -> None:
    window = LatencyWindow(SETTINGS, start=100.0)
    window.insert(1000, 101.0)
    window.insert(2000, 50.0)
    assert window.result(40.0).count == 2


def test_a_zero_window_keeps_only_the_present_moment() -> None:
    window = LatencyWindow(LatencySettings(percentiles=(0.5,), window=0.0))
    window.insert(1000, 5.0)
    window.insert(3000, 5.0)
    assert window.result(5.0).count == 2
    assert window.result(5.5).count == 0


def test_negative_latencies_from_a_stepped_clock_stay_within_the_samples() -> None:
    window = LatencyWindow(SETTINGS, start=0.0)
    for value in (-5_000.0, -10.0, 0.0):
        window.insert(value, 1.0)
    result = window.result(1.0)
    assert result.count == 3
    assert all(-5_000.0 <= value <= 0.0 for _, value in result.percentiles)
    assert result.percentiles[2] == (1.0, 0.0)


def test_aggregate_adds_the_windows_and_is_none_without_any() -> None:
    assert aggregate([], 0.0) is None
    one, two = LatencyWindow(SETTINGS, start=0.0), LatencyWindow(SETTINGS, start=0.0)
    one.insert(1_000_000, 1.0)
    two.insert(3_000_000, 1.0)
    two.insert(2_000_000, 1.0)
    result = aggregate([one, two], 1.0)
    assert result is not None
    assert result.count == 3
    assert [q for q, _ in result.percentiles] == [0.5, 0.99, 1.0]
    assert result.percentiles[2][1] == 3_000_000.0
    assert abs(result.percentiles[0][1] - 2_000_000) <= RELATIVE_ERROR * 2_000_000
    assert one.result(1.0).count == 1  # the channels' own windows are untouched


def test_memory_is_bounded_by_the_value_range_not_the_count() -> None:
    window = LatencyWindow(SETTINGS, start=0.0)
    value = 1.0
    while value < 2**63:
        window.insert(value, 1.0)
        window.insert(value, 1.0)
        value *= 1.005
    window.insert(-1.0, 1.0)
    sketch = window.sketch(1.0)
    assert sketch.count > 2 * MAX_BUCKETS
    assert len(sketch.buckets) + 1 <= MAX_BUCKETS


samples_strategy = st.lists(
    st.integers(min_value=1, max_value=10**13).map(float), min_size=1, max_size=300
)
quantiles_strategy = st.lists(
    st.floats(min_value=0.001, max_value=1.0, allow_nan=False), min_size=1, max_size=5
)


@given(samples=samples_strategy, quantiles=quantiles_strategy)
def test_estimates_lie_within_the_samples_and_one_percent_of_the_exact_rank(
    samples: list[float], quantiles: list[float]
) -> None:
    window = LatencyWindow(LatencySettings(tuple(quantiles), 60.0), start=0.0)
    for value in samples:
        window.insert(value, 1.0)
    result = window.result(2.0)
    assert result.count == len(samples)
    assert [q for q, _ in result.percentiles] == quantiles
    for q, value in result.percentiles:
        assert min(samples) <= value <= max(samples)
        exact = nearest_rank(samples, q)
        assert abs(value - exact) <= RELATIVE_ERROR * exact * (1 + 1e-9)


@given(
    st.lists(st.integers(min_value=-(2**70), max_value=2**63).map(float), min_size=1, max_size=200)
)
def test_any_values_stay_within_range_and_bounds(samples: list[float]) -> None:
    sketch = LatencySketch()
    for value in samples:
        sketch.add(value)
    assert len(sketch.buckets) <= MAX_BUCKETS
    for _, value in sketch.quantiles((0.01, 0.5, 1.0)):
        assert min(samples) <= value <= max(samples)


@given(
    times=st.lists(st.integers(min_value=0, max_value=100), min_size=1, max_size=60),
    query_after=st.integers(min_value=0, max_value=30),
)
def test_count_is_the_samples_of_the_current_and_previous_half(
    times: list[int], query_after: int
) -> None:
    """A model of nsqd's rotation: half k is (5k, 5k + 5]; a sample counts while the
    query's half is its own or the next one."""
    times.sort()
    window = LatencyWindow(LatencySettings((0.5,), 10.0), start=0.0)
    for t in times:
        window.insert(1000, float(t))
    now = times[-1] + query_after

    def half(t: int) -> int:
        return max(math.ceil(t / 5) - 1, 0)

    expected = sum(1 for t in times if half(now) - half(t) <= 1)
    assert window.result(float(now)).count == expected


@given(
    steps=st.lists(
        st.tuples(st.integers(min_value=0, max_value=40), st.booleans()), min_size=1, max_size=40
    ),
    window_time=st.sampled_from([0.0, 4.0, 10.0]),
)
def test_equal_versions_mean_equal_results(
    steps: list[tuple[int, bool]], window_time: float
) -> None:
    """The admin stream keeps a topic's snapshot while its figures stand still, a window's
    version among them: whatever FINs and time did in between, two moments with the same
    version have the same result."""
    window = LatencyWindow(LatencySettings((0.5, 1.0), window_time))
    seen: dict[tuple[int, float | None], LatencyResult] = {}
    for at, fin in sorted(steps):
        if fin:
            window.insert(1000.0 * (at + 1), float(at))
        version = window.version(float(at))
        result = window.result(float(at))
        assert seen.setdefault(version, result) == result
