"""statsd pushes from a real broker to a real UDP server (nsqd's ``--statsd-*``).

The broker runs under an autojump MockClock: one interval (60 s by default) costs
no real waiting, and the datagrams' times show how a push is spread.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs
import httpx
import pytest
import trio
import trio.testing

from trionsq import NsqdConfig
from trionsq.protocol import Fin, IdentifyRequest, Mpub, Rdy, Req
from trionsq.protocol.client import encode_identify
from trionsq.server.statsd_lines import host_key

from .raw import Clients, next_frame, next_message, ok, publish, start

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from trionsq.nursery_tree import BoundAddresses
    from trionsq.testing import ProtocolClient

PERCENTILES = (0.5, 0.99)
QUIET_FOR_MINUTES = IdentifyRequest(heartbeat_interval=300_000)
"""Connections that stay open through minutes of (mock) silence (with a broker's
``max_heartbeat_interval`` raised; SUB needs heartbeats on)."""
AUTOJUMP = 0.1
"""Real seconds of quiet before the mock clock jumps (the broker's sockets are real)."""


@attrs.define
class StatsdServer:
    """A UDP socket that keeps every datagram it receives, with the (mock) time."""

    sock: trio.socket.SocketType
    received: list[tuple[float, bytes]] = attrs.Factory(list)

    @property
    def address(self) -> str:
        host, port = self.sock.getsockname()
        return f"{host}:{port}"

    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)

    async def run(self) -> None:
        with self.scope:
            while True:
                data = await self.sock.recv(65536)
                self.received.append((trio.current_time(), data))

    def take(self) -> list[tuple[float, bytes]]:
        """What arrived since the last call."""
        taken, self.received = self.received, []
        return taken


@pytest.fixture
async def statsd(nursery: trio.Nursery) -> AsyncIterator[StatsdServer]:
    with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as sock:
        await sock.bind(("127.0.0.1", 0))
        server = StatsdServer(sock)
        nursery.start_soon(server.run)
        yield server
        server.scope.cancel()


def lines_of(datagrams: list[tuple[float, bytes]]) -> list[str]:
    """Every line of the datagrams (each datagram is whole newline-ended lines)."""
    lines: list[str] = []
    for _, data in datagrams:
        assert data.endswith(b"\n"), data
        lines += data.decode().splitlines()
    return lines


def values(lines: list[str], prefix: str) -> dict[str, tuple[int, str]]:
    """name (prefix removed) -> (value, kind) of each line, every name once."""
    found: dict[str, tuple[int, str]] = {}
    for line in lines:
        assert line.startswith(prefix), line
        name, _, rest = line.removeprefix(prefix).rpartition(":")
        value, _, kind = rest.partition("|")
        assert name not in found, name
        found[name] = (int(value), kind)
    return found


async def started(nursery: trio.Nursery, config: NsqdConfig) -> tuple[BoundAddresses, float]:
    """A broker, and the latest time its statsd task can have started (its first
    push comes one interval after that, at the latest)."""
    before = trio.current_time()
    addresses = await start(nursery, config)
    after = trio.current_time()
    assert after - before < 0.5
    return addresses, after


async def producer_of(clients: Clients, address: tuple[str, int]) -> ProtocolClient:
    """A connection for PUB/MPUB that may stay quiet for minutes."""
    client = await clients.connect(address)
    await client.stream.send_all(encode_identify(QUIET_FOR_MINUTES))
    assert ok(await next_frame(client))
    return client


async def stats(http: httpx.AsyncClient) -> dict[tuple[str, str | None], dict[str, object]]:
    """/stats figures by (topic, None) for topics and (topic, channel) for channels."""
    response = await http.get("/stats", params={"format": "json"})
    found: dict[tuple[str, str | None], dict[str, object]] = {}
    for topic in response.json()["topics"]:
        found[topic["topic_name"], None] = topic
        for channel in topic["channels"]:
            found[topic["topic_name"], channel["channel_name"]] = channel
    return found


