"""The batcher alone, with a send that the test holds back: publishes gather while
a batch is out, never more than max_batch per send or max_waiting queued, and a
batch refused for one body's fault is split so only that body fails."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trionsq.client.batching import Batcher
from trionsq.client.connection import NsqError
from trionsq.protocol.client import ErrorReply
from trionsq.protocol.errors import ProtocolError


class Broker:
    """Records batches; holds each send until released; refuses empty bodies."""

    def __init__(self) -> None:
        self.batches: list[tuple[bytes, ...]] = []
        self.release = trio.Event()

    async def send(self, batch: tuple[bytes, ...]) -> None:
        self.batches.append(batch)
        await self.release.wait()
        if b"" in batch:
            raise NsqError(ErrorReply(ProtocolError("E_BAD_MESSAGE", "body size 0", fatal=False)))


async def test_publishes_gather_behind_the_batch_that_is_out() -> None:
    broker = Broker()
    batcher = Batcher(broker.send, max_batch=4, max_waiting=6)
    failures: list[str] = []

    async def publish(body: bytes) -> None:
        try:
            await batcher.publish(body)
        except NsqError as error:
            failures.append(error.code)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(batcher.run)
        nursery.start_soon(publish, b"first")
        await trio.testing.wait_all_tasks_blocked()
        assert broker.batches == [(b"first",)]  # alone: no waiting when idle
        nursery.start_soon(publish, b"")  # first in the queue: in the next full batch
        await trio.testing.wait_all_tasks_blocked()
        for i in range(8):
            if i != 2:
                nursery.start_soon(publish, b"m%d" % i)
        await trio.testing.wait_all_tasks_blocked()
        assert batcher.waiting == 6  # two publishers wait for room
        assert batcher.peak_waiting == 6
        broker.release.set()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    sent = broker.batches[1:]
    assert max(len(batch) for batch in sent) == 4
    assert len(sent[0]) == 4
    assert b"" in sent[0]
    refused = 0
    split = sent[refused + 1 : refused + 1 + len(sent[refused])]
    assert split == [(body,) for body in sent[refused]]  # one by one
    stored = [
        body for i, batch in enumerate(sent) if i != refused and b"" not in batch for body in batch
    ]
    assert sorted(stored) == sorted(b"m%d" % i for i in range(8) if i != 2)
    assert failures == ["E_BAD_MESSAGE"]
    assert batcher.split_batches == 1


def test_limits_must_make_sense() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        Batcher(Broker().send, max_batch=10, max_waiting=5)
