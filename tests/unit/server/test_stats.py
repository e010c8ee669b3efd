"""/stats bodies (spec http-api.md §2.2 text, §2.3 JSON; counters: semantics.md §9).

The state is built on a live broker over real sockets (PUB, MPUB, DPUB, SUB, RDY, FIN,
REQ, CLS, in-flight timeouts); the documents are then compared field by field, keys
in nsqd's order, with the filters nsqd's ``GetStats`` applies.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Unpack

import attrs
import orjson
import pytest
import trio
import trio.testing

from trionsq import NsqdConfig, serve_nsqd
from trionsq.durations import go_duration_string
from trionsq.protocol import Cls, Dpub, Fin, IdentifyRequest, Mpub, Pub, Req
from trionsq.protocol.client import ErrorReply, Response, encode_identify
from trionsq.server import stats
from trionsq.server.stats import stats_document, stats_text
from trionsq.testing import ProtocolClient

from ...integration.raw import Clients, next_frame, next_message, ok, publish

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator

    from trionsq.config import NsqdOptions
    from trionsq.nursery_tree import BoundAddresses

VERSION = "1.3.0-trionsq.test"
STARTED = 1_700_000_000.75
TOP_KEYS = [
    "version",
    "trionsq_version",
    "health",
    "start_time",
    "topics",
    "memory",
    "descriptors",  # trionsq's: the open-file limit shared out (docs/storage.md)
    "producers",
]
TOPIC_KEYS = [
    "topic_name",
    "channels",
    "depth",
    "backend_depth",
    "message_count",
    "message_bytes",
    "paused",
    "e2e_processing_latency",
    "disk_bytes",  # trionsq's additions, after nsqd's keys
    "lost_count",
    "partitions",
]
CHANNEL_KEYS = [
    "channel_name",
    "depth",
    "backend_depth",
    "in_flight_count",
    "deferred_count",
    "message_count",
    "requeue_count",
    "timeout_count",
    "client_count",
    "clients",
    "paused",
    "e2e_processing_latency",
]
CLIENT_KEYS = [
    "client_id",
    "hostname",
    "version",
    "remote_address",
    "state",
    "ready_count",
    "in_flight_count",
    "message_count",
    "finish_count",
    "requeue_count",
    "connect_ts",
    "sample_rate",
    "deflate",
    "snappy",
    "user_agent",
    "topology_zone",
    "topology_region",
    "pub_counts",
    "tls",
    "tls_cipher_suite",
    "tls_version",
    "tls_negotiated_protocol",
    "tls_negotiated_protocol_is_mutual",
]
MEMORY_KEYS = [
    "heap_objects",
    "heap_idle_bytes",
    "heap_in_use_bytes",
    "heap_released_bytes",
    "gc_pause_usec_100",
    "gc_pause_usec_99",
    "gc_pause_usec_95",
    "next_gc_bytes",
    "gc_total_runs",
]
NO_LATENCY = {"count": 0, "percentiles": None}
JsonObject = dict[str, object]


@pytest.fixture
async def clients() -> AsyncIterator[Clients]:
    opened = Clients()
    try:
        yield opened
    finally:
        await opened.close_all()


@pytest.fixture
def zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Set the local time zone (``TZ``) for the test; restored afterwards."""

    def use(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()

    yield use
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def autojump(autojump_clock: trio.testing.MockClock) -> None:
    """Virtual time over real sockets: jump only after 0.1 s of real idleness."""
    autojump_clock.autojump_threshold = 0.1


async def start(nursery: trio.Nursery, **changes: Unpack[NsqdOptions]) -> BoundAddresses:
    addresses: BoundAddresses = await nursery.start(serve_nsqd, NsqdConfig.loopback(**changes))
    return addresses


def document(
    addresses: BoundAddresses,
    *,
    topic: str | None = None,
    channel: str | None = None,
    include_clients: bool = True,
    include_mem: bool = True,
    now: float | None = None,
) -> JsonObject:
    return stats_document(
        addresses.broker,
        version=VERSION,
        started_at=STARTED,
        health="OK",
        topic=topic,
        channel=channel,
        include_clients=include_clients,
        include_mem=include_mem,
        now=now,
    )


def text(
    addresses: BoundAddresses,
    *,
    now: float,
    topic: str | None = None,
    include_mem: bool = False,
    started_at: float = STARTED,
) -> str:
    return stats_text(
        addresses.broker,
        version_line="nsqd v1.3.0 (built w/trionsq-0.2.0)",
        started_at=started_at,
        health="OK",
        topic=topic,
        channel=None,
        include_clients=True,
        include_mem=include_mem,
        now=now,
    )


def objects(value: object) -> list[JsonObject]:
    assert isinstance(value, list)
    assert all(isinstance(item, dict) for item in value)
    return value


def obj(value: object) -> JsonObject:
    assert isinstance(value, dict)
    return value


def topics_of(doc: JsonObject) -> list[JsonObject]:
    return objects(doc["topics"])


def by_name(items: list[JsonObject], key: str) -> dict[object, JsonObject]:
    return {item[key]: item for item in items}


def address_of(client: ProtocolClient) -> str:
    host, port = client.stream.socket.getsockname()[:2]
    return f"{host}:{port}"


def port_of(client: ProtocolClient) -> int:
    port: int = client.stream.socket.getsockname()[1]
    return port


async def identify(client: ProtocolClient, request: IdentifyRequest) -> None:
    await client.stream.send_all(encode_identify(request))
    assert ok(await next_frame(client))


async def synced(client: ProtocolClient) -> None:
    """Wait until the broker has applied what ``client`` sent: a FIN of no message
    is answered with E_FIN_FAILED after everything before it."""
    await client.send(Fin(b"0" * 16))
    frame = await next_frame(client)
    assert isinstance(frame, ErrorReply)
    assert frame.code == "E_FIN_FAILED"


@attrs.frozen
class Scene:
    """The shared state: t1 with channels ``idle`` (no consumer) and ``work``; t2 with
    one deferred message and no channel; one consumer, one producer."""

    consumer: ProtocolClient
    producer: ProtocolClient
    connected_between: tuple[int, int]


async def build_scene(addresses: BoundAddresses, clients: Clients) -> Scene:
    before = int(time.time())
    await addresses.broker.create_channel("t1", "idle")
    consumer = await clients.subscribe(
        addresses.tcp,
        "t1",
        "work",
        rdy=10,
        identify=IdentifyRequest(
            client_id="c1",
            hostname="h1",
            user_agent="ua/1",
            topology_zone="z",
            topology_region="r",
        ),
    )
    producer = await clients.connect(addresses.tcp)
    await identify(producer, IdentifyRequest(client_id="p1", hostname="ph", user_agent="pub/2"))
    await publish(
        producer,
        Pub("t1", b"a"),
        Pub("t1", b"bb"),
        Mpub("t1", (b"ccc", b"dddd", b"eeeee")),
        Dpub("t2", 60_000, b"later"),
    )
    messages = [await next_message(consumer) for _ in range(5)]
    await consumer.send(Fin(messages[0].id), Fin(messages[1].id), Req(messages[2].id, 0))
    again = await next_message(consumer)
    assert (again.id, again.attempts) == (messages[2].id, 2)
    return Scene(consumer, producer, (before, int(time.time())))


def expected_consumer(scene: Scene, connect_ts: object) -> JsonObject:
    return {
        "client_id": "c1",
        "hostname": "h1",
        "version": "V2",
        "remote_address": address_of(scene.consumer),
        "state": 3,
        "ready_count": 10,
        "in_flight_count": 3,
        "message_count": 6,
        "finish_count": 2,
        "requeue_count": 1,
        "connect_ts": connect_ts,
        "sample_rate": 0,
        "deflate": False,
        "snappy": False,
        "user_agent": "ua/1",
        "topology_zone": "z",
        "topology_region": "r",
        "tls": False,
        "tls_cipher_suite": "",
        "tls_version": "",
        "tls_negotiated_protocol": "",
        "tls_negotiated_protocol_is_mutual": False,
    }


def expected_producer(scene: Scene, connect_ts: object, pub_counts: list[JsonObject]) -> JsonObject:
    expected: JsonObject = {
        "client_id": "p1",
        "hostname": "ph",
        "version": "V2",
        "remote_address": address_of(scene.producer),
        "state": 0,
        "ready_count": 0,
        "in_flight_count": 0,
        "message_count": 0,
        "finish_count": 0,
        "requeue_count": 0,
        "connect_ts": connect_ts,
        "sample_rate": 0,
        "deflate": False,
        "snappy": False,
        "user_agent": "pub/2",
        "topology_zone": "",
        "topology_region": "",
        "pub_counts": pub_counts,
        "tls": False,
        "tls_cipher_suite": "",
        "tls_version": "",
        "tls_negotiated_protocol": "",
        "tls_negotiated_protocol_is_mutual": False,
    }
    if not pub_counts:
        del expected["pub_counts"]
    return expected


def connect_ts_in(scene: Scene, client: JsonObject) -> int:
    value = client["connect_ts"]
    assert isinstance(value, int)
    low, high = scene.connected_between
    assert low <= value <= high
    return value


# ----------------------------------------------------------------------- JSON


async def test_an_empty_broker(nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    doc = document(addresses)
    assert list(doc) == TOP_KEYS
    assert doc["version"] == VERSION
    assert doc["health"] == "OK"
    assert doc["start_time"] == 1_700_000_000
    assert type(doc["start_time"]) is int
    assert doc["topics"] == []
    assert doc["producers"] is None  # nsqd's nil slice when nobody has published
    memory = obj(doc["memory"])
    assert list(memory) == MEMORY_KEYS
    assert all(type(value) is int and value >= 0 for value in memory.values())
    descriptors = obj(doc["descriptors"])
    storage = addresses.broker.storage
    assert storage is not None
    assert descriptors == attrs.asdict(storage.descriptors.statistics())
    assert descriptors["files_open"] == descriptors["connections"] == 0
    unhealthy = stats_document(
        addresses.broker,
        version=VERSION,
        started_at=STARTED,
        health="NOK - disk full",
        topic=None,
        channel=None,
        include_clients=True,
        include_mem=False,
    )
    assert list(unhealthy) == [
        "version",
        "trionsq_version",
        "health",
        "start_time",
        "topics",
        "producers",
    ]
    assert unhealthy["health"] == "NOK - disk full"


async def test_every_field_after_pub_mpub_dpub_fin_and_req(
    nursery: trio.Nursery, clients: Clients, autojump: None
) -> None:
    addresses = await start(nursery)
    scene = await build_scene(addresses, clients)
    doc = document(addresses)
    assert list(doc) == TOP_KEYS
    t1, t2 = topics_of(doc)
    for topic in (t1, t2):
        assert list(topic) == TOPIC_KEYS
    idle, work = objects(t1["channels"])
    for channel in (idle, work):
        assert list(channel) == CHANNEL_KEYS
    (consumer,) = objects(work["clients"])
    assert list(consumer) == [key for key in CLIENT_KEYS if key != "pub_counts"]
    assert consumer == expected_consumer(scene, connect_ts_in(scene, consumer))
    (producer,) = objects(doc["producers"])
    assert list(producer) == CLIENT_KEYS
    pub_counts = [{"topic": "t1", "count": 5}, {"topic": "t2", "count": 1}]
    assert producer == expected_producer(scene, connect_ts_in(scene, producer), pub_counts)
    assert t1 == {
        "topic_name": "t1",
        "channels": [
            {
                "channel_name": "idle",
                "depth": 5,
                "backend_depth": 0,
                "in_flight_count": 0,
                "deferred_count": 0,
                "message_count": 5,  # counted when published, though nobody took them
                "requeue_count": 0,
                "timeout_count": 0,
                "client_count": 0,
                "clients": [],
                "paused": False,
                "e2e_processing_latency": NO_LATENCY,
            },
            {
                "channel_name": "work",
                "depth": 0,
                "backend_depth": 0,
                "in_flight_count": 3,
                "deferred_count": 0,
                "message_count": 5,  # the requeue does not add
                "requeue_count": 1,
                "timeout_count": 0,
                "client_count": 1,
                "clients": [consumer],
                "paused": False,
                "e2e_processing_latency": NO_LATENCY,
            },
        ],
        "depth": 0,
        "backend_depth": 0,
        "message_count": 5,
        "message_bytes": 15,
        "paused": False,
        "e2e_processing_latency": NO_LATENCY,
        "disk_bytes": 0,  # in memory
        "lost_count": 0,
        "partitions": [
            {
                "partition": 0,
                "depth": 0,
                "message_count": 5,
                "end_offset": 185,
                "end_count": 5,
                "channels": [
                    {
                        "channel_name": "idle",
                        "depth": 5,
                        "in_flight_count": 0,
                        "deferred_count": 0,
                        "client_count": 0,
                        "confirmed_offset": 0,
                        "confirmed_count": 0,
                    },
                    {
                        "channel_name": "work",
                        "depth": 0,
                        "in_flight_count": 3,
                        "deferred_count": 0,
                        "client_count": 1,
                        "confirmed_offset": 71,  # the first two finished
                        "confirmed_count": 2,
                    },
                ],
            }
        ],
    }
    assert t2 == {
        "topic_name": "t2",
        "channels": [],
        "depth": 1,  # no channel yet: the topic holds it
        "backend_depth": 0,
        "message_count": 1,
        "message_bytes": 5,
        "paused": False,
        "e2e_processing_latency": NO_LATENCY,
        "disk_bytes": 0,
        "lost_count": 0,
        "partitions": [
            {
                "partition": 0,
                "depth": 1,
                "message_count": 1,
                "end_offset": 47,
                "end_count": 1,
                "channels": [],
            }
        ],
    }
    encoded = orjson.dumps(doc)
    assert orjson.loads(encoded) == doc
    assert b'"e2e_processing_latency":{"count":0,"percentiles":null}' in encoded


async def test_timeouts_deferred_messages_and_cls(
    nursery: trio.Nursery, clients: Clients, autojump: None
) -> None:
    addresses = await start(nursery)
    consumer = await clients.subscribe(
        addresses.tcp, "t3", "c", rdy=5, identify=IdentifyRequest(msg_timeout=1000)
    )
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Dpub("t3", 60_000, b"deferred"), Pub("t3", b"x"))
    first = await next_message(consumer)
    again = await next_message(consumer)  # not finished within msg_timeout: sent again
    assert (again.id, again.attempts) == (first.id, 2)
    (topic,) = topics_of(document(addresses))
    (channel,) = objects(topic["channels"])
    assert {key: channel[key] for key in CHANNEL_KEYS[1:9]} == {
        "depth": 0,
        "backend_depth": 0,
        "in_flight_count": 1,
        "deferred_count": 1,
        "message_count": 2,
        "requeue_count": 0,
        "timeout_count": 1,
        "client_count": 1,
    }
    (client,) = objects(channel["clients"])
    assert (client["client_id"], client["hostname"]) == ("", "")  # IDENTIFY sent no names
    assert (client["state"], client["ready_count"], client["in_flight_count"]) == (3, 5, 1)
    assert (client["message_count"], client["finish_count"], client["requeue_count"]) == (2, 0, 0)
    await consumer.send(Cls())
    frame = await next_frame(consumer)
    assert isinstance(frame, Response)
    assert frame.is_close_wait
    (topic,) = topics_of(document(addresses))
    (client,) = objects(obj(objects(topic["channels"])[0])["clients"])
    assert (client["state"], client["ready_count"]) == (4, 0)


async def test_connections_before_identify_and_after_they_close(
    nursery: trio.Nursery, clients: Clients, autojump: None
) -> None:
    addresses = await start(nursery)
    broker = addresses.broker
    idle = await clients.connect(addresses.tcp)
    nameless = await clients.connect(addresses.tcp)
    await identify(nameless, IdentifyRequest(user_agent="x", sample_rate=42))
    await publish(nameless, Pub("t", b"m"))
    idle_stats, nameless_stats = (client.statistics() for client in broker.clients.values())
    assert (idle_stats.client_id, idle_stats.hostname, idle_stats.state) == (
        "127.0.0.1",
        "127.0.0.1",
        0,
    )
    assert idle_stats.remote_address == address_of(idle)
    # IDENTIFY replaces the names with what was sent, even nothing
    assert (nameless_stats.client_id, nameless_stats.hostname) == ("", "")
    (producer,) = objects(document(addresses)["producers"])  # only who has published
    assert (producer["user_agent"], producer["sample_rate"]) == ("x", 42)
    await nameless.aclose()
    for _ in range(100):  # until the broker has seen the connection end
        if len(broker.clients) == 1:
            break
        await trio.sleep(0.05)
    assert document(addresses)["producers"] is None


async def test_a_connection_that_publishes_and_consumes_is_in_both_lists(
    nursery: trio.Nursery, clients: Clients, autojump: None
) -> None:
    addresses = await start(nursery)
    both = await clients.subscribe(addresses.tcp, "t", "c", rdy=1)
    await publish(both, Pub("t", b"self"))
    await next_message(both)
    doc = document(addresses)
    (producer,) = objects(doc["producers"])
    (topic,) = topics_of(doc)
    (client,) = objects(obj(objects(topic["channels"])[0])["clients"])
    assert client == producer
    assert client["pub_counts"] == [{"topic": "t", "count": 1}]
    assert client["message_count"] == 1


# ----------------------------------------------------------------------- filters


async def test_filters(nursery: trio.Nursery, clients: Clients, autojump: None) -> None:
    addresses = await start(nursery)
    scene = await build_scene(addresses, clients)
    other = await clients.connect(addresses.tcp)
    await publish(other, Pub("t1", b"z"))

    missing = document(addresses, topic="missing")
    assert list(missing) == TOP_KEYS
    assert missing["topics"] is None  # nsqd returns before listing anything
    assert missing["producers"] is None

    only_t1 = document(addresses, topic="t1")
    assert [t["topic_name"] for t in topics_of(only_t1)] == ["t1"]
    counts = [obj(p).get("pub_counts") for p in objects(only_t1["producers"])]
    assert counts == [[{"topic": "t1", "count": 5}], [{"topic": "t1", "count": 1}]]

    only_t2 = document(addresses, topic="t2")
    producers = objects(only_t2["producers"])
    assert producers[0]["pub_counts"] == [{"topic": "t2", "count": 1}]
    assert "pub_counts" not in producers[1]  # still a producer, nothing for t2: omitted
    assert producers[1]["remote_address"] == address_of(other)

    only_work = document(addresses, channel="work")
    (t1,) = topics_of(only_work)  # t2 has no channel "work": left out
    assert [c["channel_name"] for c in objects(t1["channels"])] == ["work"]
    e2e_and_counts = {k: v for k, v in t1.items() if k not in ("channels", "partitions")}
    assert e2e_and_counts == {
        k: v
        for k, v in topics_of(document(addresses))[0].items()
        if k not in ("channels", "partitions")
    }
    (partition,) = objects(t1["partitions"])
    assert [c["channel_name"] for c in objects(partition["channels"])] == ["work"]

    assert document(addresses, topic="t1", channel="nope")["topics"] == []
    assert document(addresses, topic="t2", channel="work")["topics"] == []

    no_clients = document(addresses, include_clients=False)
    assert no_clients["producers"] is None
    channels = [c for t in topics_of(no_clients) for c in objects(t["channels"])]
    assert [(c["channel_name"], c["clients"], c["client_count"]) for c in channels] == [
        ("idle", None, 0),
        ("work", None, 1),
    ]

    no_mem = document(addresses, include_mem=False)
    assert list(no_mem) == [
        "version",
        "trionsq_version",
        "health",
        "start_time",
        "topics",
        "producers",
    ]
    assert [c["client_id"] for c in objects(obj(objects(t1["channels"])[0])["clients"])] == ["c1"]
    assert scene.connected_between[0] <= scene.connected_between[1]


async def test_paused_topic_and_channel(
    nursery: trio.Nursery, clients: Clients, autojump: None
) -> None:
    addresses = await start(nursery)
    await build_scene(addresses, clients)
    assert addresses.broker.set_topic_paused("t2", True)
    assert addresses.broker.set_channel_paused("t1", "idle", True)
    t1, t2 = topics_of(document(addresses))
    assert (t1["paused"], t2["paused"]) == (False, True)
    assert [c["paused"] for c in objects(t1["channels"])] == [True, False]
    lines = text(addresses, now=time.time()).splitlines()
    assert any(line.startswith("*P [t2             ]") for line in lines)
    assert any(line.startswith("   *P [idle                     ]") for line in lines)
    assert any(line.startswith("      [work                     ]") for line in lines)


# ----------------------------------------------------------------------- latency


async def test_e2e_processing_latency_per_channel_and_topic(
    nursery: trio.Nursery, clients: Clients, autojump: None
) -> None:
    addresses = await start(
        nursery,
        e2e_processing_latency_percentiles=(0.5, 0.99),
        e2e_processing_latency_window_time=600.0,
    )
    published_at = time.time_ns()
    a = await clients.subscribe(addresses.tcp, "t", "a", rdy=5)
    b = await clients.subscribe(addresses.tcp, "t", "b", rdy=5)
    await addresses.broker.create_channel("t", "c")
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("t", b"1"), Pub("t", b"2"), Pub("lonely", b"3"))
    for consumer, finish in ((a, 2), (b, 1)):
        messages = [await next_message(consumer) for _ in range(2)]
        await consumer.send(*(Fin(m.id) for m in messages[:finish]))
        await synced(consumer)
    bound = time.time_ns() - published_at

    doc = document(addresses)
    lonely, t = topics_of(doc)
    assert lonely["e2e_processing_latency"] == NO_LATENCY  # no channel: nothing to merge
    channels = by_name(objects(t["channels"]), "channel_name")

    def check(latency: object, count: int) -> None:
        result = obj(latency)
        assert list(result) == ["count", "percentiles"]
        assert result["count"] == count
        percentiles = objects(result["percentiles"])
        assert [list(p) for p in percentiles] == [["quantile", "value"]] * 2
        assert [p["quantile"] for p in percentiles] == [0.5, 0.99]
        for p in percentiles:
            value = p["value"]
            assert isinstance(value, float)
            assert (0 < value <= bound) if count else value == 0.0

    check(channels["a"]["e2e_processing_latency"], 2)
    check(channels["b"]["e2e_processing_latency"], 1)
    check(channels["c"]["e2e_processing_latency"], 0)  # tracked, nothing finished yet
    check(t["e2e_processing_latency"], 3)  # the topic merges its channels

    line = next(x for x in text(addresses, now=time.time()).splitlines() if "[a " in x)
    assert re.fullmatch(r"      \[a +\] .* e2e%: \d+\.\d(ns|us|ms|s), \d+\.\d(ns|us|ms|s)", line)

    # a window later (wall clock: FINs are timed with it) everything has left the window
    later = document(addresses, now=time.time() + 601)
    _, t = topics_of(later)
    check(t["e2e_processing_latency"], 0)


