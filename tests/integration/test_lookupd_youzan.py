"""Youzan's lookupd additions standalone, with real brokers and a real lookupd.

Spec http-api.md §5 (create, lookup with access/metainfo/partition, listlookup,
meta update, delete) and the decided rows of tcp-protocol.md §9: topics created
through the lookupd are placed on registered brokers, which are told to create
them, and clients publish and consume each partition on its placed broker.
"""

from __future__ import annotations

import socket
from collections import Counter
from typing import TYPE_CHECKING, Final, Unpack

import httpx
import orjson
import pytest
import trio

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol import ExtMessage, IdentifyRequest, PubExt, Rdy, Sub
from trionsq.protocol.client import encode_identify

from .lookupd_peers import RawPeers, nsqd_info, peers, start_lookupd
from .raw import bodies, next_frame, ok, publish, quiet

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from trionsq.config import NsqdOptions
    from trionsq.lookupd.server import LookupdAddresses
    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients

__all__ = ["peers"]  # the fixture

V1_ACCEPT: Final = {"Accept": "application/vnd.nsq; version=1.0"}
GUARD: Final = 10.0
PEER_KEYS: Final = [
    "id",
    "remote_address",
    "hostname",
    "broadcast_address",
    "tcp_port",
    "http_port",
    "version",
    "distributed_id",
]


@pytest.fixture
async def lookupd(nursery: trio.Nursery) -> LookupdAddresses:
    return await start_lookupd(nursery)


@pytest.fixture
async def http(lookupd: LookupdAddresses) -> AsyncIterator[httpx.AsyncClient]:
    host, port = lookupd.http
    async with httpx.AsyncClient(
        base_url=f"http://{host}:{port}", timeout=GUARD, headers=V1_ACCEPT
    ) as client:
        yield client


async def wait_until(condition: Callable[[], bool]) -> None:
    """Poll in-process state another component changes (no event to wait on)."""
    for _ in range(int(GUARD / 0.01)):
        if condition():
            return
        await trio.sleep(0.01)
    raise AssertionError("condition not met in time")


def broker_config(lookupd: LookupdAddresses, **changes: Unpack[NsqdOptions]) -> NsqdConfig:
    options: NsqdOptions = {"lookupd_tcp_addresses": lookupd.tcp, "broadcast_address": "127.0.0.1"}
    options.update(changes)
    return NsqdConfig.loopback(**options)


async def start_broker(
    nursery: trio.Nursery, config: NsqdConfig, scope: trio.CancelScope | None = None
) -> BoundAddresses:
    """A broker in its own cancel scope (cancel it to stop just that broker)."""
    own = scope if scope is not None else trio.CancelScope()

    async def run(*, task_status: trio.TaskStatus[BoundAddresses]) -> None:
        with own:
            await serve_nsqd(config, task_status=task_status)

    addresses: BoundAddresses = await nursery.start(run)
    return addresses


def active(lookupd: LookupdAddresses) -> int:
    return len(lookupd.registry.active_peers(trio.current_time()))


async def start_brokers(
    nursery: trio.Nursery, lookupd: LookupdAddresses, count: int
) -> list[BoundAddresses]:
    brokers = [await start_broker(nursery, broker_config(lookupd)) for _ in range(count)]
    await wait_until(lambda: active(lookupd) == count)
    return brokers


def node(addresses: BoundAddresses) -> str:
    assert addresses.http is not None
    return f"127.0.0.1:{addresses.http[1]}"


def by_node(brokers: list[BoundAddresses]) -> dict[str, BoundAddresses]:
    return {node(b): b for b in brokers}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def lookup(http: httpx.AsyncClient, query: str) -> httpx.Response:
    """A /lookup that must answer 200 (``.json()`` gives the document)."""
    response = await http.get(f"/lookup?{query}")
    assert response.status_code == 200, response.content
    return response


# ---------------------------------------------------------------- create and place


