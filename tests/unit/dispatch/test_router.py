"""The channel runner under the autojump clock: batches out, exact redelivery times."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing

from trionsq.broker.channel import Channel, Consumer, Delivery
from trionsq.dispatch.router import COLD_READ_RECORDS, ChannelRunner
from trionsq.queues.memory_log import MemoryLog
from trionsq.queues.topic_log import TopicLog

if TYPE_CHECKING:
    from pathlib import Path

WALL = 1_700_000_000_000_000_000


class RecordingOutbox:
    """An in-memory outbox: keeps every batch with the virtual time it arrived."""

    def __init__(self) -> None:
        self.batches: list[tuple[float, list[Delivery]]] = []
        self.closed = False
        self.pushed = trio.Event()

    def push(self, deliveries: list[Delivery]) -> None:
        self.batches.append((trio.current_time(), deliveries))
        self.pushed.set()

    def close(self) -> None:
        self.closed = True

    def topic_now_ext(self) -> None:
        self.closed = True

    def leadership_lost(self) -> None:
        self.closed = True

    def group_owner(self) -> None:
        pass

    def seen(self) -> list[tuple[float, int, int]]:
        return [(t, d.record.internal_id, d.attempts) for t, batch in self.batches for d in batch]


def setup(rdy: int = 10) -> tuple[MemoryLog, Channel, ChannelRunner, RecordingOutbox]:
    log = MemoryLog()
    channel = Channel("c", log, log.start_id, max_msg_timeout=900.0)
    outbox = RecordingOutbox()
    consumer = Consumer(1, msg_timeout=60.0, outbox=outbox)
    consumer.rdy = rdy
    channel.subscribe(consumer)
    runner = ChannelRunner(channel, wall_clock=lambda: WALL)
    return log, channel, runner, outbox


async def test_publish_is_delivered_in_one_batch(autojump_clock: trio.testing.MockClock) -> None:
    log, _, runner, outbox = setup(rdy=500)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        log.append([b"%d" % i for i in range(300)], WALL)
        runner.wake()
        await trio.testing.wait_all_tasks_blocked()
        assert [len(batch) for _, batch in outbox.batches] == [256, 44]  # the batch cap
        assert runner.passes == 2  # the second pass empties the backlog: no idle third pass
        runner.cancel_scope.cancel()


async def test_timeout_redelivers_at_exactly_msg_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, _, runner, outbox = setup()
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        t0 = trio.current_time()
        log.append([b"x"], WALL)
        runner.wake()
        await trio.sleep(61)
        assert outbox.seen() == [(t0, 1, 1), (t0 + 60, 1, 2)]
        runner.cancel_scope.cancel()


async def test_req_with_delay_comes_back_exactly_then(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, channel, runner, outbox = setup()
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        t0 = trio.current_time()
        log.append([b"x"], WALL)
        runner.wake()
        await trio.sleep(5)
        channel.requeue(1, 1, delay=30.0, now=trio.current_time())
        runner.deadline_changed()
        runner.wake()
        await trio.sleep(40)
        assert outbox.seen() == [(t0, 1, 1), (t0 + 35, 1, 2)]
        channel.finish(1, 1)
        runner.cancel_scope.cancel()


async def test_rdy_room_wakes_the_router(autojump_clock: trio.testing.MockClock) -> None:
    log, channel, runner, outbox = setup(rdy=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        log.append([b"a", b"b"], WALL)
        runner.wake()
        await trio.testing.wait_all_tasks_blocked()
        assert outbox.batches == []
        channel.set_rdy(1, 1)
        runner.wake()
        await trio.testing.wait_all_tasks_blocked()
        assert [i for _, i, _ in outbox.seen()] == [1]
        channel.finish(1, 1)
        runner.wake()
        await trio.testing.wait_all_tasks_blocked()
        assert [i for _, i, _ in outbox.seen()] == [1, 2]
        runner.cancel_scope.cancel()


async def test_cancelling_the_channel_scope_ends_its_tasks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, _, runner, _ = setup()
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        assert len(nursery.child_tasks) == 1
        runner.cancel_scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert len(nursery.child_tasks) == 0


async def test_a_timed_out_message_comes_back_behind_the_waiting_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """RDY 1, two messages, the first never finished: at its timeout the second goes
    out, and the first only after that one is finished (nsqd's order, design §6)."""
    log, channel, runner, outbox = setup(rdy=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        t0 = trio.current_time()
        log.append([b"first", b"second"], WALL)
        runner.wake()
        await trio.sleep(61)
        assert outbox.seen() == [(t0, 1, 1), (t0 + 60, 2, 1)]
        await trio.sleep(4)
        channel.finish(1, 2)
        runner.wake()
        await trio.testing.wait_all_tasks_blocked()
        assert outbox.seen()[2:] == [(t0 + 65, 1, 2)]
        runner.cancel_scope.cancel()


async def test_the_chunk_after_a_cold_read_is_read_ahead(tmp_path: Path) -> None:
    """A backlog only on disk: while the router delivers the first chunk, the next
    is read in a thread of its own, so the consumer does not wait for it later.
    Real time: the reads run in worker threads, which a mock clock does not wait for."""
    log, _ = TopicLog.open(tmp_path, "t-0", max_bytes_per_file=1 << 30, cache_records=0)
    log.append([b"%d" % i for i in range(3 * COLD_READ_RECORDS)], WALL)
    channel = Channel("c", log, log.start_id, max_msg_timeout=900.0)
    outbox = RecordingOutbox()
    consumer = Consumer(1, msg_timeout=60.0, outbox=outbox)
    consumer.rdy = 10
    channel.subscribe(consumer)
    runner = ChannelRunner(channel, wall_clock=lambda: WALL)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        runner.wake()
        with trio.fail_after(30):
            await outbox.pushed.wait()  # the first chunk was read, installed and routed
            prefetch = runner._prefetch  # started before that chunk was routed
            if prefetch is not None:  # (else already done)
                await prefetch[1].wait()
        assert [d.record.internal_id for _, batch in outbox.batches for d in batch] == list(
            range(1, 11)
        )
        second = log.chunk_stop(log.start_id)
        assert second is not None
        assert not log.is_cold(second)  # read ahead and installed
        assert log.chunk_stop(second) is not None
        runner.cancel_scope.cancel()
    log.close()
