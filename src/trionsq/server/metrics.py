"""``GET /metrics``: the figures ``/stats`` reports, in Prometheus' text format (0.0.4).

Names and labels are those of lovoo/nsq_exporter (the exporter that scrapes nsqd's
``/stats``), so its dashboards and alerts work on a broker scraped directly. trionsq
adds a few families of its own (top level, per partition, the e2e latency as a summary
of every configured quantile) and, per partition, the names Youzan's nsqd gives its
own ``/metrics``; docs/admin.md lists which name comes from where. Prometheus' linter
(``promtool check metrics``) passes every family trionsq names; it flags only
nsq_exporter's gauges named ``*_count``, kept for its dashboards.

Everything is read when Prometheus scrapes, from the snapshot ``/stats`` renders
(:func:`trionsq.server.stats.snapshot`), taken on the broker's thread; the families and
their text are built in a worker thread for that request. No task runs between scrapes
and nothing is kept but the scrape-duration summary. Each HTTP listener has its own
:class:`MetricsRoute`, with a private registry (never the global one).

:func:`metric_families` is the pure part (no Trio, no broker): a snapshot in, metric
families out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, TypeAlias, TypeVar

import attrs
import trio
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Sample

from ..http.messages import Response
from ..version import NSQD_RELEASE, TRIONSQ_VERSION
from .stats import StatsSnapshot, snapshot

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from prometheus_client.metrics_core import Metric

    from ..broker.broker import Broker
    from ..broker.latency import LatencyResult
    from ..broker.statistics import ClientStatistics
    from ..http.messages import Request
    from .stats import (
        ChannelSnapshot,
        PartitionChannelSnapshot,
        PartitionSnapshot,
        TopicSnapshot,
    )

__all__ = [
    "CONTENT_TYPE",
    "BrokerCollector",
    "BrokerFacts",
    "MetricsRoute",
    "Reading",
    "metric_families",
]

CONTENT_TYPE: Final = CONTENT_TYPE_PLAIN_0_0_4
"""``text/plain; version=0.0.4; charset=utf-8``: what nsq_exporter's Go client serves."""

T = TypeVar("T")
Gauges: TypeAlias = tuple[tuple[str, str, Callable[[T], float]], ...]
"""(name without the prefix, help, value) for each gauge family of one kind of row."""

# ------------------------------------------------------------------- nsq_exporter's

TOPIC_LABELS: Final = ("topic", "paused")
CHANNEL_LABELS: Final = ("topic", "channel", "paused")
CLIENT_LABELS: Final = (
    "topic",
    "channel",
    "deflate",
    "snappy",
    "tls",
    "client_id",
    "hostname",
    "version",
    "remote_address",
)
SCRAPE_DURATION: Final = "nsq_exporter_scrape_duration_seconds"


def _e2e(result: LatencyResult | None, quantile: float) -> float:
    """The value /stats gives at ``quantile`` (nanoseconds); 0 when it gives none.

    nsq_exporter reads the first and second percentile whatever they are (nsqd's usual
    ``0.99,0.95``); here each family gets the quantile its name says."""
    if result is not None:
        for q, value in result.percentiles:
            if math.isclose(q, quantile):
                return value
    return 0.0