# ----------------------------------------------------------------------- text


async def test_text_layout(
    nursery: trio.Nursery, clients: Clients, autojump: None, zone: Callable[[str], None]
) -> None:
    addresses = await start(nursery)
    scene = await build_scene(addresses, clients)
    newest = scene.connected_between[1]
    now = newest + 65.5
    doc = document(addresses, now=now)
    (producer,) = objects(doc["producers"])
    consumer = objects(obj(objects(topics_of(doc)[0]["channels"])[1])["clients"])[0]

    def connected(client: JsonObject) -> str:
        seconds = int(now - connect_ts_in(scene, client))
        return f"{seconds // 60}m{seconds % 60}s"

    consumer_id = f"h1:{port_of(scene.consumer)} ua/1"
    producer_id = f"ph:{port_of(scene.producer)} pub/2"
    zone("UTC")
    body = text(addresses, now=now, started_at=now - 3725.5)
    start_line = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 3725.5))
    assert body == (
        "nsqd v1.3.0 (built w/trionsq-0.2.0)\n"
        f"start_time {start_line}\n"
        "uptime 1h2m5.5s\n"
        "\n"
        "Health: OK\n"
        "\n"
        "Topics:\n"
        "   [t1             ] depth: 0     be-depth: 0     msgs: 5        e2e%: \n"
        "      [idle                     ] depth: 5     be-depth: 0     inflt: 0    def: 0   "
        " re-q: 0     timeout: 0     msgs: 5        e2e%: \n"
        "      [work                     ] depth: 0     be-depth: 0     inflt: 3    def: 0   "
        " re-q: 1     timeout: 0     msgs: 5        e2e%: \n"
        f"        [V2 {consumer_id:<21}] state: 3 inflt: 3    rdy: 10   fin: 2        re-q: 1"
        f"        msgs: 6        connected: {connected(consumer)}\n"
        "\n"
        "   [t2             ] depth: 1     be-depth: 0     msgs: 1        e2e%: \n"
        "\n"
        "Producers:\n"
        f"   [V2 {producer_id:<21}] msgs: 6        topics: t1=5,t2=1"
        f" connected: {connected(producer)}\n"
    )


