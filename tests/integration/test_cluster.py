"""A cluster of real brokers and real lookupds (the ``nsq_cluster`` fixture).

What a consumer sees through the lookupds' HTTP API as brokers die and come back,
topics and channels appear, lookupds restart; and channel pre-creation (spec
semantics §2): a broker that creates a topic asks the lookupds for its channels.
Time is Trio's MockClock with autojump where a test waits for a broker's timers;
its threshold stays above zero because bytes travel through real sockets.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

import httpx
import pytest
import trio
import trio.testing

from trionsq import NsqdConfig
from trionsq.lookupd.config import LookupdConfig
from trionsq.protocol import Mpub, Rdy, Sub
from trionsq.server.lookupd_peers import PING_INTERVAL, PeerTiming, lookupd_topic_channels
from trionsq.testing import POLL_INTERVAL_AUTOJUMP, wait_until

from .raw import next_message, ok, publish, quiet

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.testing import NsqCluster

    from .raw import Clients

BACKOFF_MAX: Final = PeerTiming().backoff_max
"""A broker reconnects to a lookupd within this (its capped backoff)."""


def autojump(clock: trio.testing.MockClock) -> None:
    clock.autojump_threshold = 0.1  # real sockets: never jump while bytes are in flight


@pytest.fixture
def nsqd_config(request: pytest.FixtureRequest, tmp_path: Path) -> NsqdConfig:
    """In memory, or durable (one directory per broker) when parametrized "durable":
    a restarted broker then has its topics again. Durable brokers run timers (sync,
    persist) that make an autojump clock stop often, so only the test that needs it."""
    if getattr(request, "param", None) == "durable":
        return NsqdConfig.loopback(data_path=str(tmp_path))
    return NsqdConfig.loopback()


@pytest.fixture
def lookupd_config() -> LookupdConfig:
    """A short inactivity timeout: a broker that stopped pinging drops out soon."""
    return LookupdConfig.loopback(inactive_producer_timeout=2 * PING_INTERVAL)


async def get(address: str, path: str) -> dict[str, object]:
    async with httpx.AsyncClient(base_url=f"http://{address}") as http:
        reply = await http.get(path)
    assert reply.status_code == 200, reply.text
    document: dict[str, object] = reply.json()
    return document


async def producer_ports(address: str, topic: str) -> list[int]:
    """The TCP ports of ``/lookup``'s producers (all brokers broadcast 127.0.0.1)."""
    document = await get(address, f"/lookup?topic={topic}")
    producers = document["producers"]
    assert isinstance(producers, list)
    assert all(producer["broadcast_address"] == "127.0.0.1" for producer in producers)
    return sorted(int(producer["tcp_port"]) for producer in producers)


def ports(cluster: NsqCluster, *brokers: int) -> list[int]:
    return sorted(cluster.brokers[index].tcp[1] for index in brokers)


async def publish_to(cluster: NsqCluster, clients: Clients, broker: int, topic: str) -> None:
    client = await clients.connect(cluster.brokers[broker].tcp)
    await publish(client, Mpub(topic, (b"a", b"b")))


# ---------------------------------------------------------------------- discovery


async def test_every_broker_is_a_node_of_every_lookupd(nsq_cluster: NsqCluster) -> None:
    assert len(nsq_cluster.brokers) == 3
    assert len(nsq_cluster.lookupds) == 2
    for address in nsq_cluster.lookupd_http_addresses:
        document = await get(address, "/nodes")
        nodes = document["producers"]
        assert isinstance(nodes, list)
        assert sorted(node["tcp_port"] for node in nodes) == ports(nsq_cluster, 0, 1, 2)


async def test_a_topic_lists_only_the_brokers_that_have_it(
    nsq_cluster: NsqCluster, clients: Clients
) -> None:
    await publish_to(nsq_cluster, clients, 0, "only0")
    await publish_to(nsq_cluster, clients, 1, "both")
    await publish_to(nsq_cluster, clients, 2, "both")
    await nsq_cluster.wait_registered()
    for address in nsq_cluster.lookupd_http_addresses:
        assert await producer_ports(address, "only0") == ports(nsq_cluster, 0)
        assert await producer_ports(address, "both") == ports(nsq_cluster, 1, 2)
        topics = (await get(address, "/topics"))["topics"]
        assert isinstance(topics, list)
        assert sorted(topics) == ["both", "only0"]


async def test_registered_channels_show_up_in_channels(
    nsq_cluster: NsqCluster, clients: Clients
) -> None:
    await clients.subscribe(nsq_cluster.brokers[0].tcp, "t", "by-sub")
    await nsq_cluster.brokers[1].broker.create_channel("t", "by-api")
    await nsq_cluster.wait_registered()
    for address in nsq_cluster.lookupd_http_addresses:
        channels = (await get(address, "/channels?topic=t"))["channels"]
        assert isinstance(channels, list)
        assert sorted(channels) == ["by-api", "by-sub"]
        lookup = await get(address, "/lookup?topic=t")
        assert lookup["channels"] == channels
        assert await producer_ports(address, "t") == ports(nsq_cluster, 0, 1)


