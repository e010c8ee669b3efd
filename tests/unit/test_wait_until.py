"""trionsq.testing.wait_until (harness.py) beside a task that never rests: a publisher
waking every millisecond keeps some task runnable all the time, and the condition
must still be looked at again (test_secure_etcd's password test failed half its runs
waiting for acknowledgements it already had)."""

from __future__ import annotations

import time

import pytest
import trio
import trio.testing

from trionsq.testing import wait_until


async def _busy(counter: list[int]) -> None:
    """Wakes every millisecond, as a client publishing one message per round trip."""
    while True:
        counter[0] += 1
        await trio.sleep(0.001)


async def test_a_condition_met_beside_a_busy_task_is_seen_at_once() -> None:
    counter = [0]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_busy, counter)
        started = time.monotonic()
        await wait_until(lambda: counter[0] >= 50, "50 wake-ups", within=5)
        took = time.monotonic() - started
        nursery.cancel_scope.cancel()
    assert took < 1.0, took


async def test_a_condition_never_met_beside_a_busy_task_still_times_out() -> None:
    counter = [0]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_busy, counter)
        with pytest.raises(trio.TooSlowError, match="never"):
            await wait_until(lambda: counter[0] < 0, "never", within=0.3)
        nursery.cancel_scope.cancel()


async def test_under_an_autojump_clock_a_later_timer_is_still_reached(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A condition a timer 30 virtual seconds away makes true: the looks between
    still let the clock jump there."""
    done = trio.Event()

    async def later() -> None:
        await trio.sleep(30)
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(later)
        await wait_until(done.is_set, "the timer", within=60)
    assert trio.current_time() >= 30