async def test_create_places_six_ext_partitions_two_per_broker_and_each_broker_has_the_topic(
    nursery: trio.Nursery, lookupd: LookupdAddresses, http: httpx.AsyncClient
) -> None:
    brokers = await start_brokers(nursery, lookupd, 3)
    response = await http.post("/topic/create?topic=t&partition_num=6&replicator=1&extend=true")
    assert response.status_code == 200
    assert response.content == b""
    managed = lookupd.catalog.topics["t"]
    assert Counter(b.node for b in managed.placement) == dict.fromkeys(by_node(brokers), 2)
    for broker in brokers:  # told before the answer: all N partitions, ext
        topic = broker.broker.topics["t"]
        assert topic.ext
        assert len(topic.partitions) == 6
    # the same create again is idempotent and keeps the placement
    assert (
        await http.post("/topic/create?topic=t&partition_num=6&replicator=1&extend=true")
    ).status_code == 200
    assert lookupd.catalog.topics["t"].placement == managed.placement


async def test_lookup_with_metainfo_and_write_access_lists_every_partition_and_the_meta(
    nursery: trio.Nursery, lookupd: LookupdAddresses, http: httpx.AsyncClient
) -> None:
    brokers = by_node(await start_brokers(nursery, lookupd, 3))
    await http.post("/topic/create?topic=t&partition_num=6&replicator=2&extend=true")
    response = await http.get("/lookup?topic=t&access=w&metainfo=true")
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    document = orjson.loads(response.content)
    assert list(document) == ["channels", "producers", "partitions", "meta"]
    assert document["channels"] == []
    assert document["meta"] == {
        "partition_num": 6,
        "replica": 2,
        "extend_support": True,
        "ordered": False,
        "multi_part": False,
        "disable_channel_auto_create": False,
    }
    placement = lookupd.catalog.topics["t"].placement
    assert list(document["partitions"]) == [str(pid) for pid in range(6)]
    for pid, peer in document["partitions"].items():
        assert list(peer) == PEER_KEYS
        broker = brokers[placement[int(pid)].node]
        assert (peer["broadcast_address"], peer["tcp_port"]) == broker.tcp
        assert peer["id"] == peer["remote_address"]
    assert sorted(p["tcp_port"] for p in document["producers"]) == sorted(
        b.tcp[1] for b in brokers.values()
    )
    # the legacy envelope, negotiated as for nsqlookupd's /lookup
    legacy = await http.get(
        "/lookup?topic=t&access=r", headers={"Accept": "application/vnd.nsq; version=0.3"}
    )
    wrapped = orjson.loads(legacy.content)
    assert (wrapped["status_code"], wrapped["status_txt"]) == (200, "OK")
    assert "meta" not in wrapped["data"]
    assert len(wrapped["data"]["partitions"]) == 6
    # one partition only
    one = (await lookup(http, "topic=t&partition=4")).json()
    assert list(one["partitions"]) == ["4"]
    assert len(one["producers"]) == 1


async def test_publish_to_each_partition_on_its_broker_and_consume_every_partition(
    nursery: trio.Nursery,
    lookupd: LookupdAddresses,
    http: httpx.AsyncClient,
    clients: Clients,
) -> None:
    await start_brokers(nursery, lookupd, 3)
    await http.post("/topic/create?topic=t&partition_num=6&replicator=1&extend=true")
    document = (await lookup(http, "topic=t&access=w&metainfo=true")).json()
    partitions = document["partitions"]
    addresses = {
        int(pid): (str(peer["broadcast_address"]), int(peer["tcp_port"]))
        for pid, peer in partitions.items()
    }
    consumers = []
    for pid, address in addresses.items():
        consumer = await clients.connect(address)
        await consumer.stream.send_all(encode_identify(IdentifyRequest(extend_support=True)))
        assert ok(await next_frame(consumer))
        await consumer.send(Sub("t", "c", pid))
        assert ok(await next_frame(consumer))
        consumer.decoder.extended = True
        await consumer.send(Rdy(10))
        consumers.append((pid, consumer))
    for pid, address in addresses.items():
        producer = await clients.connect(address)
        header = orjson.dumps({"partition": str(pid)})
        await publish(
            producer,
            *(PubExt("t", ExtMessage(header, f"{pid}-{n}".encode()), pid) for n in range(3)),
        )
    for pid, consumer in consumers:
        assert bodies(await quiet(consumer, 0.3)) == [f"{pid}-{n}".encode() for n in range(3)]