@pytest.mark.parametrize("nsqd_config", ["durable"], indirect=True)
async def test_a_stopped_broker_leaves_lookup_and_a_restarted_one_comes_back(
    nsq_cluster: NsqCluster, clients: Clients, mock_clock: trio.testing.MockClock
) -> None:
    autojump(mock_clock)
    for broker in range(3):
        await publish_to(nsq_cluster, clients, broker, "t")
    await nsq_cluster.wait_registered()
    everyone = ports(nsq_cluster, 0, 1, 2)
    for address in nsq_cluster.lookupd_http_addresses:
        assert await producer_ports(address, "t") == everyone

    stopped_at = trio.current_time()
    await nsq_cluster.stop_broker(1)  # returns once no lookupd lists it
    assert trio.current_time() - stopped_at < 1.0  # the closed connection, not a timeout
    for address in nsq_cluster.lookupd_http_addresses:
        assert await producer_ports(address, "t") == ports(nsq_cluster, 0, 2)
        nodes = (await get(address, "/nodes"))["producers"]
        assert isinstance(nodes, list)
        assert len(nodes) == 2

    started_at = trio.current_time()
    await nsq_cluster.start_broker(1)  # same ports; its topic comes back from disk
    assert trio.current_time() - started_at < 1.0  # a new broker dials at once
    for address in nsq_cluster.lookupd_http_addresses:
        assert await producer_ports(address, "t") == everyone


@pytest.mark.nsq_cluster(brokers=2, lookupds=2)
async def test_lookupds_are_independent_and_brokers_register_again_with_a_restarted_one(
    nsq_cluster: NsqCluster, clients: Clients, mock_clock: trio.testing.MockClock
) -> None:
    autojump(mock_clock)
    await publish_to(nsq_cluster, clients, 1, "t")
    await clients.subscribe(nsq_cluster.brokers[1].tcp, "t", "c")
    await nsq_cluster.wait_registered()
    first, second = nsq_cluster.lookupd_http_addresses

    await nsq_cluster.stop_lookupd(0)
    await trio.sleep(3 * PING_INTERVAL)  # past the inactivity timeout: pings go on
    assert await producer_ports(second, "t") == ports(nsq_cluster, 1)
    nodes = (await get(second, "/nodes"))["producers"]
    assert isinstance(nodes, list)
    assert len(nodes) == 2

    restarted_at = trio.current_time()
    restarted = await nsq_cluster.start_lookupd(0, wait=False)
    assert len(restarted.registry) == 0  # nothing survives a lookupd restart
    await nsq_cluster.wait_registered()
    assert trio.current_time() - restarted_at <= BACKOFF_MAX + POLL_INTERVAL_AUTOJUMP
    assert await producer_ports(first, "t") == ports(nsq_cluster, 1)
    assert (await get(first, "/channels?topic=t"))["channels"] == ["c"]
    nodes = (await get(first, "/nodes"))["producers"]
    assert isinstance(nodes, list)
    assert len(nodes) == 2


@pytest.mark.nsq_cluster(brokers=1, lookupds=2)
async def test_pings_keep_brokers_listed_past_the_inactivity_timeout(
    nsq_cluster: NsqCluster, clients: Clients, mock_clock: trio.testing.MockClock
) -> None:
    autojump(mock_clock)
    await publish_to(nsq_cluster, clients, 0, "t")
    await nsq_cluster.wait_registered()
    await trio.sleep(3 * PING_INTERVAL)  # the lookupds' inactivity timeout is 2 pings
    for address in nsq_cluster.lookupd_http_addresses:
        assert await producer_ports(address, "t") == ports(nsq_cluster, 0)


# ---------------------------------------------------------------------- channel pre-creation


def has_channels(cluster: NsqCluster, broker: int, topic: str, *channels: str) -> bool:
    found = cluster.brokers[broker].broker.topics.get(topic)
    return found is not None and all(name in found.partitions[0].channels for name in channels)


async def test_a_new_topic_gets_the_channels_the_lookupds_know(
    nsq_cluster: NsqCluster, clients: Clients
) -> None:
    await clients.subscribe(nsq_cluster.brokers[0].tcp, "t", "c1")
    await nsq_cluster.brokers[0].broker.create_channel("t", "c2")
    await nsq_cluster.wait_registered()
    producer = await clients.connect(nsq_cluster.brokers[1].tcp)
    # the topic is new on broker 1: these are published before any channel exists there
    await publish(producer, Mpub("t", tuple(b"m%d" % i for i in range(10))))
    await wait_until(lambda: has_channels(nsq_cluster, 1, "t", "c1", "c2"), "pre-created")
    for channel in ("c1", "c2"):  # each channel has every message published before
        consumer = await clients.subscribe(nsq_cluster.brokers[1].tcp, "t", channel, rdy=20)
        got = [(await next_message(consumer)).body for _ in range(10)]
        assert sorted(got) == sorted(b"m%d" % i for i in range(10))
        assert await quiet(consumer, 0.2) == []
    await nsq_cluster.wait_registered()  # and broker 1 registered them in turn
    registry = nsq_cluster.lookupds[0].registry
    assert sorted(registry.channels("t")) == ["c1", "c2"]
    topic = nsq_cluster.brokers[1].broker.topics["t"]
    assert not topic.paused