TOPIC_GAUGES: Final[Gauges[TopicSnapshot]] = (
    ("channel_count", "Channels of the topic.", lambda t: len(t.channels)),
    ("depth", "Messages waiting in the topic (not yet copied to its channels).", lambda t: t.depth),
    (
        "backend_depth",
        "Of depth, messages on disk (always 0 in trionsq).",
        lambda t: t.backend_depth,
    ),
    (
        "e2e_latency_99_percentile",
        "End-to-end processing latency at quantile 0.99 over the topic's channels, ns.",
        lambda t: _e2e(t.e2e, 0.99),
    ),
    (
        "e2e_latency_95_percentile",
        "End-to-end processing latency at quantile 0.95 over the topic's channels, ns.",
        lambda t: _e2e(t.e2e, 0.95),
    ),
    ("message_count", "Messages published to the topic since start.", lambda t: t.message_count),
)
CHANNEL_GAUGES: Final[Gauges[ChannelSnapshot]] = (
    ("client_count", "Consumers subscribed to the channel.", lambda c: c.client_count),
    ("depth", "Messages waiting in the channel.", lambda c: c.depth),
    (
        "backend_depth",
        "Of depth, messages on disk (always 0 in trionsq).",
        lambda c: c.backend_depth,
    ),
    ("message_count", "Messages the channel received since start.", lambda c: c.message_count),
    (
        "in_flight_count",
        "Messages sent to a consumer, not yet finished.",
        lambda c: c.in_flight_count,
    ),
    (
        "e2e_latency_99p",
        "End-to-end processing latency at quantile 0.99, ns.",
        lambda c: _e2e(c.e2e, 0.99),
    ),
    (
        "e2e_latency_95p",
        "End-to-end processing latency at quantile 0.95, ns.",
        lambda c: _e2e(c.e2e, 0.95),
    ),
    ("deferred_count", "Messages deferred (DPUB or REQ with a delay).", lambda c: c.deferred_count),
    ("requeue_count", "Messages requeued by consumers since start.", lambda c: c.requeue_count),
    (
        "timeout_count",
        "Messages whose timeout passed in flight since start.",
        lambda c: c.timeout_count,
    ),
)
CLIENT_GAUGES: Final[Gauges[ClientStatistics]] = (
    ("state", "nsqd's connection state: 0 init, 3 subscribed, 4 closing.", lambda s: s.state),
    ("finish_count", "Messages the consumer finished.", lambda s: s.finish_count),
    ("message_count", "Messages sent to the consumer.", lambda s: s.message_count),
    ("ready_count", "The consumer's RDY count.", lambda s: s.ready_count),
    ("in_flight_count", "Messages in flight to the consumer.", lambda s: s.in_flight_count),
    ("requeue_count", "Messages the consumer requeued.", lambda s: s.requeue_count),
    ("connect_ts", "When the consumer connected, Unix seconds.", lambda s: s.connect_ts),
    ("sample_rate", "The consumer's sample rate (IDENTIFY), percent.", lambda s: s.sample_rate),
)

# ------------------------------------------------------------------- trionsq's additions

TOPIC_PARTITION_LABELS: Final = ("topic", "paused", "partition")
CHANNEL_PARTITION_LABELS: Final = ("topic", "channel", "paused", "partition")

TOPIC_EXTRA_GAUGES: Final[Gauges[TopicSnapshot]] = (
    (
        "message_bytes",
        "Bytes of the messages published to the topic since start.",
        lambda t: t.message_bytes,
    ),
    ("disk_bytes", "Bytes of the topic's segment files (0 in memory).", lambda t: t.disk_bytes),
    ("lost_messages", "Messages recovery could not give back.", lambda t: t.lost_count),
)
TOPIC_PARTITION_GAUGES: Final[Gauges[PartitionSnapshot]] = (
    ("depth", "Messages the partition holds for its channels.", lambda p: p.depth),
    ("messages", "Messages published to the partition since start.", lambda p: p.message_count),
    ("end_offset", "Queue offset the partition's next message gets.", lambda p: p.end_offset),
    ("end_messages", "Messages ever stored in the partition.", lambda p: p.end_count),
)
CHANNEL_PARTITION_GAUGES: Final[Gauges[PartitionChannelSnapshot]] = (
    ("depth", "Messages waiting in the channel in this partition.", lambda c: c.depth),
    (
        "in_flight_messages",
        "Messages in flight from this partition.",
        lambda c: c.in_flight_count,
    ),
    ("deferred_messages", "Messages deferred in this partition.", lambda c: c.deferred_count),
    ("clients", "Consumers subscribed to this partition.", lambda c: c.client_count),
    (
        "confirmed_offset",
        "Queue offset below which the channel finished everything.",
        lambda c: c.confirmed_offset,
    ),
    (
        "confirmed_messages",
        "Messages of the partition before the confirmed offset.",
        lambda c: c.confirmed_count,
    ),
)

# ------------------------------------------------------------------- Youzan's nsqd names