async def test_a_placed_broker_that_restarts_empty_is_told_its_topics_when_it_registers(
    nursery: trio.Nursery, lookupd: LookupdAddresses, http: httpx.AsyncClient
) -> None:
    await start_brokers(nursery, lookupd, 1)
    scope = trio.CancelScope()
    tcp_port, http_port = free_port(), free_port()
    fixed = broker_config(
        lookupd, tcp_address=f"127.0.0.1:{tcp_port}", http_address=f"127.0.0.1:{http_port}"
    )
    await start_broker(nursery, fixed, scope)
    await wait_until(lambda: active(lookupd) == 2)
    await http.post("/topic/create?topic=t&partition_num=4&replicator=1&orderedmulti=true")
    assert (
        Counter(b.node for b in lookupd.catalog.topics["t"].placement)[f"127.0.0.1:{http_port}"]
        == 2
    )
    scope.cancel()
    await wait_until(lambda: active(lookupd) == 1)
    # while it is away, its partitions are not offered for writing
    assert sorted(lookup_partitions(await lookup(http, "topic=t&access=w"))) == sorted(
        pid
        for pid, b in enumerate(lookupd.catalog.topics["t"].placement)
        if b.node != f"127.0.0.1:{http_port}"
    )
    again = await start_broker(nursery, fixed)
    await wait_until(lambda: "t" in again.broker.topics)
    topic = again.broker.topics["t"]
    assert (len(topic.partitions), topic.ordered, topic.ext) == (4, True, False)
    await wait_until(lambda: f"127.0.0.1:{http_port}" in lookupd.catalog.topics["t"].synced)
    assert len(lookup_partitions(await lookup(http, "topic=t&access=w"))) == 4


def lookup_partitions(response: httpx.Response) -> list[int]:
    return [int(pid) for pid in response.json()["partitions"]]


async def test_a_failed_broker_call_is_retried_when_that_broker_registers(
    nursery: trio.Nursery, lookupd: LookupdAddresses, http: httpx.AsyncClient, peers: RawPeers
) -> None:
    # a peer claiming an HTTP port where nothing listens yet: the call fails
    http_port = free_port()
    stand_in = await peers.connect(lookupd)
    await stand_in.identify(nsqd_info(4999, host="127.0.0.1", http_port=http_port))
    response = await http.post("/topic/create?topic=t&partition_num=2&replicator=1")
    assert response.status_code == 200
    assert lookupd.catalog.topics["t"].synced == set()
    assert lookup_partitions(await lookup(http, "topic=t&access=w")) == []
    await stand_in.aclose()
    broker = await start_broker(
        nursery, broker_config(lookupd, http_address=f"127.0.0.1:{http_port}")
    )
    await wait_until(lambda: "t" in broker.broker.topics)
    assert len(broker.broker.topics["t"].partitions) == 2
    await wait_until(lambda: bool(lookupd.catalog.topics["t"].synced))
    assert lookup_partitions(await lookup(http, "topic=t&access=w")) == [0, 1]


async def test_upgradeext_upgrades_the_topic_on_every_placed_broker(
    nursery: trio.Nursery, lookupd: LookupdAddresses, http: httpx.AsyncClient
) -> None:
    brokers = await start_brokers(nursery, lookupd, 2)
    await http.post("/topic/create?topic=t&partition_num=2&replicator=1")
    assert not any(b.broker.topics["t"].ext for b in brokers)
    assert (await lookup(http, "topic=t&metainfo=1")).json()["meta"]["extend_support"] is False
    response = await http.post("/topic/meta/update?topic=t&upgradeext=true&replicator=3")
    assert response.status_code == 200
    assert all(b.broker.topics["t"].ext for b in brokers)
    meta = (await lookup(http, "topic=t&metainfo=1")).json()["meta"]
    assert meta["extend_support"] is True
    assert meta["replica"] == 3
    # one way: no downgrade
    await http.post("/topic/meta/update?topic=t&upgradeext=false")
    assert lookupd.catalog.topics["t"].meta.extend_support
    listed = orjson.loads((await http.get("/topics?metaInfo=true")).content)
    assert listed == {
        "topics": ["t"],
        "meta_info": [
            {
                "topic_name": "t",
                "extend_support": True,
                "ordered": False,
                "multi_part": False,
                "disable_channel_auto_create": False,
            }
        ],
    }
    error = await http.post("/topic/meta/update?topic=never&upgradeext=true")
    assert error.status_code == 400
    assert orjson.loads(error.content) == {
        "message": "topic never was not created through this lookupd"
    }


