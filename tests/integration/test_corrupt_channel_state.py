"""A channel whose state file is corrupt or missing loses nothing (issue 13, point 5).

docs/storage.md promises such a channel restarts at the oldest record the partition
still holds. nsqd's rule for a *new* channel (later channels start at the tail) must
not apply to a channel that existed before the restart: it would skip its backlog.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol import Fin, Mpub, Rdy
from trionsq.queues.cursor_state import state_path

from .raw import bodies, next_message, publish, quiet

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients

TOPIC = "orders"
FINISHED = {"first": 3, "second": 6}
"""How many of the 10 messages each channel finishes before the restart."""


def corrupt(path: Path, how: str) -> bytes:
    """Damage the state file as ``how`` says; returns what is left in it."""
    damaged = {
        "truncated": path.read_bytes()[:7],
        "garbage": b"\x00\xff not a channel state \x13",
        "empty": b"",
    }.get(how)
    if damaged is None:
        path.unlink()  # "missing": a crash before the channel's first state write
        return b""
    path.write_bytes(damaged)
    return damaged


@pytest.mark.parametrize("damaged", ["first", "second"])
@pytest.mark.parametrize("how", ["truncated", "garbage", "empty", "missing"])
async def test_a_damaged_state_restarts_the_channel_at_the_oldest_record(
    clients: Clients,
    nursery: trio.Nursery,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    damaged: str,
    how: str,
) -> None:
    """The channel named first is the topic's first; second is a later one (the lost case)."""
    autojump_clock.autojump_threshold = 0.1  # real sockets and file threads
    config = NsqdConfig.loopback(data_path=str(tmp_path))
    async with trio.open_nursery() as first_run:
        addresses: BoundAddresses = await first_run.start(serve_nsqd, config)
        sent = await consume_part(clients, addresses)
        first_run.cancel_scope.cancel()  # a graceful stop writes both states
    await clients.close_all()
    path = state_path(tmp_path, TOPIC, 0, damaged)
    damaged_bytes = corrupt(path, how)

    caplog.set_level(logging.INFO, logger="trionsq.storage")
    again: BoundAddresses = await nursery.start(serve_nsqd, config)
    received = {}
    for name in FINISHED:
        reader = await clients.subscribe(again.tcp, TOPIC, name, rdy=100)
        received[name] = bodies(await quiet(reader, 2))

    assert received[damaged] == sent  # everything held, so all it had not finished
    (intact,) = set(FINISHED) - {damaged}
    assert received[intact] == sent[FINISHED[intact] :]  # exactly its own unfinished
    errors = [r for r in caplog.records if r.name == "trionsq.storage" and r.levelno >= 40]
    if how == "missing":
        assert errors == []
        return
    (line,) = errors
    assert str(path) in line.getMessage()
    assert f"{TOPIC}/0/{damaged} restarts at the oldest message held" in line.getMessage()
    assert path.with_name(path.name + ".bad").read_bytes() == damaged_bytes  # kept
    assert path.exists()  # a fresh state was written for the restarted channel


async def consume_part(clients: Clients, addresses: BoundAddresses) -> list[bytes]:
    """Both channels exist before the publish; each finishes its share, the rest of
    what it was sent stays in flight until the broker stops."""
    readers = {name: await clients.subscribe(addresses.tcp, TOPIC, name) for name in FINISHED}
    producer = await clients.connect(addresses.tcp)
    sent = [b"m%d" % i for i in range(10)]
    await publish(producer, Mpub(TOPIC, tuple(sent)))
    for name, reader in readers.items():
        await reader.send(Rdy(10))
        delivered = [await next_message(reader) for _ in sent]
        assert [m.body for m in delivered] == sent
        await reader.send(*(Fin(m.id) for m in delivered[: FINISHED[name]]))
        await quiet(reader, 1)
    await quiet(producer, 2)  # the persister has written both channels' states
    return sent