YOUZAN_TOPIC_LABELS: Final = ("topic", "partition")
YOUZAN_CHANNEL_LABELS: Final = ("topic", "partition", "channel")
YOUZAN_TOPIC_GAUGES: Final[Gauges[PartitionSnapshot]] = (
    (
        "topic_queue_msg_end",
        "Messages ever stored in the partition (Youzan's name).",
        lambda p: p.end_count,
    ),
)
YOUZAN_CHANNEL_GAUGES: Final[Gauges[PartitionChannelSnapshot]] = (
    (
        "channel_depth",
        "Messages waiting in the channel in this partition (Youzan's name).",
        lambda c: c.depth,
    ),
    (
        "channel_client_cnt",
        "Consumers of this partition (Youzan's name).",
        lambda c: c.client_count,
    ),
    (
        "channel_inflight_cnt",
        "Messages in flight from this partition (Youzan's name).",
        lambda c: c.in_flight_count,
    ),
)
EPHEMERAL_SUFFIX: Final = "#ephemeral"
"""Youzan's nsqd leaves ephemeral channels out of its per-partition series; so do these."""


@attrs.frozen
class BrokerFacts:
    """What /stats says besides topics: the top-level families' figures."""

    version: str
    trionsq_version: str
    health: str
    started_at: float


def metric_families(stats: StatsSnapshot, facts: BrokerFacts) -> list[Metric]:
    """Every family but the scrape summary, from one snapshot (with clients)."""
    topics = stats.topics or ()
    channels = [(t, c) for t in topics for c in t.channels]
    partitions = [(t, p) for t in topics for p in t.partitions]
    paused = {(t.name, c.name): c.paused for t, c in channels}  # also on its partitions
    partition_channels = [
        (t, p, c, paused.get((t.name, c.channel_name), False))
        for t, p in partitions
        for c in p.channels
    ]
    families: list[Metric] = [*_top_level(facts)]
    families += _gauges(
        "nsq_topic_", TOPIC_GAUGES, TOPIC_LABELS, [(_topic_labels(t), t) for t in topics]
    )
    families += _gauges(
        "nsq_channel_",
        CHANNEL_GAUGES,
        CHANNEL_LABELS,
        [(_channel_labels(t, c), c) for t, c in channels],
    )
    families += _gauges(
        "nsq_client_",
        CLIENT_GAUGES,
        CLIENT_LABELS,
        [(_client_labels(t, c, s), s) for t, c in channels for s in c.clients or ()],
    )
    families += _gauges(
        "nsq_topic_", TOPIC_EXTRA_GAUGES, TOPIC_LABELS, [(_topic_labels(t), t) for t in topics]
    )
    families.append(
        _latencies(
            "nsq_topic_e2e_processing_latency",
            "End-to-end processing latency over the topic's channels, ns: each configured "
            "quantile of the window, count and sum since start.",
            TOPIC_LABELS,
            [(_topic_labels(t), t.e2e) for t in topics],
        )
    )
    families.append(
        _latencies(
            "nsq_channel_e2e_processing_latency",
            "End-to-end processing latency, ns: each configured quantile of the window, "
            "count and sum since start.",
            CHANNEL_LABELS,
            [(_channel_labels(t, c), c.e2e) for t, c in channels],
        )
    )
    families += _gauges(
        "nsq_topic_partition_",
        TOPIC_PARTITION_GAUGES,
        TOPIC_PARTITION_LABELS,
        [((t.name, _bool(t.paused), str(p.partition)), p) for t, p in partitions],
    )
    families += _gauges(
        "nsq_channel_partition_",
        CHANNEL_PARTITION_GAUGES,
        CHANNEL_PARTITION_LABELS,
        [
            ((t.name, c.channel_name, _bool(is_paused), str(p.partition)), c)
            for t, p, c, is_paused in partition_channels
        ],
    )
    families += _gauges(
        "",
        YOUZAN_TOPIC_GAUGES,
        YOUZAN_TOPIC_LABELS,
        [((t.name, str(p.partition)), p) for t, p in partitions],
    )
    families += _gauges(
        "",
        YOUZAN_CHANNEL_GAUGES,
        YOUZAN_CHANNEL_LABELS,
        [
            ((t.name, str(p.partition), c.channel_name), c)
            for t, p, c, _ in partition_channels
            if not c.channel_name.endswith(EPHEMERAL_SUFFIX)
        ],
    )
    return families + _replication(partitions)


