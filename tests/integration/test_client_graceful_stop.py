"""A consumer that stops gives back what it holds (issue 31, item 2), as go-nsq's Stop:
RDY 0, REQ (delay 0) what was received and not handed out, a bounded grace
(``drain_timeout``) for handlers to finish what they hold, CLS, and CLOSE_WAIT awaited
before the connection closes; on ``break`` out of ``async for``, on cancellation, and
on cancelling handler mode.

Go nsqd keeps a closed connection's messages in flight until msg_timeout (60 s), so
the first tests run against :class:`~.fake_nsqd.FakeNsqd`, which does the same;
the others against trionsq itself."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from trionsq.client import ConsumerSettings, open_consumer, open_producer
from trionsq.testing import wait_until

from .fake_nsqd import FakeNsqd
from .test_trio_client import tcp

if TYPE_CHECKING:
    from trionsq.client import ClientMessage
    from trionsq.nursery_tree import BoundAddresses


@pytest.fixture
async def fake(nursery: trio.Nursery) -> FakeNsqd:
    broker = FakeNsqd()
    await nursery.start(broker.serve)
    return broker


def commands_of(fake: FakeNsqd, connection: int) -> list[str]:
    prefix = f"{connection} "
    return [line.removeprefix(prefix) for line in fake.log if line.startswith(prefix)]


async def all_back_within_a_second(fake: FakeNsqd) -> None:
    with trio.move_on_after(1):
        await wait_until(lambda: not fake.in_flight and not fake.open_connections, "all back")
    held = len(fake.in_flight)
    assert not held, f"{held} of {fake.delivered} delivered still in flight after 1 s"
    assert not fake.open_connections


async def test_a_break_leaves_nothing_in_flight_within_a_second(fake: FakeNsqd) -> None:
    fake.publish(*(b"m%d" % i for i in range(300)))
    async with open_consumer("t", "c", fake.address, max_in_flight=100) as consumer:
        async for message in consumer:
            message.finish()
            break
        await wait_until(lambda: fake.delivered >= 100, "the first 100 delivered")
        broke = time.monotonic()
    await all_back_within_a_second(fake)
    assert time.monotonic() - broke < 1
    assert fake.finished == [b"m0"]
    assert len(fake.requeues) == fake.delivered - 1  # everything else: REQ ...
    assert {delay for _, delay in fake.requeues} == {0}  # ... with delay 0
    commands = commands_of(fake, 1)
    assert commands[:4] == ["IDENTIFY", "SUB", "RDY 100", "FIN"], commands
    assert commands.index("RDY 0") < commands.index("REQ"), commands  # nothing more comes
    assert commands[-2:] == ["CLS", "closed"], commands  # closed once CLOSE_WAIT came


async def test_cancelling_a_consumer_gives_back_what_it_holds(fake: FakeNsqd) -> None:
    fake.publish(*(b"m%d" % i for i in range(300)))
    handled = []
    with trio.move_on_after(0.5):
        async with open_consumer("t", "c", fake.address, max_in_flight=100) as consumer:
            async for message in consumer:
                handled.append(message)  # held, never answered
                if len(handled) == 10:
                    await trio.sleep_forever()  # cancelled here
    await all_back_within_a_second(fake)
    assert fake.finished == []
    assert len(fake.requeues) == fake.delivered
    assert commands_of(fake, 1)[-2:] == ["CLS", "closed"]
    with pytest.raises(RuntimeError):
        handled[0].finish()  # given back by the consumer: too late to answer
    assert consumer.connections == 0


@pytest.fixture
def clock() -> trio.testing.MockClock:
    """Virtual time over real sockets: jump only once the program is idle a moment."""
    return trio.testing.MockClock(autojump_threshold=0.01)


@pytest.mark.parametrize("cancelled", ["handle", "the whole block"])
async def test_cancelling_handler_mode_lets_handlers_finish_within_drain_timeout(
    nsqd: BoundAddresses, clock: trio.testing.MockClock, cancelled: str
) -> None:
    """Four handlers hold a message each: three finish 2 s later, inside the 3 s
    grace; the fourth would take an hour and is cut off at 3 s, its message given
    back. Everything received and not handed to a handler goes back at once. The
    same whether ``handle`` alone is cancelled or the consumer's whole block."""
    async with open_producer(tcp(nsqd)) as producer:
        await producer.publish_many("jobs", [b"slow-%d" % i for i in range(3)] + [b"stuck"])
        await producer.publish_many("jobs", [b"later-%d" % i for i in range(40)])
    started: list[bytes] = []
    finished: list[bytes] = []

    async def handler(message: ClientMessage) -> None:
        started.append(message.body)
        await trio.sleep(3600 if message.body == b"stuck" else 2)
        finished.append(message.body)

    settings = ConsumerSettings(max_in_flight=20, drain_timeout=3.0)
    with trio.move_on_after(1 if cancelled == "the whole block" else math.inf) as block:
        async with open_consumer("jobs", "c", tcp(nsqd), settings=settings) as consumer:
            with trio.move_on_after(1 if cancelled == "handle" else math.inf) as handle:
                await consumer.handle(handler, concurrency=4)
    closed_at = trio.current_time()
    handling = handle if cancelled == "handle" else block
    assert handling.cancelled_caught
    assert sorted(started) == [b"slow-0", b"slow-1", b"slow-2", b"stuck"]
    assert sorted(finished) == [b"slow-0", b"slow-1", b"slow-2"]
    assert 3.0 <= closed_at - handling.deadline < 3.5  # the grace, not the hour
    (channel,) = nsqd.broker.find_channel("jobs", "c")
    assert len(channel.in_flight) == 0
    assert channel.depth == 41  # stuck + 40 later ones, all back
    assert channel.finish_count == 3
    assert channel.requeue_count >= 1  # REQ'd, not left to the connection's end


async def test_a_break_against_trionsq_requeues_and_says_cls(nsqd: BoundAddresses) -> None:
    async with open_producer(tcp(nsqd)) as producer:
        await producer.publish_many("t", [b"m%d" % i for i in range(300)])
    async with open_consumer("t", "c", tcp(nsqd), max_in_flight=100) as consumer:
        async for message in consumer:
            message.finish()
            break
        (channel,) = nsqd.broker.find_channel("t", "c")
        await wait_until(lambda: len(channel.in_flight) == 100, "100 in flight")
    await wait_until(lambda: not channel.in_flight, "every REQ handled")
    assert channel.requeue_count >= 99  # REQ'd (one more came after the FIN: 100)
    assert channel.finish_count == 1
    assert channel.depth == 299


async def test_idle_handlers_stop_at_once(
    nsqd: BoundAddresses, clock: trio.testing.MockClock
) -> None:
    """Eight handler tasks wait for messages at once: every one of them hears the
    stop (each used to renew the shared wake-up event, stranding the others on an
    event nobody set: they never got another message, and the stop waited for the
    whole drain_timeout)."""
    async with open_producer(tcp(nsqd)) as producer:
        await producer.publish_many("idle", [b"a", b"b", b"c"])
    handled: list[bytes] = []

    async def handler(message: ClientMessage) -> None:
        handled.append(message.body)

    settings = ConsumerSettings(drain_timeout=30.0)
    async with open_consumer("idle", "c", tcp(nsqd), settings=settings) as consumer:
        with trio.move_on_after(1) as handling:
            await consumer.handle(handler, concurrency=8)
        stopped_at = trio.current_time()
    assert sorted(handled) == [b"a", b"b", b"c"]
    assert stopped_at - handling.deadline < 0.1