async def test_pushes_carry_nsqds_names_deltas_and_gauges(
    clients: Clients,
    nursery: trio.Nursery,
    statsd: StatsdServer,
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = AUTOJUMP
    config = NsqdConfig.loopback(
        statsd_address=statsd.address,
        broadcast_address="127.0.0.1",
        e2e_processing_latency_percentiles=PERCENTILES,
        msg_timeout=600.0,
        max_heartbeat_interval=600.0,
    )
    addresses, first_push = await started(nursery, config)
    first_push += config.statsd_interval
    assert addresses.http is not None
    prefix = f"nsq.127_0_0_1_{addresses.http[1]}."
    consumer = await clients.subscribe(
        addresses.tcp, "orders", "billing", identify=QUIET_FOR_MINUTES
    )
    producer = await producer_of(clients, addresses.tcp)
    await publish(producer, Mpub("orders", tuple(b"%d" % i for i in range(5))))
    await consumer.send(Rdy(3))
    taken = [await next_message(consumer) for _ in range(3)]
    await consumer.send(Rdy(0), Fin(taken[0].id), Req(taken[1].id, 600_000))
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{addresses.http[1]}") as http:
        # a partitioned topic: one set of names, every partition summed
        for path, params in (
            ("/topic/create", {"topic": "parts", "partition_num": "2"}),
            ("/channel/create", {"topic": "parts", "channel": "all"}),
            ("/pub", {"topic": "parts", "partition": "0"}),
            ("/pub", {"topic": "parts", "partition": "1"}),
            ("/pub", {"topic": "parts", "partition": "1"}),
        ):
            assert (await http.post(path, params=params, content=b"p")).status_code == 200
        assert statsd.take() == []
        await trio.sleep_until(first_push + config.statsd_interval - 0.5)

        # the first push: one interval after start, spread over the interval less 1 s
        pushed = statsd.take()
        times = [when for when, _ in pushed]
        assert len(pushed) > 1
        step = (config.statsd_interval - 1.0) / len(pushed)
        assert first_push - 0.5 <= times[0] <= first_push
        assert times == pytest.approx([times[0] + i * step for i in range(len(pushed))])
        assert all(len(data) <= config.statsd_udp_packet_size for _, data in pushed)
        first = values(lines_of(pushed), prefix)
        now = await stats(http)

        orders, billing = now["orders", None], now["orders", "billing"]
        assert first["topic.orders.message_count"] == (5, "c")
        assert first["topic.orders.message_bytes"] == (orders["message_bytes"], "c")
        assert first["topic.orders.depth"] == (orders["depth"], "g")
        assert first["topic.orders.backend_depth"] == (0, "g")
        assert first["topic.orders.channel.billing.message_count"] == (5, "c")
        assert first["topic.orders.channel.billing.requeue_count"] == (1, "c")
        assert first["topic.orders.channel.billing.timeout_count"] == (0, "c")
        for gauge, expected in (
            ("depth", 2),
            ("in_flight_count", 1),
            ("deferred_count", 1),
            ("clients", 1),
        ):
            key = "client_count" if gauge == "clients" else gauge
            assert billing[key] == expected
            assert first[f"topic.orders.channel.billing.{gauge}"] == (expected, "g")
        for percent in (50, 99):
            for base in ("topic.orders", "topic.orders.channel.billing"):
                value, kind = first[f"{base}.e2e_processing_latency_{percent}"]
                assert (kind, value >= 0) == ("g", True)
        assert (
            now["parts", None]["depth"] == first["topic.parts.depth"][0] == 0
        )  # all in the channel
        assert first["topic.parts.message_count"] == (3, "c")
        assert first["topic.parts.channel.all.depth"] == (3, "g")
        assert first["topic.parts.channel.all.message_count"] == (3, "c")
        assert not [name for name in first if "partition" in name]
        memory = {name for name in first if name.startswith("mem.")}
        assert memory == {
            f"mem.{name}"
            for name in (
                "heap_objects",
                "heap_idle_bytes",
                "heap_in_use_bytes",
                "heap_released_bytes",
                "gc_pause_usec_100",
                "gc_pause_usec_99",
                "gc_pause_usec_95",
                "next_gc_bytes",
                "gc_runs",
            )
        }
        assert first["mem.gc_runs"][1] == "c"

        # the second push counts what happened since the first
        await publish(producer, Mpub("orders", (b"a", b"b", b"c")))
        await consumer.send(Fin(taken[2].id))
        await trio.sleep_until(first_push + 2 * config.statsd_interval - 0.5)
        second = values(lines_of(statsd.take()), prefix)
        assert second["topic.orders.message_count"] == (3, "c")
        assert first["topic.orders.message_count"][0] + second["topic.orders.message_count"][0] == 8
        assert second["topic.orders.channel.billing.message_count"] == (3, "c")
        assert second["topic.orders.channel.billing.requeue_count"] == (0, "c")
        assert second["topic.orders.channel.billing.depth"] == (5, "g")
        assert second["topic.orders.channel.billing.in_flight_count"] == (0, "g")
        assert second["topic.parts.message_count"] == (0, "c")
        assert second["topic.parts.channel.all.depth"] == (3, "g")
        now = await stats(http)
        assert now["orders", "billing"]["depth"] == 5


@pytest.mark.parametrize("flags_on", [True, False], ids=["flags-on", "flags-off"])
async def test_packet_size_prefix_memory_and_ephemeral_flags(
    clients: Clients,
    nursery: trio.Nursery,
    statsd: StatsdServer,
    autojump_clock: trio.testing.MockClock,
    flags_on: bool,
) -> None:
    autojump_clock.autojump_threshold = AUTOJUMP
    config = NsqdConfig.loopback(
        statsd_address=statsd.address,
        statsd_prefix="stats.%s.x",
        statsd_interval=1.0,  # no spreading: interval less 1 s is nothing
        statsd_udp_packet_size=120,
        statsd_mem_stats=not flags_on,
        statsd_exclude_ephemeral=flags_on,
    )
    addresses, first_push = await started(nursery, config)
    assert addresses.http is not None
    prefix = f"stats.{host_key(config.broadcast_address)}_{addresses.http[1]}.x."
    await clients.subscribe(addresses.tcp, "t", "c")
    await clients.subscribe(addresses.tcp, "t", "c#ephemeral")  # kept while subscribed
    await clients.subscribe(addresses.tcp, "e#ephemeral", "c")
    await trio.sleep_until(first_push + config.statsd_interval + 0.5)
    pushed = statsd.take()
    assert len({when for when, _ in pushed}) == 1  # all at once
    for _, data in pushed:
        assert len(data) <= 120 or data.count(b"\n") == 1
    assert any(len(data) > 60 for _, data in pushed)  # several lines share a datagram
    found = values(lines_of(pushed), prefix)
    assert found["topic.t.channel.c.clients"] == (1, "g")
    ephemeral = {name for name in found if "#ephemeral" in name}
    memory = {name for name in found if name.startswith("mem.")}
    if flags_on:
        assert (ephemeral, memory) == (set(), set())
    else:
        assert "topic.t.channel.c#ephemeral.clients" in ephemeral
        assert "topic.e#ephemeral.channel.c.clients" in ephemeral
        assert len(memory) == 9


async def test_an_unreachable_statsd_costs_one_warning_and_nothing_else(
    clients: Clients,
    nursery: trio.Nursery,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A closed UDP port: the second datagram of a push meets the ICMP refusal."""
    autojump_clock.autojump_threshold = AUTOJUMP
    closed = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    await closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    config = NsqdConfig.loopback(
        statsd_address=f"127.0.0.1:{port}", statsd_interval=1.0, statsd_udp_packet_size=1
    )
    caplog.set_level(logging.DEBUG, logger="trionsq")
    addresses, first_push = await started(nursery, config)
    await clients.subscribe(addresses.tcp, "t", "c")
    await trio.sleep_until(first_push + 3 * config.statsd_interval + 0.5)  # three pushes
    failures = [r for r in caplog.records if "failed to send to statsd" in r.getMessage()]
    assert [r.levelno for r in failures] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("t", (b"still", b"serving")))


async def test_an_address_without_a_port_is_logged_and_the_broker_runs_on(
    clients: Clients,
    nursery: trio.Nursery,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    autojump_clock.autojump_threshold = AUTOJUMP
    config = NsqdConfig.loopback(statsd_address="127.0.0.1", statsd_interval=1.0)
    caplog.set_level(logging.DEBUG, logger="trionsq")
    addresses, first_push = await started(nursery, config)
    await trio.sleep_until(first_push + 2 * config.statsd_interval + 0.5)  # two pushes
    failures = [r for r in caplog.records if "failed to create UDP socket" in r.getMessage()]
    assert [r.levelno for r in failures] == [logging.WARNING, logging.DEBUG]
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("t", (b"still", b"serving")))