async def test_delete_all_partitions_tells_the_brokers_and_forgets_the_topic(
    nursery: trio.Nursery, lookupd: LookupdAddresses, http: httpx.AsyncClient
) -> None:
    brokers = await start_brokers(nursery, lookupd, 2)
    await http.post("/topic/create?topic=t&partition_num=3&replicator=1")

    async def refused(query: str, message: str) -> None:
        response = await http.post(f"/topic/delete?{query}")
        assert response.status_code == 400
        assert orjson.loads(response.content) == {"message": message}

    await refused("topic=t", "MISSING_ARG_TOPIC_PARTITION")
    await refused("topic=t&partition=1", "REMOVE_SINGLE_PARTITION_NOT_ALLOWED")
    assert (await http.post("/topic/delete?topic=t&partition=**")).status_code == 200
    assert all("t" not in b.broker.topics for b in brokers)
    assert "t" not in lookupd.catalog
    assert orjson.loads((await http.get("/topics")).content) == {"topics": []}


# ---------------------------------------------------------------- errors and odd cases


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("partition_num=1&replicator=1", "MISSING_ARG_TOPIC"),
        ("topic=bad!&partition_num=1&replicator=1", "INVALID_ARG_TOPIC"),
        ("topic=t&replicator=1", "MISSING_ARG_TOPIC_PARTITION_NUM"),
        ("topic=t&partition_num=&replicator=1", "MISSING_ARG_TOPIC_PARTITION_NUM"),
        ("topic=t&partition_num=0&replicator=1", "INVALID_ARG_TOPIC_PARTITION_NUM"),
        ("topic=t&partition_num=256&replicator=1", "INVALID_ARG_TOPIC_PARTITION_NUM"),
        ("topic=t&partition_num=x&replicator=1", "INVALID_ARG_TOPIC_PARTITION_NUM"),
        ("topic=t&partition_num=2", "MISSING_ARG_TOPIC_REPLICATOR"),
        ("topic=t&partition_num=2&replicator=0", "INVALID_ARG_TOPIC_REPLICATOR"),
        ("topic=t&partition_num=2&replicator=6", "INVALID_ARG_TOPIC_REPLICATOR"),
        ("topic=t&partition_num=2&replicator=1&suggestload=10001", "INVALID_ARG_TOPIC_LOAD_FACTOR"),
        ("topic=t&partition_num=2&replicator=1&suggestload=-1", "INVALID_ARG_TOPIC_LOAD_FACTOR"),
        ("topic=t&partition_num=2&replicator=1&syncdisk=x", "INVALID_ARG_TOPIC_SYNC_DISK"),
        ("topic=t&partition_num=2&replicator=1&retention=7d", "INVALID_ARG_TOPIC_RETENTION"),
    ],
)
async def test_create_parameter_errors_are_400_with_youzans_texts(
    http: httpx.AsyncClient, query: str, message: str
) -> None:
    for method in ("POST", "PUT"):
        response = await http.request(method, f"/topic/create?{query}")
        assert response.status_code == 400
        assert orjson.loads(response.content) == {"message": message}


async def test_create_without_brokers_or_with_another_partition_num_is_400_with_a_reason(
    nursery: trio.Nursery, lookupd: LookupdAddresses, http: httpx.AsyncClient
) -> None:
    response = await http.post("/topic/create?topic=t&partition_num=2&replicator=1")
    assert response.status_code == 400
    assert orjson.loads(response.content) == {
        "message": "no broker registered with this lookupd to place partitions on"
    }
    await start_brokers(nursery, lookupd, 1)
    assert (await http.put("/topic/create?topic=t&partition_num=2&replicator=1")).status_code == 200
    response = await http.post("/topic/create?topic=t&partition_num=3&replicator=1")
    assert response.status_code == 400
    assert orjson.loads(response.content) == {
        "message": "topic t already exists with partition_num=2 (asked 3); "
        "use /topic/partition/expand or /topic/meta/update to change it"
    }


