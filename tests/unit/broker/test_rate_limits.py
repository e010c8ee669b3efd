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
    STEP_SECONDS,
    UNLIMITED,
    RateLimit,
    Rates,
    TokenBucket,
    batch_size,
)


def test_a_bucket_starts_full_with_a_twentieth_of_a_second() -> None:
    bucket = TokenBucket(1000, now=5.0)
    assert (bucket.capacity, bucket.step, bucket.tokens(5.0)) == (50.0, 10.0, 50)
    bucket.charge(50)
    assert bucket.tokens(5.0) == 0
    assert math.isclose(bucket.holds_at(5.0, bucket.capacity), 5.0 + BURST_SECONDS)
    assert math.isclose(bucket.holds_at(5.0, bucket.step), 5.0 + STEP_SECONDS)
    assert bucket.tokens(5.025) == 25
    assert bucket.tokens(60.0) == 50  # never more than full


def test_a_slow_bucket_holds_at_least_one_token() -> None:
    bucket = TokenBucket(2, now=0.0)
    assert (bucket.capacity, bucket.step, bucket.tokens(0.0)) == (1.0, 1.0, 1)
    bucket.charge(1)
    assert bucket.holds_at(0.0, bucket.capacity) == 0.5  # a bucket of one token: full is one token


def test_a_refill_time_is_always_ahead_of_now() -> None:
    """Float rounding must never give a refill time of ``now``: the timer would fire
    again at once with nothing refilled (a busy loop under MockClock)."""
    bucket = TokenBucket(10**12, now=1e6)
    bucket.charge(bucket.capacity + 1e-3)
    assert bucket.holds_at(1e6, bucket.capacity) > 1e6


def test_rates_are_off_at_zero() -> None:
    assert not Rates()
    assert Rates(1, 0)
    assert Rates(0, 1)


def test_a_bytes_limit_lets_a_batch_through_on_debt() -> None:
    limit = RateLimit(Rates(bytes_per_sec=1000), now=0.0)  # 50 bytes of burst, steps of 10
    assert limit.room(0.0) == UNLIMITED  # no size known yet
    limit.charge(5, 500)  # more than the bucket: it goes, the bucket owes 450
    assert limit.room(0.0) == 0
    assert math.isclose(limit.ready_at(0.2), 0.46)  # when a router or producer goes on: a step
    assert math.isclose(limit.open_at(0.2), 0.451)  # when a refused one may come back
    assert limit.room(0.45) == 0  # repaid at 0.45, then one byte more is needed
    assert limit.room(0.46) == 1  # 10 bytes: one message of the last mean size (100), on debt
    assert limit.room(1.0) == 1
    limit.charge(2, 20)  # small ones now: 10 bytes each
    assert limit.room(1.0) == 3  # 30 of the 50 bytes left: three such messages


def test_both_limits_together() -> None:
    limit = RateLimit(Rates(msgs_per_sec=100, bytes_per_sec=10_000), now=0.0)
    assert limit.room(0.0) == 5
    limit.charge(5, 5 * (90 + MESSAGE_OVERHEAD))
    assert limit.room(0.0) == 0
    assert limit.ready_at(0.0) > 0.0


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
    full = bucket.holds_at(now, bucket.capacity)
    assert full >= now
    again = bucket.holds_at(full, bucket.capacity)
    assert again == full or full < again <= full + 2 * MIN_WAIT


@given(
    rate=st.integers(min_value=1, max_value=10**9),
    spent=st.floats(0.0, 1e6),
    now=st.floats(0.0, 1e7),
)
def test_a_limit_holds_a_step_at_its_ready_time(rate: int, spent: float, now: float) -> None:
    """A held-back router looks again when the bucket holds its step (a hundredth of a
    second of the rate, at least a token): it then has that much to send, and never
    waits longer than the step takes to refill after the debt is repaid."""
    limit = RateLimit(Rates(msgs_per_sec=rate), now=now)
    assert limit.msgs is not None
    limit.charge(math.floor(spent), 0)
    ready = limit.ready_at(now)
    assert ready >= now
    bucket = limit.msgs
    if ready > now:
        assert ready <= now + (bucket.step - bucket.balance) / rate + 2 * MIN_WAIT
        assert bucket.tokens(ready + 2 * MIN_WAIT) >= math.floor(bucket.step)
