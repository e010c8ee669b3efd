"""``GET /metrics`` over real sockets: Prometheus' text format, nsq_exporter's names.

A broker with plain and partitioned topics, channels (one paused), consumers that
finish, requeue, hold and time out messages is scraped, the body parsed with
prometheus_client's own parser, and every series compared with what ``/stats`` says
at the same moment. Also: an empty broker, HTTPS and AUTH (open like /stats), and
the pure :func:`metric_families` on a hand-made snapshot.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Final

import attrs
import httpx
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.auth_server import refusing_address
from trionsq import NsqdConfig
from trionsq.broker.latency import LatencyResult
from trionsq.protocol import Fin, IdentifyRequest, Rdy, Req, Sub
from trionsq.server.metrics import BrokerFacts, metric_families
from trionsq.server.stats import (
    ChannelSnapshot,
    PartitionChannelSnapshot,
    PartitionSnapshot,
    StatsSnapshot,
    TopicSnapshot,
)
from trionsq.testing import wait_until

from .raw import next_frame, next_message, ok, start
from .test_http_api import tls_files

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Mapping
    from pathlib import Path

    import trio

    from trionsq.broker.broker import Broker
    from trionsq.broker.statistics import ChannelStatistics
    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients

CONFIG: Final = NsqdConfig.loopback(e2e_processing_latency_percentiles=(0.99, 0.95))
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
TOP_LEVEL: Final = (
    "nsq_exporter_scrape_duration_seconds",
    "nsq_up",
    "nsq_info",
    "nsq_healthy",
    "nsq_start_time_seconds",
)
TOPIC_FIELDS: Final = {  # nsq_topic_<metric>: the /stats field
    "depth": "depth",
    "backend_depth": "backend_depth",
    "message_count": "message_count",
    "message_bytes": "message_bytes",
    "disk_bytes": "disk_bytes",
    "lost_messages": "lost_count",
}
CHANNEL_FIELDS: Final = {
    "client_count": "client_count",
    "depth": "depth",
    "backend_depth": "backend_depth",
    "message_count": "message_count",
    "in_flight_count": "in_flight_count",
    "deferred_count": "deferred_count",
    "requeue_count": "requeue_count",
    "timeout_count": "timeout_count",
}
CLIENT_FIELDS: Final = {
    "state": "state",
    "finish_count": "finish_count",
    "message_count": "message_count",
    "ready_count": "ready_count",
    "in_flight_count": "in_flight_count",
    "requeue_count": "requeue_count",
    "connect_ts": "connect_ts",
    "sample_rate": "sample_rate",
}
TOPIC_PARTITION_FIELDS: Final = {  # nsq_topic_partition_<metric>: the field in partitions[]
    "depth": "depth",
    "messages": "message_count",
    "end_offset": "end_offset",
    "end_messages": "end_count",
}
CHANNEL_PARTITION_FIELDS: Final = {
    "depth": "depth",
    "in_flight_messages": "in_flight_count",
    "deferred_messages": "deferred_count",
    "clients": "client_count",
    "confirmed_offset": "confirmed_offset",
    "confirmed_messages": "confirmed_count",
}
YOUZAN_CHANNEL_FIELDS: Final = {
    "channel_depth": "depth",
    "channel_client_cnt": "client_count",
    "channel_inflight_cnt": "in_flight_count",
}

Json = dict[str, object]


@pytest.fixture
def nsqd_config() -> NsqdConfig:
    return CONFIG


@pytest.fixture
async def http(nsqd: BoundAddresses) -> AsyncIterator[httpx.AsyncClient]:
    assert nsqd.http is not None
    async with httpx.AsyncClient(base_url=f"http://{nsqd.http[0]}:{nsqd.http[1]}") as client:
        yield client


# ---------------------------------------------------------------------- helpers


@attrs.frozen
class Scrape:
    """One parsed exposition: families by name, and each sample's value by name and labels."""

    families: dict[str, Metric]
    values: dict[str, dict[frozenset[tuple[str, str]], float]]

    @classmethod
    def parse(cls, text: str) -> Scrape:
        families = {family.name: family for family in text_string_to_metric_families(text)}
        values: dict[str, dict[frozenset[tuple[str, str]], float]] = {}
        for family in families.values():
            for sample in family.samples:
                series = values.setdefault(sample.name, {})
                key = frozenset(sample.labels.items())
                assert key not in series, f"{sample.name} {sample.labels} twice"
                series[key] = sample.value
        return cls(families, values)

    def value(self, name: str, **labels: str) -> float:
        return self.values[name][frozenset(labels.items())]

    def count(self, name: str) -> int:
        return len(self.values.get(name, {}))


