"""Token buckets (broker/rate_limits.py): exact message counts, bytes on debt, and the
rate holding over any window (hypothesis)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from trionsq.broker.rate_limits import (
    BURST_SECONDS,
    MESSAGE_OVERHEAD,
    MIN_WAIT,
    UNLIMITED,
    RateLimit,
    Rates,
    TokenBucket,
    batch_size,
)


def test_a_bucket_starts_full_with_a_tenth_of_a_second() -> None:
    bucket = TokenBucket(1000, now=5.0)
    assert (bucket.capacity, bucket.tokens(5.0)) == (100.0, 100)
    bucket.charge(100)
    assert bucket.tokens(5.0) == 0
    assert math.isclose(bucket.full_at(5.0), 5.0 + BURST_SECONDS)
    assert bucket.tokens(5.05) == 50
    assert bucket.tokens(60.0) == 100  # never more than full


def test_a_slow_bucket_holds_at_least_one_token() -> None:
    bucket = TokenBucket(2, now=0.0)
    assert (bucket.capacity, bucket.tokens(0.0)) == (1.0, 1)
    bucket.charge(1)
    assert bucket.full_at(0.0) == 0.5  # a bucket of one token: full is one token


def test_a_refill_time_is_always_ahead_of_now() -> None:
    """Float rounding must never give a refill time of ``now``: the timer would fire
    again at once with nothing refilled (a busy loop under MockClock)."""
    bucket = TokenBucket(10**12, now=1e6)
    bucket.charge(bucket.capacity + 1e-3)
    assert bucket.full_at(1e6) > 1e6


def test_rates_are_off_at_zero() -> None:
    assert not Rates()
    assert Rates(1, 0)
    assert Rates(0, 1)


def test_a_bytes_limit_lets_a_batch_through_on_debt() -> None:
    limit = RateLimit(Rates(bytes_per_sec=1000), now=0.0)  # 100 bytes of burst
    assert limit.room(0.0) == UNLIMITED
    limit.charge(5, 500)  # more than the bucket: it goes, the bucket owes 400
    assert limit.room(0.0) == 0
    assert math.isclose(limit.refilled_at(0.2), 0.5)  # when the router looks again: full
    assert limit.room(0.4) == 0  # repaid at 0.4, then one byte more is needed
    assert limit.room(0.402) == UNLIMITED


def test_both_limits_together() -> None:
    limit = RateLimit(Rates(msgs_per_sec=100, bytes_per_sec=10_000), now=0.0)
    assert limit.room(0.0) == 10
    limit.charge(10, 10 * (90 + MESSAGE_OVERHEAD))
    assert limit.room(0.0) == 0
    assert limit.refilled_at(0.0) > 0.0


def test_a_publish_is_admitted_while_the_balance_holds_a_token() -> None:
    limit = RateLimit(Rates(msgs_per_sec=10), now=0.0)  # one token
    assert limit.admit(0.0, 50, batch_size([b"x"] * 50))  # a big batch is never refused forever
    assert not limit.admit(0.0, 1, 1)
    assert not limit.admit(4.9, 1, 1)  # 5 s to repay 49, then one token
    assert limit.throttled == 2
    assert limit.admit(5.0, 1, 1)


def test_the_size_of_a_batch() -> None:
    assert batch_size([b"ab", b"c"]) == 3 + 2 * MESSAGE_OVERHEAD


steps = st.lists(
    st.tuples(st.floats(min_value=0.0, max_value=0.3), st.integers(min_value=0, max_value=500)),
    min_size=1,
    max_size=80,
)


@given(rate=st.integers(min_value=1, max_value=100_000), steps=steps)
def test_messages_never_exceed_the_rate_over_any_window(
    rate: int, steps: list[tuple[float, int]]
) -> None:
    """What a routing pass takes (at most the whole tokens) over any window ``t`` is
    at most ``rate * t + capacity``."""
    bucket = TokenBucket(rate, now=0.0)
    now = 0.0
    taken: list[tuple[float, int]] = []
    for elapsed, wanted in steps:
        now += elapsed
        take = min(wanted, bucket.tokens(now))
        bucket.charge(take)
        taken.append((now, take))
    for start in range(len(taken)):
        total = 0
        for end in range(start, len(taken)):
            total += taken[end][1]
            window = taken[end][0] - taken[start][0]
            assert total <= rate * window + bucket.capacity + 1e-6


@given(
    rate=st.integers(min_value=1, max_value=10_000_000),
    steps=steps,
)
def test_debt_never_exceeds_the_rate_plus_one_batch(
    rate: int, steps: list[tuple[float, int]]
) -> None:
    """Admitted on debt (publishes, bytes): over any window ``t`` at most ``rate * t +
    capacity`` plus the last batch, which may have gone into debt."""
    limit = RateLimit(Rates(bytes_per_sec=rate), now=0.0)
    assert limit.bytes is not None
    capacity = limit.bytes.capacity
    now = 0.0
    admitted: list[tuple[float, int]] = []
    for elapsed, size in steps:
        now += elapsed
        if limit.admit(now, 1, size):
            admitted.append((now, size))
    for start in range(len(admitted)):
        total = 0
        for end in range(start, len(admitted)):
            total += admitted[end][1]
            window = admitted[end][0] - admitted[start][0]
            assert total - admitted[end][1] <= rate * window + capacity + 1e-6


@given(
    rate=st.integers(min_value=1, max_value=10**9),
    spent=st.floats(0.0, 1e6),
    now=st.floats(0.0, 1e7),
)
def test_a_bucket_is_full_at_its_full_time(rate: int, spent: float, now: float) -> None:
    """At its full time (when a held-back router looks again) a bucket is full, or
    (float rounding of large times) it is full within a few microseconds: never a
    long extra wait, never a refill time that is not ahead."""
    bucket = TokenBucket(rate, now=now)
    bucket.charge(spent)
    full = bucket.full_at(now)
    assert full >= now
    again = bucket.full_at(full)
    assert again == full or full < again <= full + 2 * MIN_WAIT