async def test_pre_creation_takes_the_union_of_the_lookupds_and_skips_ephemeral(
    nsq_cluster: NsqCluster, clients: Clients
) -> None:
    first, second = nsq_cluster.lookupd_http_addresses
    async with httpx.AsyncClient() as http:  # channels only one lookupd knows
        created = await http.post(f"http://{first}/channel/create?topic=t&channel=from-first")
        assert created.status_code == 200
        created = await http.post(f"http://{second}/channel/create?topic=t&channel=from-second")
        assert created.status_code == 200
    await clients.subscribe(nsq_cluster.brokers[0].tcp, "t", "gone#ephemeral")
    await nsq_cluster.wait_registered()
    await publish_to(nsq_cluster, clients, 2, "t")
    await wait_until(
        lambda: has_channels(nsq_cluster, 2, "t", "from-first", "from-second"), "pre-created"
    )
    assert sorted(nsq_cluster.brokers[2].broker.topics["t"].partitions[0].channels) == [
        "from-first",
        "from-second",
    ]


async def test_no_connected_lookupd_no_pre_creation_and_an_error_logged(
    nsq_cluster: NsqCluster, clients: Clients, caplog: pytest.LogCaptureFixture
) -> None:
    await clients.subscribe(nsq_cluster.brokers[0].tcp, "t", "c")
    await nsq_cluster.wait_registered()
    await nsq_cluster.stop_lookupd(0)
    await nsq_cluster.stop_lookupd(1)
    await trio.testing.wait_all_tasks_blocked(cushion=0.05)  # the brokers saw the closes
    with caplog.at_level(logging.ERROR, logger="trionsq.lookupd_peers"):
        await publish_to(nsq_cluster, clients, 1, "t")
        await wait_until(
            lambda: any("no available nsqlookupd" in r.getMessage() for r in caplog.records),
            "the error",
        )
    assert has_channels(nsq_cluster, 1, "t")
    assert not has_channels(nsq_cluster, 1, "t", "c")


async def test_pre_created_channels_reach_a_consumer_that_connects_later(
    nsq_cluster: NsqCluster, clients: Clients
) -> None:
    """The cluster case: the consumer reads a channel on broker 0 and finds broker 1
    through a lookupd only after broker 1 got the messages."""
    consumer0 = await clients.subscribe(nsq_cluster.brokers[0].tcp, "orders", "billing", rdy=5)
    await nsq_cluster.wait_registered()
    await publish_to(nsq_cluster, clients, 1, "orders")
    await wait_until(lambda: has_channels(nsq_cluster, 1, "orders", "billing"), "pre-created")
    late = await clients.connect(nsq_cluster.brokers[1].tcp)
    await late.send(Sub("orders", "billing"))
    assert ok((await late.read(1))[0])
    await late.send(Rdy(5))
    got = sorted([(await next_message(late)).body for _ in range(2)])
    assert got == [b"a", b"b"]
    assert await quiet(consumer0, 0.1) == []


async def test_asking_lookupds_takes_the_union_and_names_each_failure(
    nsq_cluster: NsqCluster, clients: Clients
) -> None:
    await clients.subscribe(nsq_cluster.brokers[0].tcp, "t", "c1")
    await clients.subscribe(nsq_cluster.brokers[1].tcp, "t", "c0")
    await nsq_cluster.wait_registered()
    silent = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]  # accepts, never answers
    silent_port = silent.socket.getsockname()[1]
    refusing = trio.socket.socket()  # bound, not listening: the connect is refused
    await refusing.bind(("127.0.0.1", 0))
    refusing_port = refusing.getsockname()[1]
    http = nsq_cluster.brokers[0].http
    assert http is not None
    broker_http = f"127.0.0.1:{http[1]}"  # a broker: /channels is a 404 there
    with trio.fail_after(5):
        channels, failures = await lookupd_topic_channels(
            "t",
            [
                *nsq_cluster.lookupd_http_addresses,
                f"127.0.0.1:{silent_port}",
                f"127.0.0.1:{refusing_port}",
                broker_http,
            ],
            connect_timeout=0.5,
            request_timeout=0.5,
        )
    assert channels == ["c0", "c1"]
    assert len(failures) == 3
    assert f"127.0.0.1:{silent_port}: no reply within 0.5s" in failures
    assert f"{broker_http}: status 404" in failures
    assert any(f.startswith(f"127.0.0.1:{refusing_port}: connect failed") for f in failures)
    await silent.aclose()
    refusing.close()
