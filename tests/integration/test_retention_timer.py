"""``--retention``: consumed segments go once they are that old, and a broker waiting
for that sleeps until the oldest comes of age instead of looking every second
(issue 34: an idle broker must not wake periodically for nothing)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import trio
import trio.testing

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol import Fin, Mpub
from trionsq.testing import wait_until

from .raw import next_message, publish

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients

AUTOJUMP_THRESHOLD = 0.1
"""docs/testing.md's threshold for tests with real sockets."""


def segments(data_path: Path) -> int:
    return len(list(data_path.glob("aged-0.*.log")))


async def consume_many_segments(clients: Clients, addresses: BoundAddresses) -> None:
    """Publish several segments' worth to ``aged`` and finish every message."""
    producer = await clients.connect(addresses.tcp)
    consumer = await clients.subscribe(addresses.tcp, "aged", "c", rdy=2500)
    for batch in range(10):
        await publish(producer, Mpub("aged", tuple(b"%d-%d" % (batch, i) * 50 for i in range(20))))
    for _ in range(200):
        message = await next_message(consumer)
        await consumer.send(Fin(message.id))


async def test_consumed_segments_go_once_retention_has_passed(
    clients: Clients, nursery: trio.Nursery, tmp_path: Path
) -> None:
    config = NsqdConfig.loopback(data_path=str(tmp_path), max_bytes_per_file=4096, retention=0.5)
    addresses: BoundAddresses = await nursery.start(serve_nsqd, config)
    await consume_many_segments(clients, addresses)
    assert segments(tmp_path) > 3
    started = time.monotonic()
    await wait_until(lambda: segments(tmp_path) == 1, "the consumed segments deleted", within=10)
    assert time.monotonic() - started >= 0.4  # not before their time


class PersisterSteps(trio.abc.Instrument):
    """How many times the storage persister's task ran."""

    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("_persist_forever"):
            self.steps += 1


async def test_a_broker_waiting_for_retention_does_not_wake_every_second(
    clients: Clients,
    nursery: trio.Nursery,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = AUTOJUMP_THRESHOLD
    config = NsqdConfig.loopback(data_path=str(tmp_path), max_bytes_per_file=4096, retention=3600.0)
    addresses: BoundAddresses = await nursery.start(serve_nsqd, config)
    await consume_many_segments(clients, addresses)
    await trio.sleep(5)  # the persister has written the positions and released
    steps = PersisterSteps()
    trio.lowlevel.add_instrument(steps)
    started = time.perf_counter()
    try:
        await trio.sleep(600)
    finally:
        trio.lowlevel.remove_instrument(steps)
    real = time.perf_counter() - started
    assert segments(tmp_path) > 3  # too young to go
    assert steps.steps <= 2, f"the persister woke {steps.steps} times in 10 idle minutes"
    assert real < 1.0, f"10 idle minutes took {real:.1f} s of real time"
