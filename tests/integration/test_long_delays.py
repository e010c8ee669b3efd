"""Long delays over real sockets (issue 20, part 4): ``--max-req-timeout`` bounds
DPUB, REQ and HTTP ``defer`` at any size with nsqd's errors, and a parked message
pins no segment: retention deletes what was consumed around it while it still fires
at its time, counted in /stats ``deferred_count`` meanwhile. docs/extensions.md."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Protocol

import attrs
import trio

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol import Dpub, Fin, IdentifyRequest, Mpub, Pub, Req
from trionsq.queues.cursor_state import delays_path, load_state, save_state, state_path
from trionsq.testing import FollowingWallClock

from .raw import (
    http,
    message_by,
    next_error,
    next_message,
    publish,
    quiet,
    start,
)
from .test_durable import count_segments

if TYPE_CHECKING:
    from collections.abc import Awaitable
    from pathlib import Path

    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients

HOURS_72_MS = 72 * 3_600_000
DAY = 86_400.0
DAILY_HEARTBEATS = IdentifyRequest(heartbeat_interval=86_400_000)
"""Days of virtual time in 30-second heartbeats would be thousands of autojumps."""


async def test_a_72h_maximum_holds_for_dpub_req_and_http_defer(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery, NsqdConfig.loopback(max_req_timeout=72 * 3600.0))
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Dpub("t", HOURS_72_MS, b"at the limit"), Pub("t", b"plain"))
    over = await clients.connect(addresses.tcp)
    await over.send(Dpub("t", HOURS_72_MS + 1, b"over"))
    error = await next_error(over)
    assert (
        error.error.text == f"E_INVALID DPUB timeout {HOURS_72_MS + 1} out of range 0-{HOURS_72_MS}"
    )
    at_limit = await http(addresses, "POST", f"/pub?topic=t&defer={HOURS_72_MS}", b"m")
    assert at_limit.status_code == 200
    too_far = await http(addresses, "POST", f"/pub?topic=t&defer={HOURS_72_MS + 1}", b"m")
    assert (too_far.status_code, too_far.json()["message"]) == (400, "INVALID_DEFER")
    consumer = await clients.subscribe(addresses.tcp, "t", "c", rdy=1)
    message = await next_message(consumer)
    assert message.body == b"plain"
    await consumer.send(Req(message.id, HOURS_72_MS + 5))  # clamped, as nsqd does
    assert await quiet(consumer, 0.2) == []
    stats = (await http(addresses, "GET", "/stats?format=json&topic=t")).json()
    assert stats["topics"][0]["channels"][0]["deferred_count"] == 3


async def test_the_default_maximum_stays_an_hour(clients: Clients, nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await producer.send(Dpub("t", 172_800_000, b"two days"))
    error = await next_error(producer)
    assert error.error.text == "E_INVALID DPUB timeout 172800000 out of range 0-3600000"
    refused = await http(addresses, "POST", "/pub?topic=t&defer=172800000", b"m")
    assert (refused.status_code, refused.json()["message"]) == (400, "INVALID_DEFER")


class Serve(Protocol):
    """``serve_nsqd`` with its configuration bound."""

    def __call__(self, *, task_status: trio.TaskStatus[BoundAddresses]) -> Awaitable[None]: ...


async def stoppable(nursery: trio.Nursery, serve: Serve) -> tuple[BoundAddresses, trio.CancelScope]:
    """``serve`` started in a cancel scope of its own: cancelling it is a clean stop,
    after which the same ``serve`` may start again on the same data."""
    scope = trio.CancelScope()

    async def run(task_status: trio.TaskStatus[BoundAddresses]) -> None:
        with scope:
            await serve(task_status=task_status)

    addresses: BoundAddresses = await nursery.start(run)
    return addresses, scope


async def test_parked_messages_pin_no_segment_and_still_fire_after_a_restart(
    clients: Clients,
    nursery: trio.Nursery,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = 0.1  # real sockets and file threads
    wall = FollowingWallClock()

    config = NsqdConfig.loopback(
        data_path=str(tmp_path),
        max_bytes_per_file=4096,
        max_req_timeout=72 * 3600.0,
        max_heartbeat_interval=2 * DAY,
    )
    serve = functools.partial(serve_nsqd, config, wall_clock=wall)
    addresses, first_run = await stoppable(nursery, serve)
    consumer = await clients.subscribe(
        addresses.tcp, "spent", "c", rdy=2500, identify=DAILY_HEARTBEATS
    )
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("spent", b"req me"), Dpub("spent", 172_800_000, b"dpub"))
    first = await next_message(consumer)
    assert first.body == b"req me"
    await consumer.send(Req(first.id, 172_800_000))
    for batch in range(20):
        await publish(producer, Mpub("spent", tuple(b"%d-%d" % (batch, i) * 20 for i in range(10))))
    assert count_segments(tmp_path) > 5
    for _ in range(200):
        bulk = await next_message(consumer)
        await consumer.send(Fin(bulk.id))
    await quiet(consumer, 3)  # the persister saves the position, then releases
    assert count_segments(tmp_path) == 1  # both parked messages pin nothing
    assert delays_path(tmp_path, "spent", 0, "c").stat().st_size > 0
    stats = (await http(addresses, "GET", "/stats?format=json&topic=spent")).json()
    channel = stats["topics"][0]["channels"][0]
    assert (channel["deferred_count"], channel["depth"], channel["in_flight_count"]) == (2, 0, 0)
    first_run.cancel()  # a clean stop: the log no longer holds either record
    await trio.sleep(1)
    addresses = await nursery.start(serve)
    consumer = await clients.subscribe(
        addresses.tcp, "spent", "c", rdy=2500, identify=DAILY_HEARTBEATS
    )
    assert await message_by(consumer, trio.current_time() + 2 * DAY - 60) is None
    fired: list[bytes] = []
    for _ in range(2):
        message = await message_by(consumer, trio.current_time() + 3 * DAY)
        assert message is not None
        fired.append(message.body)
        await consumer.send(Fin(message.id))
    assert sorted(fired) == [b"dpub", b"req me"]
    assert 2 * DAY - 5 <= trio.current_time() - wall.start_trio <= 2 * DAY + 5
    await quiet(consumer, 2)
    stats = (await http(addresses, "GET", "/stats?format=json&topic=spent")).json()
    assert stats["topics"][0]["channels"][0]["deferred_count"] == 0
    assert count_segments(tmp_path) == 1


async def test_empty_and_delete_let_parked_messages_go(
    clients: Clients, nursery: trio.Nursery, tmp_path: Path
) -> None:
    config = NsqdConfig.loopback(data_path=str(tmp_path), max_req_timeout=72 * 3600.0)
    addresses = await start(nursery, config)
    assert (await http(addresses, "POST", "/topic/create?topic=t")).status_code == 200
    assert (await http(addresses, "POST", "/channel/create?topic=t&channel=c")).status_code == 200
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Dpub("t", 172_800_000, b"a"), Dpub("t", 172_800_000, b"b"))
    path = delays_path(tmp_path, "t", 0, "c")
    parked_size = path.stat().st_size
    assert parked_size > 100
    assert (await http(addresses, "POST", "/channel/empty?topic=t&channel=c")).status_code == 200
    assert path.stat().st_size < 10  # only its magic is left
    stats = (await http(addresses, "GET", "/stats?format=json&topic=t")).json()
    assert stats["topics"][0]["channels"][0]["deferred_count"] == 0
    await publish(producer, Dpub("t", 172_800_000, b"c"))
    assert path.stat().st_size > 10
    assert (await http(addresses, "POST", "/channel/delete?topic=t&channel=c")).status_code == 200
    assert not path.exists()


async def test_the_delay_store_wins_over_a_deferral_in_the_state_file(
    clients: Clients,
    nursery: trio.Nursery,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A crash between a long REQ of a message that had a short deferral and the next
    state write leaves both: the parked one (the later) holds, delivered once."""
    autojump_clock.autojump_threshold = 0.1
    wall = FollowingWallClock()

    config = NsqdConfig.loopback(
        data_path=str(tmp_path), max_req_timeout=72 * 3600.0, max_heartbeat_interval=2 * DAY
    )
    serve = functools.partial(serve_nsqd, config, wall_clock=wall)
    addresses, first_run = await stoppable(nursery, serve)
    consumer = await clients.subscribe(addresses.tcp, "t", "c", rdy=1, identify=DAILY_HEARTBEATS)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("t", b"m"))
    message = await next_message(consumer)
    await consumer.send(Req(message.id, 172_800_000))
    await quiet(consumer, 2)
    first_run.cancel()
    await trio.sleep(1)
    path = state_path(tmp_path, "t", 0, "c")
    saved = load_state(path)
    assert saved is not None
    assert (saved.confirmed_id, saved.deferred) == (2, ())  # parked: finished for the cursor
    soon = wall() + 10_000_000_000
    save_state(path, attrs.evolve(saved, confirmed_id=1, finished=(), deferred=((soon, 1),)))
    addresses = await nursery.start(serve)
    consumer = await clients.subscribe(addresses.tcp, "t", "c", rdy=5, identify=DAILY_HEARTBEATS)
    assert await message_by(consumer, trio.current_time() + 2 * DAY - 60) is None
    again = await message_by(consumer, trio.current_time() + 120)
    assert again is not None
    assert (again.body, again.attempts) == (b"m", 2)
    await consumer.send(Fin(again.id))
    assert await message_by(consumer, trio.current_time() + 60) is None  # once
