"""Routing under rate limits, under the autojump clock: bursts at the refill times,
woken by the expiry timer (no busy loop), and nothing changed without limits."""

from __future__ import annotations

import trio
import trio.testing

from trionsq.broker.channel import Consumer
from trionsq.broker.rate_limits import RateLimit, Rates
from trionsq.dispatch.router import ChannelRunner

from .test_router import WALL, RecordingOutbox, setup


def burst_times(outbox: RecordingOutbox, t0: float) -> list[tuple[float, int]]:
    return [(round(t - t0, 6), len(batch)) for t, batch in outbox.batches]


async def test_a_channel_limit_sends_a_burst_each_refill(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, channel, runner, outbox = setup(rdy=1000)
    channel.rate_limit = RateLimit(Rates(msgs_per_sec=100), trio.current_time())  # 10 a burst
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        t0 = trio.current_time()
        log.append([b"%d" % i for i in range(35)], WALL)
        runner.wake()
        await trio.sleep(1)
        assert burst_times(outbox, t0) == [(0.0, 10), (0.1, 10), (0.2, 10), (0.3, 5)]
        assert runner.passes <= 2 * 4 + 1  # one pass a burst, and at most one empty after it
        assert runner.timer.wakeups == 3  # the refills woke the router, nothing else did
        assert channel.refill_at is None  # nothing left to wait for
        runner.cancel_scope.cancel()


async def test_a_consumer_limit_holds_only_that_consumer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, channel, runner, outbox = setup(rdy=1000)
    slow = Consumer(2, msg_timeout=60.0, rate_limit=RateLimit(Rates(10), trio.current_time()))
    slow.rdy = 1000
    channel.subscribe(slow)
    slow_outbox = RecordingOutbox()
    runner.outboxes[2] = slow_outbox
    assert channel.limited_consumers == 1
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        t0 = trio.current_time()
        log.append([b"%d" % i for i in range(100)], WALL)
        runner.wake()
        await trio.sleep(0.5)
        assert burst_times(slow_outbox, t0) == [(0.0, 1)]  # one token, refilled at 0.1 ...
        assert sum(len(batch) for _, batch in outbox.batches) == 99  # ... but nothing left
        channel.unsubscribe(2)
        assert channel.limited_consumers == 0
        runner.cancel_scope.cancel()


async def test_a_refill_with_no_work_left_does_not_wake_the_router(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, channel, runner, outbox = setup(rdy=1000)
    channel.rate_limit = RateLimit(Rates(msgs_per_sec=100), trio.current_time())
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        log.append([b"%d" % i for i in range(10)], WALL)  # exactly one burst
        runner.wake()
        await trio.sleep(5)
        assert len(outbox.batches) == 1
        assert (channel.refill_at, runner.timer.wakeups) == (None, 0)
        runner.cancel_scope.cancel()


async def test_a_bytes_limit_sends_on_debt_and_waits_it_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, channel, runner, outbox = setup(rdy=1000)
    channel.rate_limit = RateLimit(Rates(bytes_per_sec=10_000), trio.current_time())
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        t0 = trio.current_time()
        log.append([b"x" * 66] * 30, WALL)  # 100 bytes each with the frame: 3,000 in all
        runner.wake()
        await trio.testing.wait_all_tasks_blocked()
        log.append([b"x" * 66] * 5, WALL)
        runner.wake()
        await trio.sleep(1)
        # the bucket (1,000 bytes) held a token: all 30 went on debt (-2,000), and it
        # is full again (1,000) 0.3 s later
        assert burst_times(outbox, t0) == [(0.0, 30), (0.3, 5)]
        runner.cancel_scope.cancel()


def test_a_runner_without_limits_has_no_refill_deadline() -> None:
    _, channel, runner, _ = setup()
    assert isinstance(runner, ChannelRunner)
    assert (channel.rate_limit, channel.limited_consumers, channel.refill_at) == (None, 0, None)
    assert channel.next_deadline() is None