def _replication(partitions: Sequence[tuple[TopicSnapshot, PartitionSnapshot]]) -> list[Metric]:
    """ISR size, leadership, commit point and each follower's lag, per replicated
    partition (docs/replication.md); none without one."""
    rows = [(t, p, p.replication) for t, p in partitions if p.replication is not None]
    if not rows:
        return []
    labels = ["topic", "partition"]
    isr = GaugeMetricFamily(
        "nsq_partition_isr_size", "In-sync replicas of the partition.", labels=labels
    )
    leader = GaugeMetricFamily(
        "nsq_partition_leader", "1 while this broker leads the partition.", labels=labels
    )
    epoch = GaugeMetricFamily("nsq_partition_epoch", "The partition's leader epoch.", labels=labels)
    commit = GaugeMetricFamily(
        "nsq_partition_commit_messages",
        "Messages committed (on every in-sync replica), as this broker knows.",
        labels=labels,
    )
    lag = GaugeMetricFamily(
        "nsq_partition_follower_lag_messages",
        "Messages the leader holds that the follower has not acknowledged (leaders only).",
        labels=[*labels, "follower"],
    )
    for t, p, status in rows:
        values = [t.name, str(p.partition)]
        members = status.get("isr")
        isr.add_metric(values, len(members) if isinstance(members, list) else 0)
        leader.add_metric(values, int(status.get("role") == "leader"))
        epoch.add_metric(values, _number(status.get("epoch")))
        commit.add_metric(values, _number(status.get("commit_count")))
        followers = status.get("followers")
        for follower in followers if isinstance(followers, list) else ():
            if isinstance(follower, dict):
                lag.add_metric(
                    [*values, str(follower.get("id"))], _number(follower.get("lag_count"))
                )
    return [isr, leader, epoch, commit, lag]


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def _top_level(facts: BrokerFacts) -> list[Metric]:
    info = GaugeMetricFamily(
        "nsq_info",
        "Always 1; the labels are the versions /stats reports.",
        labels=["version", "trionsq_version"],
    )
    info.add_metric([facts.version, facts.trionsq_version], 1)
    return [
        GaugeMetricFamily("nsq_up", "1: the broker answered this scrape.", value=1),
        info,
        GaugeMetricFamily(
            "nsq_healthy",
            "1 while /stats health is OK, 0 after a storage fault.",
            value=int(facts.health == "OK"),
        ),
        GaugeMetricFamily(
            "nsq_start_time_seconds",
            "When the broker started, Unix seconds.",
            value=math.floor(facts.started_at),
        ),
    ]


def _gauges(
    prefix: str, table: Gauges[T], labels: Sequence[str], rows: Sequence[tuple[Sequence[str], T]]
) -> list[Metric]:
    """One gauge family per table entry, one sample per row in each."""
    families: list[Metric] = []
    for name, documentation, value in table:
        family = GaugeMetricFamily(prefix + name, documentation, labels=labels)
        for label_values, row in rows:
            family.add_metric(label_values, value(row))
        families.append(family)
    return families


def _latencies(
    name: str,
    documentation: str,
    labels: Sequence[str],
    rows: Sequence[tuple[Sequence[str], LatencyResult | None]],
) -> Metric:
    """A summary: each configured quantile over the latency window (label ``quantile``,
    as client_golang's summaries), ``_count`` and ``_sum`` of every latency recorded
    since start; nothing with tracking off. (A gauge with a ``quantile`` label is what
    promtool's linter refuses.)"""
    family = SummaryMetricFamily(name, documentation, labels=labels)
    for label_values, result in rows:
        if result is None:
            continue
        keyed = dict(zip(labels, label_values, strict=True))
        for quantile, value in result.percentiles:
            quantile_labels = {**keyed, "quantile": _go_float(quantile)}
            family.samples.append(Sample(name, quantile_labels, value))
        family.add_metric(label_values, result.total_count, result.total_ns)
    return family