async def scrape(http: httpx.AsyncClient) -> Scrape:
    response = await http.get("/metrics")
    assert response.status_code == 200, response.content
    assert response.headers["content-type"] == CONTENT_TYPE
    return Scrape.parse(response.text)


async def stats(http: httpx.AsyncClient) -> Json:
    response = await http.get("/stats", params={"format": "json", "include_mem": "false"})
    assert response.status_code == 200, response.content
    document: Json = response.json()
    return document


def go_bool(value: object) -> str:
    assert isinstance(value, bool)
    return "true" if value else "false"


def items(document: Mapping[str, object], key: str) -> list[Json]:
    found = document[key]
    assert isinstance(found, list)
    return found


def percentile(latency: object, quantile: float) -> float:
    assert isinstance(latency, dict)
    for entry in latency["percentiles"] or ():
        if entry["quantile"] == quantile:
            return float(entry["value"])
    return 0.0


def channel(broker: Broker, topic: str, name: str, partition: int = 0) -> ChannelStatistics:
    return broker.topics[topic].partitions[partition].channels[name].statistics()


async def post(http: httpx.AsyncClient, path: str, body: bytes = b"", **params: str) -> None:
    response = await http.post(path, params=params, content=body)
    assert response.status_code == 200, response.content


# ---------------------------------------------------------------------- the tests


