"""Long delays survive a crash (issue 20, part 4): a real ``nsqd`` process with
``--max-req-timeout=72h`` takes a DPUB (or a REQ) of two days and is killed with
SIGKILL (or stopped); the same data path, opened by an in-process broker under
Trio's MockClock with a wall clock that follows it, delivers the message at its
time, not before, and not twice. docs/extensions.md "Long delays"."""

from __future__ import annotations

import functools
import signal
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol import Dpub, Fin, IdentifyRequest, Pub, Rdy, Req, Sub
from trionsq.protocol.client import encode_identify
from trionsq.queues.cursor_state import delays_path, load_state, state_path
from trionsq.testing import FollowingWallClock, ProtocolClient, wait_until

from ..integration.raw import message_by, next_frame, next_message, ok, publish
from .test_crash_recovery import start

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

TWO_DAYS_MS = 172_800_000
TWO_DAYS_NS = TWO_DAYS_MS * 1_000_000
DAILY_HEARTBEATS = IdentifyRequest(heartbeat_interval=86_400_000)
"""Two days of virtual time would be thousands of 30-second heartbeats, each an
autojump (nsqd refuses SUB without heartbeats): one a day in process."""


@asynccontextmanager
async def real_nsqd(data_path: Path) -> AsyncIterator[tuple[trio.Process, int]]:
    """A real ``nsqd`` taking delays up to 72h; killed on the way out if the test did
    not stop it."""
    process, port = await start(data_path, "-max-req-timeout=72h")
    try:
        yield process, port
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def consumer(
    address: tuple[str, int], topic: str, rdy: int, identify: IdentifyRequest | None = None
) -> ProtocolClient:
    client = await ProtocolClient.connect(address)
    if identify is not None:
        await client.stream.send_all(encode_identify(identify))
        assert ok(await next_frame(client))
    await client.send(Sub(topic, "ch"))
    assert ok(await next_frame(client))
    if rdy:
        await client.send(Rdy(rdy))
    return client


def confirmed_past(data_path: Path, topic: str, internal_id: int) -> bool:
    try:
        state = load_state(state_path(data_path, topic, 0, "ch"))
    except OSError:
        return False
    return state is not None and state.confirmed_id > internal_id


def parked_bytes(data_path: Path, topic: str, at_least: int) -> bool:
    path = delays_path(data_path, topic, 0, "ch")
    return path.exists() and path.stat().st_size >= at_least


async def stop(process: trio.Process, how: signal.Signals) -> None:
    process.send_signal(how)
    with trio.fail_after(20):
        await process.wait()


async def dpub_then_stop(data_path: Path, how: signal.Signals) -> tuple[int, int]:
    """Run the real broker: a channel, a 2-day DPUB and a plain message after it
    (consumed); stop it. Returns the wall-clock window the DPUB's due time is in."""
    async with real_nsqd(data_path) as (process, port):
        address = ("127.0.0.1", port)
        reader = await consumer(address, "later", 1)
        producer = await ProtocolClient.connect(address)
        before = time.time_ns()
        await publish(producer, Dpub("later", TWO_DAYS_MS, b"in two days"))
        after = time.time_ns()
        await publish(producer, Pub("later", b"now"))
        message = await next_message(reader)
        assert message.body == b"now"
        await reader.send(Fin(message.id))
        # the plain one's FIN persisted, past the parked DPUB (id 1): so nothing
        # but the DPUB is left to come after the crash
        await wait_until(
            functools.partial(confirmed_past, data_path, "later", 2), "FIN saved", within=10
        )
        assert delays_path(data_path, "later", 0, "ch").exists()
        await stop(process, how)
        await trio.aclose_forcefully(reader.stream)
        await trio.aclose_forcefully(producer.stream)
    return before + TWO_DAYS_NS, after + TWO_DAYS_NS


def real_time(clock: trio.testing.MockClock) -> None:
    """While the real process runs: Trio's clock at real speed, no jumps."""
    clock.autojump_threshold = float("inf")
    clock.rate = 1.0


def virtual_time(clock: trio.testing.MockClock) -> None:
    """Once it is gone: jump whenever every task waits (real sockets: 0.1 s idle)."""
    clock.rate = 0.0
    clock.autojump_threshold = 0.1


async def delivered_when(
    nursery: trio.Nursery, data_path: Path, topic: str, earliest_ns: int
) -> tuple[bytes, int, int]:
    """Open ``data_path`` in process, subscribe, and see nothing come before
    ``earliest_ns`` (wall); returns the body, attempts and wall time of the first
    message after it."""
    wall = FollowingWallClock()
    config = NsqdConfig.loopback(
        data_path=str(data_path), max_req_timeout=72 * 3600.0, max_heartbeat_interval=2 * 86400.0
    )
    addresses = await nursery.start(functools.partial(serve_nsqd, config, wall_clock=wall))
    client = await consumer(addresses.tcp, topic, 10, DAILY_HEARTBEATS)
    try:
        quiet_until = trio.current_time() + (earliest_ns - wall()) / 1e9 - 1.0
        early = await message_by(client, quiet_until)
        assert early is None, f"delivered {early!r} before its time"
        message = await message_by(client, trio.current_time() + 3.0)
        assert message is not None, "not delivered at its time"
        arrived = wall()
        await client.send(Fin(message.id))
        return message.body, message.attempts, arrived
    finally:
        await trio.aclose_forcefully(client.stream)


@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "clean"])
async def test_a_two_day_dpub_survives_a_restart_and_fires_at_its_time(
    stop_signal: signal.Signals,
    tmp_path: Path,
    nursery: trio.Nursery,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Killed with SIGKILL, or stopped cleanly with SIGTERM, after a 2-day DPUB."""
    real_time(autojump_clock)
    earliest, latest = await dpub_then_stop(tmp_path, stop_signal)
    virtual_time(autojump_clock)
    body, attempts, arrived = await delivered_when(nursery, tmp_path, "later", earliest)
    assert (body, attempts) == (b"in two days", 1)
    assert earliest <= arrived <= latest + 1_000_000_000


async def test_a_two_day_req_survives_kill_9_and_fires_at_its_time(
    tmp_path: Path, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    real_time(autojump_clock)
    async with real_nsqd(tmp_path) as (process, port):
        address = ("127.0.0.1", port)
        reader = await consumer(address, "retry", 1)
        producer = await ProtocolClient.connect(address)
        await publish(producer, Pub("retry", b"try again in two days"))
        message = await next_message(reader)
        before = time.time_ns()
        await reader.send(Req(message.id, TWO_DAYS_MS))
        await wait_until(
            functools.partial(parked_bytes, tmp_path, "retry", 40), "REQ parked", within=10
        )
        after = time.time_ns()
        await stop(process, signal.SIGKILL)
        await trio.aclose_forcefully(reader.stream)
        await trio.aclose_forcefully(producer.stream)
    virtual_time(autojump_clock)
    earliest, latest = before + TWO_DAYS_NS, after + TWO_DAYS_NS
    body, attempts, arrived = await delivered_when(nursery, tmp_path, "retry", earliest)
    assert (body, attempts) == (b"try again in two days", 2)  # its count was parked too
    assert earliest <= arrived <= latest + 1_000_000_000