def _topic_labels(t: TopicSnapshot) -> tuple[str, ...]:
    return (t.name, _bool(t.paused))


def _channel_labels(t: TopicSnapshot, c: ChannelSnapshot) -> tuple[str, ...]:
    return (t.name, c.name, _bool(c.paused))


def _client_labels(t: TopicSnapshot, c: ChannelSnapshot, s: ClientStatistics) -> tuple[str, ...]:
    return (
        t.name,
        c.name,
        _bool(s.deflate),
        _bool(s.snappy),
        _bool(s.tls),
        s.client_id,
        s.hostname,
        s.version,
        s.remote_address,
    )


def _bool(value: bool) -> str:
    """Go's ``strconv.FormatBool``, as nsq_exporter writes its boolean labels."""
    return "true" if value else "false"


def _go_float(value: float) -> str:
    """Go's shortest float form (``0.99``, ``1``), as client_golang writes quantiles."""
    return repr(value).removesuffix(".0")


# ------------------------------------------------------------------- collector and route


@attrs.frozen
class Reading:
    """What one scrape read on the broker's thread: the rest needs no broker."""

    stats: StatsSnapshot
    facts: BrokerFacts
    scrapes: int
    seconds: float
    """Scrapes so far and the time their reads took, for the scrape summary."""


def _inline(read: Callable[[], Reading]) -> Reading:
    return read()


class BrokerCollector:
    """prometheus_client's Collector over one broker: it reads the broker when collected.

    The read (the /stats snapshot) runs through ``on_broker_thread``: where the registry
    is collected in a worker thread, that is ``trio.from_thread.run_sync``, so the
    broker is only ever read on its own thread and building the families and their text
    (the costly part) does not hold up the broker. Like nsq_exporter, it times each
    read into ``nsq_exporter_scrape_duration_seconds`` (never an ``error`` here).
    """

    def __init__(
        self,
        broker: Broker,
        *,
        started_at: float,
        on_broker_thread: Callable[[Callable[[], Reading]], Reading] = _inline,
    ) -> None:
        self._broker = broker
        self._started_at = started_at
        self._on_broker_thread = on_broker_thread
        self._scrapes = 0
        self._seconds = 0.0

    def collect(self) -> Iterator[Metric]:
        reading = self._on_broker_thread(self._read)
        summary = SummaryMetricFamily(
            SCRAPE_DURATION, "Time to read the broker's figures for a scrape.", labels=["result"]
        )
        summary.add_metric(["success"], reading.scrapes, reading.seconds)
        yield summary
        yield from metric_families(reading.stats, reading.facts)

    def _read(self) -> Reading:
        """On the broker's thread: one consistent snapshot, and the scrape counted."""
        began = time.perf_counter()
        broker = self._broker
        stats = snapshot(broker, topic=None, channel=None, include_clients=True, now=time.time())
        facts = BrokerFacts(NSQD_RELEASE, TRIONSQ_VERSION, broker.health, self._started_at)
        self._scrapes += 1
        self._seconds += time.perf_counter() - began
        return Reading(stats, facts, self._scrapes, self._seconds)


class MetricsRoute:
    """``GET /metrics`` for one listener: a private registry with the broker's collector
    and prometheus_client's process, platform and GC collectors (none runs a thread of
    its own)."""

    def __init__(self, broker: Broker, *, started_at: float) -> None:
        self.registry = CollectorRegistry()
        collector = BrokerCollector(
            broker, started_at=started_at, on_broker_thread=trio.from_thread.run_sync
        )
        self.registry.register(collector)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)

    async def get(self, request: Request) -> Response:
        """The exposition, collected and rendered in a worker thread for this request
        (tens of thousands of series take a good part of a second in prometheus_client);
        the collector reads the broker back on its thread."""
        body = await trio.to_thread.run_sync(generate_latest, self.registry)
        return Response(200, body, ((b"Content-Type", CONTENT_TYPE.encode()),))