async def test_an_empty_broker_gives_a_valid_exposition(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    first = await scrape(http)
    document = await stats(http)
    for name in TOP_LEVEL:
        assert name in first.families, name
    assert first.value("nsq_up") == 1
    assert first.value("nsq_healthy") == 1
    assert first.value("nsq_start_time_seconds") == document["start_time"]
    version = first.families["nsq_info"].samples[0].labels
    assert version == {
        "version": document["version"],
        "trionsq_version": document["trionsq_version"],
    }
    assert first.value("nsq_exporter_scrape_duration_seconds_count", result="success") == 1
    # nsq_exporter's families are described even with nothing to report
    for name in ("nsq_topic_depth", "nsq_channel_depth", "nsq_client_state"):
        assert first.families[name].type == "gauge"
        assert first.count(name) == 0
    if sys.platform == "linux":  # procfs: prometheus_client's process collector
        assert first.value("process_resident_memory_bytes") > 0
    second = await scrape(http)
    assert second.value("nsq_exporter_scrape_duration_seconds_count", result="success") == 2


async def test_every_series_equals_stats(
    nsqd: BoundAddresses, http: httpx.AsyncClient, clients: Clients
) -> None:
    broker = nsqd.broker
    # orders: billing holds 2 in flight, finished 2, deferred 1 (REQ 60 s); audit paused
    await post(http, "/topic/create", topic="orders")
    await post(http, "/channel/create", topic="orders", channel="audit")
    await post(http, "/channel/pause", topic="orders", channel="audit")
    billing = await clients.subscribe(nsqd.tcp, "orders", "billing", rdy=5)
    slow = await clients.subscribe(
        nsqd.tcp, "orders", "slow", identify=IdentifyRequest(msg_timeout=1000)
    )
    await post(http, "/mpub", b"1\n2\n3\n4\n5", topic="orders")
    received = [await next_message(billing) for _ in range(5)]
    await billing.send(Fin(received[0].id), Fin(received[1].id), Req(received[2].id, 60_000))
    # slow: takes one and lets its 1 s timeout pass (RDY 0: it is not sent again)
    await slow.send(Rdy(1))
    await next_message(slow)
    await slow.send(Rdy(0))
    # parts: two partitions, a consumer of partition 1 that finishes what it gets
    await post(http, "/topic/create", topic="parts", partition_num="2")
    parted = await clients.connect(nsqd.tcp)
    await parted.send(Sub("parts", "c", 1))
    assert ok(await next_frame(parted))
    await parted.send(Rdy(10))
    await post(http, "/pub", b"p1", topic="parts", partition="1")
    await post(http, "/pub", b"p0", topic="parts", partition="0")
    await parted.send(Fin((await next_message(parted)).id))
    # idle: a paused topic with a message and no channel
    await post(http, "/pub", b"i", topic="idle")
    await post(http, "/topic/pause", topic="idle")

    await wait_until(
        lambda: (
            channel(broker, "orders", "billing").in_flight_count == 2
            and channel(broker, "orders", "billing").deferred_count == 1
            and channel(broker, "orders", "slow").timeout_count == 1
            and channel(broker, "orders", "slow").in_flight_count == 0
            and channel(broker, "parts", "c", 1).in_flight_count == 0
        ),
        "FIN, REQ and the timeout handled",
        within=10,
    )
    before = await stats(http)
    metrics = await scrape(http)
    assert await stats(http) == before, "the broker changed while scraping"

    compare(metrics, before)

    # the comparison covered what this test set up (and not just empty lists)
    orders = {"topic": "orders", "paused": "false"}
    assert metrics.value("nsq_topic_channel_count", **orders) == 3
    assert metrics.value("nsq_topic_message_count", **orders) == 5
    billing_labels = {"topic": "orders", "channel": "billing", "paused": "false"}
    assert metrics.value("nsq_channel_in_flight_count", **billing_labels) == 2
    assert metrics.value("nsq_channel_deferred_count", **billing_labels) == 1
    assert metrics.value("nsq_channel_requeue_count", **billing_labels) == 1
    assert metrics.value("nsq_channel_client_count", **billing_labels) == 1
    audit = {"topic": "orders", "channel": "audit", "paused": "true"}
    assert metrics.value("nsq_channel_depth", **audit) == 5
    slow_labels = {"topic": "orders", "channel": "slow", "paused": "false"}
    assert metrics.value("nsq_channel_timeout_count", **slow_labels) == 1
    assert metrics.value("nsq_topic_depth", topic="idle", paused="true") == 1
    assert metrics.count("nsq_client_state") == 3
    finished = [
        value
        for labels, value in metrics.values["nsq_client_finish_count"].items()
        if ("channel", "billing") in labels
    ]
    assert finished == [2]
    e2e = metrics.value("nsq_channel_e2e_latency_99p", **billing_labels)
    assert e2e > 0
    assert (
        metrics.value("nsq_channel_e2e_processing_latency", quantile="0.99", **billing_labels)
        == e2e
    )
    # the summary's count and sum: billing's two FINs, each after a positive latency
    assert metrics.value("nsq_channel_e2e_processing_latency_count", **billing_labels) == 2
    assert metrics.value("nsq_channel_e2e_processing_latency_sum", **billing_labels) >= e2e
    part = {"topic": "parts", "channel": "c", "paused": "false"}
    assert metrics.value("nsq_channel_partition_clients", partition="1", **part) == 1
    assert (
        metrics.value("nsq_topic_partition_messages", topic="parts", paused="false", partition="0")
        == 1
    )
    assert metrics.value("topic_queue_msg_end", topic="parts", partition="1") == 1
    assert metrics.value("channel_client_cnt", topic="parts", partition="1", channel="c") == 1


def compare(metrics: Scrape, document: Json) -> None:
    """Every nsq_exporter series and every addition equals its /stats figure, and no
    family has a series /stats has no row for."""
    topics = items(document, "topics")
    rows = {"topic": 0, "channel": 0, "client": 0, "partition": 0, "partition_channel": 0}
    for topic in topics:
        labels = {"topic": str(topic["topic_name"]), "paused": go_bool(topic["paused"])}
        rows["topic"] += 1
        for name, field in TOPIC_FIELDS.items():
            assert metrics.value(f"nsq_topic_{name}", **labels) == topic[field], name
        channels = items(topic, "channels")
        assert metrics.value("nsq_topic_channel_count", **labels) == len(channels)
        latency = topic["e2e_processing_latency"]
        for q, name in ((0.99, "e2e_latency_99_percentile"), (0.95, "e2e_latency_95_percentile")):
            assert metrics.value(f"nsq_topic_{name}", **labels) == percentile(latency, q)
        compare_latencies(metrics, "nsq_topic_e2e_processing_latency", labels, latency)
        paused_channels: dict[object, str] = {}
        for found in channels:
            rows["channel"] += 1
            channel_labels = {
                "topic": labels["topic"],
                "channel": str(found["channel_name"]),
                "paused": go_bool(found["paused"]),
            }
            paused_channels[found["channel_name"]] = channel_labels["paused"]
            for name, field in CHANNEL_FIELDS.items():
                assert metrics.value(f"nsq_channel_{name}", **channel_labels) == found[field], name
            clients = items(found, "clients")
            assert found["client_count"] == len(clients)
            latency = found["e2e_processing_latency"]
            for q, name in ((0.99, "e2e_latency_99p"), (0.95, "e2e_latency_95p")):
                assert metrics.value(f"nsq_channel_{name}", **channel_labels) == percentile(
                    latency, q
                )
            compare_latencies(
                metrics, "nsq_channel_e2e_processing_latency", channel_labels, latency
            )
            for client in clients:
                rows["client"] += 1
                client_labels = {
                    "topic": labels["topic"],
                    "channel": channel_labels["channel"],
                    "deflate": go_bool(client["deflate"]),
                    "snappy": go_bool(client["snappy"]),
                    "tls": go_bool(client["tls"]),
                    "client_id": str(client["client_id"]),
                    "hostname": str(client["hostname"]),
                    "version": str(client["version"]),
                    "remote_address": str(client["remote_address"]),
                }
                for name, field in CLIENT_FIELDS.items():
                    assert metrics.value(f"nsq_client_{name}", **client_labels) == client[field]
        for partition in items(topic, "partitions"):
            rows["partition"] += 1
            index = str(partition["partition"])
            for metric, field in TOPIC_PARTITION_FIELDS.items():
                name = f"nsq_topic_partition_{metric}"
                assert metrics.value(name, partition=index, **labels) == partition[field], name
            youzan = {"topic": labels["topic"], "partition": index}
            assert metrics.value("topic_queue_msg_end", **youzan) == partition["end_count"]
            for part in items(partition, "channels"):
                rows["partition_channel"] += 1
                part_labels = {
                    "topic": labels["topic"],
                    "channel": str(part["channel_name"]),
                    "paused": paused_channels[part["channel_name"]],
                    "partition": index,
                }
                for metric, field in CHANNEL_PARTITION_FIELDS.items():
                    name = f"nsq_channel_partition_{metric}"
                    assert metrics.value(name, **part_labels) == part[field], name
                for name, field in YOUZAN_CHANNEL_FIELDS.items():
                    value = metrics.value(name, channel=part_labels["channel"], **youzan)
                    assert value == part[field], name
    expected = {
        "topic": [f"nsq_topic_{n}" for n in (*TOPIC_FIELDS, "channel_count")],
        "channel": [f"nsq_channel_{n}" for n in CHANNEL_FIELDS],
        "client": [f"nsq_client_{n}" for n in CLIENT_FIELDS],
        "partition": [
            *(f"nsq_topic_partition_{n}" for n in TOPIC_PARTITION_FIELDS),
            "topic_queue_msg_end",
        ],
        "partition_channel": [
            *(f"nsq_channel_partition_{n}" for n in CHANNEL_PARTITION_FIELDS),
            *YOUZAN_CHANNEL_FIELDS,
        ],
    }
    for kind, names in expected.items():
        for name in names:
            assert metrics.count(name) == rows[kind], name


def compare_latencies(
    metrics: Scrape, name: str, labels: Mapping[str, str], latency: object
) -> None:
    assert isinstance(latency, dict)
    percentiles: Iterable[Json] = latency["percentiles"] or ()
    assert metrics.families[name].type == "summary"  # promtool refuses a quantile gauge
    for entry in percentiles:
        quantile = repr(entry["quantile"]).removesuffix(".0")
        assert metrics.value(name, quantile=quantile, **labels) == entry["value"]
    if latency["percentiles"] is not None:  # _count: every latency since start, so far
        assert metrics.value(f"{name}_count", **labels) >= latency["count"]
        assert metrics.value(f"{name}_sum", **labels) >= 0


# ---------------------------------------------------------------------- HTTPS and AUTH


async def test_https_serves_it_and_auth_leaves_it_open(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    tls = tls_files(tmp_path)
    with refusing_address() as auth_server:  # any ask to it would fail: none is made
        config = attrs.evolve(
            CONFIG, tls_cert=str(tls.cert), tls_key=str(tls.key), auth_http_addresses=(auth_server,)
        )
        addresses = await start(nursery, config)
        assert addresses.http is not None
        assert addresses.https is not None
        async with httpx.AsyncClient(
            base_url=f"http://{addresses.http[0]}:{addresses.http[1]}"
        ) as http:
            refused = await http.post("/pub", params={"topic": "t"}, content=b"m")
            assert refused.status_code == 401  # AUTH is on
            assert (await http.get("/stats")).status_code == 200
            plain = await scrape(http)
        async with httpx.AsyncClient(
            base_url=f"https://{addresses.https[0]}:{addresses.https[1]}", verify=tls.client
        ) as https:
            secure = await scrape(https)
    assert plain.value("nsq_up") == secure.value("nsq_up") == 1
    # one registry per listener: each counts its own scrapes
    assert secure.value("nsq_exporter_scrape_duration_seconds_count", result="success") == 1


# ---------------------------------------------------------------------- pure part


def test_families_pick_quantiles_by_value_and_leave_ephemeral_channels_to_nsq_names() -> None:
    latency = LatencyResult(count=3, percentiles=((0.95, 20.0), (1.0, 50.0), (0.99, 30.0)))
    ephemeral = "tmp#ephemeral"
    parts = tuple(
        PartitionSnapshot(
            partition=index,
            depth=index,
            message_count=10 + index,
            end_offset=100 * index,
            end_count=20 + index,
            channels=(
                PartitionChannelSnapshot(
                    channel_name=ephemeral,
                    depth=1,
                    in_flight_count=0,
                    deferred_count=0,
                    client_count=0,
                    confirmed_offset=0,
                    confirmed_count=0,
                ),
            ),
        )
        for index in range(2)
    )
    channel_snapshot = ChannelSnapshot(
        name=ephemeral,
        depth=2,
        backend_depth=0,
        in_flight_count=0,
        deferred_count=0,
        message_count=2,
        requeue_count=0,
        timeout_count=0,
        client_count=0,
        clients=(),
        paused=True,
        e2e=latency,
    )
    topic = TopicSnapshot(
        name="t",
        channels=(channel_snapshot,),
        depth=1,
        backend_depth=0,
        message_count=21,
        message_bytes=42,
        paused=False,
        e2e=latency,
        partitions=parts,
    )
    facts = BrokerFacts("1.3.0", "0.2.0", "NOT OK - disk full", 1_700_000_000.5)
    families = metric_families(StatsSnapshot(topics=(topic,), producers=None), facts)
    values = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in families
        for sample in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return values[(name, frozenset(labels.items()))]

    topic_labels = {"topic": "t", "paused": "false"}
    channel_labels = {"topic": "t", "channel": ephemeral, "paused": "true"}
    assert value("nsq_topic_e2e_latency_99_percentile", **topic_labels) == 30.0
    assert value("nsq_topic_e2e_latency_95_percentile", **topic_labels) == 20.0
    assert value("nsq_channel_e2e_latency_99p", **channel_labels) == 30.0
    assert value("nsq_channel_e2e_processing_latency", quantile="1", **channel_labels) == 50.0
    assert value("nsq_healthy") == 0
    assert value("nsq_start_time_seconds") == 1_700_000_000
    # the channel's paused label on its partitions; ephemeral: not in Youzan's names
    assert value("nsq_channel_partition_depth", partition="1", **channel_labels) == 1
    assert value("topic_queue_msg_end", topic="t", partition="1") == 21
    partition_labels = {"partition": "1", **topic_labels}
    assert value("nsq_topic_partition_messages", **partition_labels) == 11
    assert value("nsq_topic_partition_end_messages", **partition_labels) == 21
    assert value("nsq_topic_partition_end_offset", **partition_labels) == 100
    assert not [name for name, _ in values if name == "channel_depth"]