async def test_text_without_topics_or_producers_and_with_memory(nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    body = text(addresses, now=STARTED + 0.25, topic="missing", include_mem=True)
    head, separator, rest = body.partition("\nMemory:\n")
    assert separator
    assert head.splitlines()[2:] == ["uptime 250ms", "", "Health: OK"]
    assert re.fullmatch(
        r"start_time \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)", head.splitlines()[1]
    )
    memory_lines = rest.splitlines()[:9]
    assert [line.split("\t")[0] for line in memory_lines] == [
        f"   {key:<25}" for key in MEMORY_KEYS
    ]
    assert all(line.split("\t")[1].isdigit() for line in memory_lines)
    assert rest.splitlines()[9:] == ["", "Topics: None", "", "Producers: None"]


# ----------------------------------------------------------------------- helpers


def test_start_time_is_rfc3339_in_the_local_zone(zone: Callable[[str], None]) -> None:
    zone("UTC")
    assert stats._rfc3339(1_700_000_000.9) == "2023-11-14T22:13:20Z"
    zone("EST+5")
    assert stats._rfc3339(1_700_000_000.9) == "2023-11-14T17:13:20-05:00"
    zone("IST-5:30")
    assert stats._rfc3339(1_700_000_000) == "2023-11-15T03:43:20+05:30"


@pytest.mark.parametrize(
    ("nanoseconds", "expected"),
    [
        (0, "0s"),
        (1, "1ns"),
        (999, "999ns"),
        (1_500, "1.5µs"),
        (1_000_000, "1ms"),
        (2_500_000, "2.5ms"),
        (1_000_000_000, "1s"),
        (61_000_000_000, "1m1s"),
        (3_600_000_000_000, "1h0m0s"),
        (3_725_500_000_000, "1h2m5.5s"),
        (1_000_000_001, "1.000000001s"),
        (-1_500_000_000, "-1.5s"),
    ],
)
def test_go_duration(nanoseconds: int, expected: str) -> None:
    assert go_duration_string(nanoseconds) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.0, "0.0ns"), (1000.0, "1000.0ns"), (1500.0, "1.5us"), (2.25e6, "2.2ms"), (3e9, "3.0s")],
)
def test_latency_values_as_nsqd_prints_them(value: float, expected: str) -> None:
    assert stats._nanoseconds_to_human(value) == expected
