"""FINs that free little of a wide RDY window refill it in one batch, not one by one."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing

from trionsq.broker.subscription import (
    LAZY_REFILL_MIN_RDY,
    READ_GATHER_FINS,
    READ_GATHER_MAX,
    Subscription,
)
from trionsq.dispatch.router import REFILL_DELAY, ChannelRunner

from .test_router import WALL, RecordingOutbox, setup

if TYPE_CHECKING:
    from trionsq.queues.memory_log import MemoryLog


def subscribed(rdy: int) -> tuple[MemoryLog, ChannelRunner, Subscription, RecordingOutbox]:
    """test_router's one consumer, with the subscription its connection would hold."""
    log, channel, runner, outbox = setup(rdy)
    return log, runner, Subscription(runner, channel.consumers[1], lambda *_: None), outbox


async def routed(nursery: trio.Nursery, runner: ChannelRunner, log: MemoryLog, count: int) -> None:
    """The runner started in ``nursery``, ``count`` messages appended and routed."""
    await nursery.start(runner.run)
    log.append([b"%d" % i for i in range(count)], WALL)
    runner.wake()
    await trio.testing.wait_all_tasks_blocked()


async def test_a_fin_into_a_full_window_is_refilled_after_the_delay_not_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The hostile case: a consumer that FINs one message and then waits for more (a
    batching consumer) must still get the next one, REFILL_DELAY later."""
    log, runner, subscription, outbox = subscribed(rdy=100)
    async with trio.open_nursery() as nursery:
        await routed(nursery, runner, log, 300)
        assert [len(batch) for _, batch in outbox.batches] == [100]
        fin_at = trio.current_time()
        subscription.finish(1)
        await trio.testing.wait_all_tasks_blocked()
        assert len(outbox.batches) == 1  # held back: 99 of 100 are still in flight
        await trio.sleep(1)
        assert [(at - fin_at, len(batch)) for at, batch in outbox.batches[1:]] == [
            (REFILL_DELAY, 1)
        ]
        runner.cancel_scope.cancel()


async def test_fins_within_the_delay_are_refilled_in_one_batch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, runner, subscription, outbox = subscribed(rdy=100)
    async with trio.open_nursery() as nursery:
        await routed(nursery, runner, log, 300)
        for internal_id in range(1, 11):  # one FIN per read, as pynsq writes them
            subscription.finish(internal_id)
            await trio.sleep(REFILL_DELAY / 20)
        subscription.finish_many(list(range(11, 21)))
        await trio.sleep(1)
        assert [len(batch) for _, batch in outbox.batches] == [100, 20]
        runner.cancel_scope.cancel()


async def test_fins_that_free_a_quarter_refill_in_the_same_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, runner, subscription, outbox = subscribed(rdy=100)
    async with trio.open_nursery() as nursery:
        await routed(nursery, runner, log, 300)
        subscription.finish_many(list(range(1, 26)))  # 75 left in flight: 3/4 of 100
        assert [len(batch) for _, batch in outbox.batches] == [100, 25]  # no await between
        runner.cancel_scope.cancel()


async def test_below_the_minimum_rdy_each_fin_refills_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, runner, subscription, outbox = subscribed(rdy=LAZY_REFILL_MIN_RDY - 1)
    async with trio.open_nursery() as nursery:
        await routed(nursery, runner, log, 10)
        fin_at = trio.current_time()
        subscription.finish(1)
        await trio.testing.wait_all_tasks_blocked()
        assert [(at - fin_at, len(batch)) for at, batch in outbox.batches[1:]] == [(0, 1)]
        runner.cancel_scope.cancel()


async def test_only_a_slow_client_reading_few_fins_pauses_and_never_starves(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Hostile to the pause: it is READ_GATHER_MAX only where the FINs that can come
    in it at the rate seen are under an eighth of the window (a fast client with a
    small window is never left without messages), and a read of a batch of FINs
    (more than READ_GATHER_FINS) does not pause."""
    log, runner, subscription, _ = subscribed(rdy=400)
    async with trio.open_nursery() as nursery:
        await routed(nursery, runner, log, 4000)
        now = trio.current_time()
        assert subscription.read_pause(now) == 0.0  # no FIN yet
        next_id = 1
        for fins_a_read, interval in ((1, 30e-6), (5, 50e-6), (8, 20e-6), (3, 5e-3), (1, 1e-3)):
            subscription.finish_many(list(range(next_id, next_id + fins_a_read)))
            next_id += fins_a_read
            now += interval
            pause = subscription.read_pause(now)
            assert pause in (0.0, READ_GATHER_MAX)
            assert pause * fins_a_read / interval <= 400 / 8  # what can come meanwhile
            assert (pause > 0) == (fins_a_read / interval * READ_GATHER_MAX <= 400 / 8)
        subscription.finish_many(list(range(next_id, next_id + READ_GATHER_FINS + 1)))
        assert subscription.read_pause(now + 1) == 0.0  # a batch, however slow
        runner.cancel_scope.cancel()


async def test_no_read_pause_below_three_quarters_or_without_fins(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, runner, subscription, _ = subscribed(rdy=100)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        log.append([b"%d" % i for i in range(100)], WALL)  # no backlog to refill from
        runner.wake()
        await trio.testing.wait_all_tasks_blocked()
        now = trio.current_time()
        subscription.read_pause(now)
        assert subscription.read_pause(now + 1e-3) == 0.0  # a read without FINs
        subscription.finish_many(list(range(1, 26)))  # 75 left: not over 3/4
        assert subscription.read_pause(now + 2e-3) == 0.0
        runner.cancel_scope.cancel()