async def test_unknown_topic_lookup_with_youzan_parameters_is_200_with_empty_lists(
    http: httpx.AsyncClient,
) -> None:
    for query in ("access=r", "access=w", "metainfo=true", "partition=0", "access=w&metainfo=1"):
        response = await http.get(f"/lookup?topic=never&{query}")
        assert response.status_code == 200
        assert orjson.loads(response.content) == {
            "channels": [],
            "producers": [],
            "partitions": {},
        }
    bad = await http.get("/lookup?topic=t&access=x")
    assert bad.status_code == 400
    assert orjson.loads(bad.content) == {"message": "INVALID_ACCESS_MODE"}
    # without Youzan's parameters: nsqlookupd's 404, unchanged
    assert (await http.get("/lookup?topic=never")).status_code == 404


async def test_a_plain_registration_is_partition_zero_and_plain_meta(
    lookupd: LookupdAddresses, http: httpx.AsyncClient, peers: RawPeers
) -> None:
    one = await peers.connect(lookupd)
    await one.identify(nsqd_info(4150, host="nsqd1"))
    await one.register("plain", "c")
    alone = (await lookup(http, "topic=plain&access=r&metainfo=true")).json()
    assert list(alone["partitions"]) == ["0"]
    two = await peers.connect(lookupd)
    await two.identify(nsqd_info(4250, host="nsqd2"))
    await two.register("plain")
    document = (await lookup(http, "topic=plain&access=r&metainfo=true")).json()
    assert document["channels"] == ["c"]
    assert list(document["partitions"]) == []  # on several brokers: none (issue 31)
    assert [p["tcp_port"] for p in document["producers"]] == [4150, 4250]
    assert document["meta"] == {
        "partition_num": 1,
        "replica": 1,
        "extend_support": False,
        "ordered": False,
        "multi_part": False,
        "disable_channel_auto_create": False,
    }
    # the upstream answer is unchanged
    upstream = orjson.loads((await http.get("/lookup?topic=plain")).content)
    assert list(upstream) == ["channels", "producers"]
    assert "id" not in upstream["producers"][0]


async def test_tombstoned_broker_is_left_out_for_writers_only(
    nursery: trio.Nursery, lookupd: LookupdAddresses, http: httpx.AsyncClient
) -> None:
    brokers = await start_brokers(nursery, lookupd, 2)
    await http.post("/topic/create?topic=t&partition_num=2&replicator=1")
    await wait_until(lambda: len(lookupd.registry.find_producers("topic", "t", "")) == 2)
    target = node(brokers[0])
    await http.post(f"/topic/tombstone?topic=t&node={target}")
    written = await lookup(http, "topic=t&access=w")
    read = await lookup(http, "topic=t&access=r")
    placement = lookupd.catalog.topics["t"].placement
    assert lookup_partitions(written) == [p for p, b in enumerate(placement) if b.node != target]
    assert lookup_partitions(read) == [0, 1]


async def test_listlookup_names_this_lookupd_as_the_only_node_and_leader(
    lookupd: LookupdAddresses, http: httpx.AsyncClient
) -> None:
    document = orjson.loads((await http.get("/listlookup")).content)
    node = {
        "ID": f"127.0.0.1:{lookupd.http[1]}",
        "NodeIP": "127.0.0.1",
        "TcpPort": str(lookupd.tcp[1]),
        "HttpPort": str(lookupd.http[1]),
        "RpcPort": "",
        "Epoch": 0,
    }
    assert document == {"lookupdnodes": [node], "lookupdleader": node}


async def test_expand_adds_partitions_placed_by_the_same_rule(
    nursery: trio.Nursery, lookupd: LookupdAddresses, http: httpx.AsyncClient
) -> None:
    brokers = await start_brokers(nursery, lookupd, 2)
    await http.post("/topic/create?topic=t&partition_num=1&replicator=1")
    assert (await http.post("/topic/partition/expand?topic=t&partition_num=4")).status_code == 200
    placement = lookupd.catalog.topics["t"].placement
    assert Counter(b.node for b in placement) == dict.fromkeys(by_node(brokers), 2)
    assert all(len(b.broker.topics["t"].partitions) == 4 for b in brokers)
    shrink = await http.post("/topic/partition/expand?topic=t&partition_num=2")
    assert shrink.status_code == 400
