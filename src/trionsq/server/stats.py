"""nsqd's ``/stats`` bodies (spec http-api.md §2.2 text, §2.3 JSON) from the broker.

Both renderings come from one snapshot, taken the way nsqd's ``GetStats`` takes it:
a ``topic`` filter that names no topic gives no topics at all (JSON ``null``) and no
producers; a ``channel`` filter keeps that channel and drops topics without it;
without ``include_clients`` channels carry ``"clients": null`` and ``producers`` is
``null``. Topics and channels are sorted by name, clients by connection order.

The functions are synchronous and do not touch Trio: the HTTP route calls them on
the broker's thread, so the snapshot is consistent. ``now`` (Unix seconds) defaults
to the wall clock; it times the uptime, the clients' ``connected`` and the
latency windows (FIN latencies are timed with the wall clock too).

``memory`` is Go's ``runtime.MemStats`` in nsqd; here it is the interpreter's
closest figures (memory_stats.py).
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final, NotRequired, TypedDict, Unpack

import attrs

from ..broker.latency import LatencyResult, aggregate
from ..broker.offsets import FIRST_ID
from ..broker.statistics import ChannelStatistics, ClientStatistics
from ..durations import go_duration_string
from ..version import TRIONSQ_VERSION
from .memory_stats import memory_statistics

if TYPE_CHECKING:
    from ..broker.broker import Broker
    from ..broker.channel import Channel
    from ..broker.latency import LatencyWindow
    from ..broker.replication import ReplicationHook
    from ..broker.topic import Partition, Topic

__all__ = [
    "ChannelSnapshot",
    "PartitionChannelSnapshot",
    "PartitionSnapshot",
    "StatsQuery",
    "StatsSnapshot",
    "TopicSnapshot",
    "group_snapshot",
    "lost_records",
    "producer_documents",
    "snapshot",
    "stats_document",
    "stats_text",
    "topic_document",
]


@attrs.frozen(kw_only=True)
class ChannelSnapshot(ChannelStatistics):
    """One channel as /stats reports it: its partitions' statistics as one (summed),
    with what /stats adds to them."""

    backend_depth: int
    clients: tuple[ClientStatistics, ...] | None
    """None without ``include_clients``."""
    e2e: LatencyResult | None
    """None when latency tracking is off."""
    group: GroupSnapshot | None = None
    """The channel's consumer group on this broker (the JSON has it only when one exists)."""


@attrs.frozen
class GroupSnapshot:
    """A consumer group: which member consumes which partitions, after which rebalance."""

    generation: int
    assignment: dict[str, list[int]]
    members: list[str]
    """The members connected here (the assignment also names owners that are not)."""


@attrs.frozen
class PartitionChannelSnapshot:
    """One channel in one partition: where it stands in that partition's log."""

    channel_name: str
    depth: int
    in_flight_count: int
    deferred_count: int
    client_count: int
    confirmed_offset: int
    """Queue offset below which the channel finished everything (a setoffset target)."""
    confirmed_count: int
    """Messages of the partition before that point (``msgcount:`` counts these)."""


@attrs.frozen
class PartitionSnapshot:
    """One partition of a topic (Youzan): its own log and its own channels."""

    partition: int
    depth: int
    message_count: int
    end_offset: int
    """The queue offset the next message gets (``virtual_queue:`` of the tail)."""
    end_count: int
    """Messages ever stored in the partition (``msgcount:`` of the tail)."""
    channels: tuple[PartitionChannelSnapshot, ...]
    replication: dict[str, object] | None = None
    """A replicated partition's role, leader, ISR, commit point and followers' lag
    (docs/replication.md); None: not replicated."""


@attrs.frozen
class TopicSnapshot:
    """One topic as /stats reports it."""

    name: str
    channels: tuple[ChannelSnapshot, ...]
    depth: int
    backend_depth: int
    message_count: int
    message_bytes: int
    paused: bool
    e2e: LatencyResult | None
    """All of the topic's channels together, whatever the channel filter; None when
    latency tracking is off or the topic has no channel."""
    disk_bytes: int = 0
    """trionsq's addition: the topic's segment files (0 in memory)."""
    lost_count: int = 0
    """trionsq's addition: messages recovery could not give back (damaged records,
    unreadable segment parts, unfinished messages cut from a channel's log)."""
    partitions: tuple[PartitionSnapshot, ...] = ()
    publish_limit_msgs: int = 0
    """The per-producer publish limit (trionsq's extension; in the JSON only when set)."""
    publish_limit_bytes: int = 0
    publish_limit_mode: str = ""
    publish_refused_count: int = 0
    publish_throttled_count: int = 0
    """trionsq's addition (Youzan's per-partition view): each partition's figures."""


@attrs.frozen
class StatsSnapshot:
    """What ``GetStats`` returns in nsqd: None where nsqd leaves a nil slice."""

    topics: tuple[TopicSnapshot, ...] | None
    producers: tuple[ClientStatistics, ...] | None


class StatsQuery(TypedDict):
    """What a /stats body is built from, in JSON or text: the request's filters and
    options, the broker's start and health, and ``now`` (Unix seconds; the wall clock
    when absent or None)."""

    started_at: float
    health: str
    topic: str | None
    channel: str | None
    include_clients: bool
    include_mem: bool
    now: NotRequired[float | None]


# ----------------------------------------------------------------------- public API


def stats_document(
    broker: Broker, *, version: str, **query: Unpack[StatsQuery]
) -> dict[str, object]:
    """The format=json body, keys in nsqd's order (orjson keeps dict insertion order)."""
    _, stats = _taken(broker, query)
    document: dict[str, object] = {
        "version": version,
        "trionsq_version": TRIONSQ_VERSION,
        "health": query["health"],
        "start_time": math.floor(query["started_at"]),
        "topics": None if stats.topics is None else [_topic_json(t) for t in stats.topics],
    }
    if query["include_mem"]:
        document["memory"] = attrs.asdict(memory_statistics())
        if broker.storage is not None:  # trionsq's own: how the open-file limit is shared
            document["descriptors"] = attrs.asdict(broker.storage.descriptors.statistics())
    document["producers"] = (
        None if stats.producers is None else [_client_json(c) for c in stats.producers]
    )
    return document


def stats_text(broker: Broker, *, version_line: str, **query: Unpack[StatsQuery]) -> str:
    """The format=text body (§2.2), laid out as nsqd's ``printStats``."""
    when, stats = _taken(broker, query)
    started_at = query["started_at"]
    out = [
        f"{version_line}\n",
        f"start_time {_rfc3339(started_at)}\n",
        f"uptime {go_duration_string(round((when - started_at) * 1e9))}\n",
        f"\nHealth: {query['health']}\n",
    ]
    if query["include_mem"]:
        out.append("\nMemory:\n")
        for key, value in attrs.asdict(memory_statistics()).items():
            out.append(f"   {key:<25}\t{value}\n")
    topics = stats.topics or ()
    out.append("\nTopics:" if topics else "\nTopics: None\n")
    for t in topics:
        prefix = "*P " if t.paused else "   "
        out.append(
            f"\n{prefix}[{t.name:<15}] depth: {t.depth:<5d} be-depth: {t.backend_depth:<5d}"
            f" msgs: {t.message_count:<8d} e2e%: {_e2e_text(t.e2e)}\n"
        )
        for c in t.channels:
            prefix = "   *P " if c.paused else "      "
            out.append(
                f"{prefix}[{c.name:<25}] depth: {c.depth:<5d} be-depth: {c.backend_depth:<5d}"
                f" inflt: {c.in_flight_count:<4d} def: {c.deferred_count:<4d}"
                f" re-q: {c.requeue_count:<5d} timeout: {c.timeout_count:<5d}"
                f" msgs: {c.message_count:<8d} e2e%: {_e2e_text(c.e2e)}\n"
            )
            out.extend(f"        {_client_text(client, when)}\n" for client in c.clients or ())
    producers = stats.producers or ()
    out.append("\nProducers:\n" if producers else "\nProducers: None\n")
    out.extend(f"   {_client_text(client, when)}\n" for client in producers)
    return "".join(out)


def _taken(broker: Broker, query: StatsQuery) -> tuple[float, StatsSnapshot]:
    """When the body is taken, and the snapshot it shows."""
    now = query.get("now")
    when = time.time() if now is None else now
    stats = snapshot(
        broker,
        topic=query["topic"],
        channel=query["channel"],
        include_clients=query["include_clients"],
        now=when,
    )
    return when, stats


def snapshot(
    broker: Broker, *, topic: str | None, channel: str | None, include_clients: bool, now: float
) -> StatsSnapshot:
    """nsqd's ``GetStats(topic, channel, includeClients)`` over the broker's state."""
    if topic:
        found = broker.topics.get(topic)
        if found is None:
            return StatsSnapshot(topics=None, producers=None)
        chosen = [found]
    else:
        chosen = sorted(broker.topics.values(), key=lambda t: t.name)
    shown = (_topic_snapshot(broker, t, channel, topic, include_clients, now) for t in chosen)
    topics = [t for t in shown if t is not None]
    producers = _producers(broker, topic) if include_clients else None
    return StatsSnapshot(topics=tuple(topics), producers=producers)


def topic_document(broker: Broker, topic: Topic, now: float) -> dict[str, object]:
    """``topic`` as ``/stats?format=json&include_clients=true`` shows it at ``now`` (Unix
    seconds): the admin stream builds a snapshot topic by topic, and only the topics
    whose figures moved (topic_figures.py)."""
    shown = _topic_snapshot(broker, topic, None, None, True, now)
    assert shown is not None  # noqa: S101 - None only with a channel filter
    return _topic_json(shown)


def producer_documents(broker: Broker) -> list[dict[str, object]] | None:
    """The ``producers`` of ``/stats?format=json&include_clients=true``."""
    found = _producers(broker, None)
    return None if found is None else [_client_json(c) for c in found]


# ----------------------------------------------------------------------- snapshot parts


def _topic_snapshot(
    broker: Broker,
    t: Topic,
    channel: str | None,
    topic: str | None,
    include_clients: bool,
    now: float,
) -> TopicSnapshot | None:
    """One topic (None: the ``channel`` filter names none of its channels); ``topic``
    is the request's filter, which narrows its clients' publish counts. What this reads,
    topic_figures.py reads too (the admin stream rebuilds a topic when it moved)."""
    by_name = _channels_by_name(t)
    if channel:
        if channel not in by_name:
            return None
        names = [channel]
    else:
        names = sorted(by_name)
    # each channel's statistics once: the channel and partition views both read them
    of = {id(c): c.statistics() for name in names for c in by_name[name]}
    channels = tuple(
        _channel_snapshot(broker, by_name[name], of, topic, include_clients, now) for name in names
    )
    stats = t.statistics()
    return TopicSnapshot(
        name=t.name,
        channels=channels,
        depth=stats.depth,
        backend_depth=0,
        message_count=stats.message_count,
        message_bytes=stats.message_bytes,
        paused=stats.paused,
        e2e=aggregate(_windows([c for group in by_name.values() for c in group]), now),
        disk_bytes=sum(getattr(p.log, "disk_bytes", 0) for p in t.partitions),
        lost_count=lost_records(broker, t),
        partitions=tuple(
            _partition_snapshot(p, set(names), of, broker.replication) for p in t.partitions
        ),
        **_publish_limit_fields(t),
    )


def _producers(broker: Broker, topic: str | None) -> tuple[ClientStatistics, ...] | None:
    """The clients that published (their counts for ``topic`` only, with that filter)."""
    found = [
        _for_topic(s, topic)
        for s in (client.statistics() for client in broker.clients.values())
        if s.pub_counts
    ]
    return tuple(found) or None  # nsqd leaves a nil slice: null


def _channels_by_name(topic: Topic) -> dict[str, list[Channel]]:
    """Each channel name with its channel in every partition (plain topics have one)."""
    by_name: dict[str, list[Channel]] = {}
    for partition in topic.partitions:
        for name, found in partition.channels.items():
            by_name.setdefault(name, []).append(found)
    return by_name


def _partition_snapshot(
    partition: Partition,
    names: set[str],
    of: dict[int, ChannelStatistics],
    replication: ReplicationHook | None,
) -> PartitionSnapshot:
    """``of``: each channel's statistics, by ``id(channel)``."""
    log = partition.log
    channels = []
    for name in sorted(names & partition.channels.keys()):
        channel = partition.channels[name]
        stats = of[id(channel)]
        cursor = channel.cursor
        confirmed = getattr(cursor, "confirmed_id", log.next_id)  # ephemeral: no position
        channels.append(
            PartitionChannelSnapshot(
                channel_name=name,
                depth=stats.depth,
                in_flight_count=stats.in_flight_count,
                deferred_count=stats.deferred_count,
                client_count=stats.client_count,
                confirmed_offset=getattr(cursor, "confirmed_offset", log.next_offset),
                confirmed_count=confirmed - FIRST_ID,
            )
        )
    return PartitionSnapshot(
        partition=partition.index,
        depth=partition.held(),
        message_count=partition.message_count,
        end_offset=log.next_offset,
        end_count=log.next_id - FIRST_ID,
        channels=tuple(channels),
        replication=(
            replication.partition_status(partition.topic, partition.index)
            if replication is not None
            else None
        ),
    )


def _windows(channels: list[Channel]) -> list[LatencyWindow]:
    return [c.latency for c in channels if c.latency is not None]


def _channel_snapshot(
    broker: Broker,
    parts: list[Channel],
    of: dict[int, ChannelStatistics],
    topic: str | None,
    include_clients: bool,
    now: float,
) -> ChannelSnapshot:
    """One channel over its partitions (``of``: each part's statistics by id)."""
    total = _summed([of[id(c)] for c in parts])
    clients: tuple[ClientStatistics, ...] | None = None
    if include_clients:
        connected = broker.clients
        clients = tuple(
            _for_topic(connected[client_id].statistics(), topic)
            for c in parts
            for client_id in c.consumers
            if client_id in connected
        )
    return ChannelSnapshot(
        name=parts[0].name,
        depth=total.depth,
        backend_depth=0,
        in_flight_count=total.in_flight_count,
        deferred_count=total.deferred_count,
        message_count=total.message_count,
        requeue_count=total.requeue_count,
        timeout_count=total.timeout_count,
        client_count=total.client_count,
        clients=clients,
        paused=total.paused,
        e2e=aggregate(_windows(parts), now),
        max_attempts=total.max_attempts,
        dead_letter_count=total.dead_letter_count,
        ttl_ns=total.ttl_ns,
        expired_count=total.expired_count,
        group=group_snapshot(broker, parts[0].topic, parts[0].name),
        rate_limit_msgs=total.rate_limit_msgs,
        rate_limit_bytes=total.rate_limit_bytes,
        throttled_count=total.throttled_count,
    )


_SUMMED: Final = (
    "depth",
    "in_flight_count",
    "deferred_count",
    "message_count",
    "requeue_count",
    "timeout_count",
    "client_count",
    "dead_letter_count",
    "expired_count",
)
"""The counts of a channel that add up over its partitions."""


def _summed(stats: list[ChannelStatistics]) -> ChannelStatistics:
    """A channel's partitions as one: counts summed, the bounds' largest, paused when
    every partition is, one rate limit (the partitions share it). A plain topic's one
    partition is returned as it is: most channels, so no sums to build for them."""
    if len(stats) == 1:
        return stats[0]
    return attrs.evolve(
        stats[0],
        paused=all(s.paused for s in stats),
        max_attempts=max(s.max_attempts for s in stats),
        ttl_ns=max(s.ttl_ns for s in stats),
        **{name: sum(getattr(s, name) for s in stats) for name in _SUMMED},
    )


def group_snapshot(broker: Broker, topic: str, channel: str) -> GroupSnapshot | None:
    """A channel's consumer group as /stats shows it (None: the channel has none)."""
    group = broker.groups.get((topic, channel))
    if group is None:
        return None
    return GroupSnapshot(group.generation, group.assignment(), sorted(group.connections))


class _PublishLimitFields(TypedDict, total=False):
    publish_limit_msgs: int
    publish_limit_bytes: int
    publish_limit_mode: str
    publish_refused_count: int
    publish_throttled_count: int


# shaped as broker/channel.Channel._rate_limit_statistics (a channel's limit), not one
# helper: other keys, and this limit has a mode and refusals that one has not
def _publish_limit_fields(topic: Topic) -> _PublishLimitFields:
    limit = topic.publish_limit
    if limit is None:
        return {}
    return {
        "publish_limit_msgs": limit.rates.msgs_per_sec,
        "publish_limit_bytes": limit.rates.bytes_per_sec,
        "publish_limit_mode": limit.mode.value,
        "publish_refused_count": limit.refused,
        "publish_throttled_count": limit.throttled,
    }


def _for_topic(stats: ClientStatistics, topic: str | None) -> ClientStatistics:
    """nsqd's ``Stats(topic)``: with a topic filter, only that topic's publish count."""
    if not topic:
        return stats
    return attrs.evolve(stats, pub_counts=tuple(p for p in stats.pub_counts if p.topic == topic))


# ----------------------------------------------------------------------- JSON


def _e2e_json(result: LatencyResult | None) -> dict[str, object]:
    """nsqd's quantile ``Result``; with tracking off, ``{"count":0,"percentiles":null}``."""
    if result is None:
        return {"count": 0, "percentiles": None}
    return {
        "count": result.count,
        "percentiles": [{"quantile": q, "value": v} for q, v in result.percentiles],
    }


def lost_records(broker: Broker, topic: Topic) -> int:
    """Records lost per partition: those recovery found missing at start, those the
    first read of an older segment found missing later, plus what channels found cut
    from the log."""
    storage = broker.storage
    reports = storage.reports if storage is not None else {}
    logs = storage.logs if storage is not None else {}
    lost = 0
    for partition in topic.partitions:
        key = (topic.name, partition.index)
        report = reports.get(key)
        if report is not None:
            lost += report.missing_ids
        topic_log = logs.get(key)
        if topic_log is not None:
            lost += topic_log.late_missing_ids
        lost += sum(channel.lost for channel in partition.channels.values())
    return lost


_PARTITION_FIELDS: Final = tuple(
    field.name
    for field in attrs.fields(PartitionSnapshot)
    if field.name not in ("channels", "replication")
)
_PARTITION_CHANNEL_FIELDS: Final = tuple(
    field.name for field in attrs.fields(PartitionChannelSnapshot)
)


def _topic_json(t: TopicSnapshot) -> dict[str, object]:
    return {
        "topic_name": t.name,
        "channels": [_channel_json(c) for c in t.channels],
        "depth": t.depth,
        "backend_depth": t.backend_depth,
        "message_count": t.message_count,
        "message_bytes": t.message_bytes,
        "paused": t.paused,
        "e2e_processing_latency": _e2e_json(t.e2e),
        "disk_bytes": t.disk_bytes,
        "lost_count": t.lost_count,
        "partitions": [_partition_json(p) for p in t.partitions],
        **_publish_limit_json(t),
    }


def _publish_limit_json(t: TopicSnapshot) -> dict[str, object]:
    """trionsq's publish limit fields, only for a topic that has one."""
    if not (t.publish_limit_msgs or t.publish_limit_bytes):
        return {}
    return {
        "publish_limit_msgs": t.publish_limit_msgs,
        "publish_limit_bytes": t.publish_limit_bytes,
        "publish_limit_mode": t.publish_limit_mode,
        "publish_refused_count": t.publish_refused_count,
        "publish_throttled_count": t.publish_throttled_count,
    }


def _partition_json(p: PartitionSnapshot) -> dict[str, object]:
    # field by field: attrs.asdict's generality cost 3.5 µs a channel, 4 ms of a
    # /stats of 900 channels (and of every admin stream snapshot)
    document: dict[str, object] = {name: getattr(p, name) for name in _PARTITION_FIELDS}
    document["channels"] = [
        {name: getattr(c, name) for name in _PARTITION_CHANNEL_FIELDS} for c in p.channels
    ]
    if p.replication is not None:
        document["replication"] = p.replication
    return document


def _channel_json(c: ChannelSnapshot) -> dict[str, object]:
    """zone/region/global_msg_count are omitempty in nsqd and always 0 here: omitted."""
    return {
        "channel_name": c.name,
        "depth": c.depth,
        "backend_depth": c.backend_depth,
        "in_flight_count": c.in_flight_count,
        "deferred_count": c.deferred_count,
        "message_count": c.message_count,
        "requeue_count": c.requeue_count,
        "timeout_count": c.timeout_count,
        "client_count": c.client_count,
        "clients": None if c.clients is None else [_client_json(s) for s in c.clients],
        "paused": c.paused,
        "e2e_processing_latency": _e2e_json(c.e2e),
        **_dead_letter_json(c),
        **_ttl_json(c),
        **_group_json(c),
        **_rate_limit_json(c),
    }


def _rate_limit_json(c: ChannelSnapshot) -> dict[str, object]:
    """trionsq's channel rate limit fields, only for a channel that has one."""
    if not (c.rate_limit_msgs or c.rate_limit_bytes):
        return {}
    return {
        "rate_limit_msgs": c.rate_limit_msgs,
        "rate_limit_bytes": c.rate_limit_bytes,
        "throttled_count": c.throttled_count,
    }


def _group_json(c: ChannelSnapshot) -> dict[str, object]:
    """trionsq's consumer group of the channel, only while it has one."""
    if c.group is None:
        return {}
    group = c.group
    return {
        "group": {
            "generation": group.generation,
            "assignment": group.assignment,
            "members": group.members,
        }
    }


def _ttl_json(c: ChannelSnapshot) -> dict[str, object]:
    """trionsq's TTL fields, only for a topic with a TTL or a channel that skipped a
    message for its ``##ttl``: the TTL as Go prints a duration, and the count."""
    if not (c.ttl_ns or c.expired_count):
        return {}
    return {"ttl": go_duration_string(c.ttl_ns), "expired_count": c.expired_count}


def _dead_letter_json(c: ChannelSnapshot) -> dict[str, object]:
    """trionsq's dead-letter fields, only for a channel that has a bound or sent any
    (a channel without keeps nsqd's exact document)."""
    if not (c.max_attempts or c.dead_letter_count):
        return {}
    return {"max_attempts": c.max_attempts, "dead_letter_count": c.dead_letter_count}


def _client_json(s: ClientStatistics) -> dict[str, object]:
    """nsqd's ``ClientV2Stats`` JSON: omitempty fields only when they hold a value."""
    # its blocks repeat on purpose: written out, field by field in nsqd's order, it
    # takes 1.5 us a client; one loop over the fields marked omitempty took 2.5, every
    # field copied at once by attrgetter then the empty omitempty ones deleted 2.15,
    # each run of plain fields copied by attrgetter 2.3 (issue 33)
    document: dict[str, object] = {
        "client_id": s.client_id,
        "hostname": s.hostname,
        "version": s.version,
        "remote_address": s.remote_address,
        "state": s.state,
        "ready_count": s.ready_count,
        "in_flight_count": s.in_flight_count,
        "message_count": s.message_count,
    }
    topology_counts = {
        "zone_local_msg_count": s.zone_local_msg_count,
        "region_local_msg_count": s.region_local_msg_count,
        "global_msg_count": s.global_msg_count,
    }
    document.update({key: count for key, count in topology_counts.items() if count})
    document.update(
        finish_count=s.finish_count,
        requeue_count=s.requeue_count,
        connect_ts=s.connect_ts,
        sample_rate=s.sample_rate,
        deflate=s.deflate,
        snappy=s.snappy,
        user_agent=s.user_agent,
    )
    if s.authed:
        document["authed"] = True
    if s.auth_identity:
        document["auth_identity"] = s.auth_identity
    if s.auth_identity_url:
        document["auth_identity_url"] = s.auth_identity_url
    document["topology_zone"] = s.topology_zone
    document["topology_region"] = s.topology_region
    if s.pub_counts:
        document["pub_counts"] = [{"topic": p.topic, "count": p.count} for p in s.pub_counts]
    document.update(
        tls=s.tls,
        tls_cipher_suite=s.tls_cipher_suite,
        tls_version=s.tls_version,
        tls_negotiated_protocol=s.tls_negotiated_protocol,
        tls_negotiated_protocol_is_mutual=s.tls_negotiated_protocol_is_mutual,
    )
    if s.group_member:
        document["group_member"] = s.group_member
    if s.max_msgs_per_sec or s.max_bytes_per_sec:  # trionsq's consumer rate limit
        document["max_msgs_per_sec"] = s.max_msgs_per_sec
        document["max_bytes_per_sec"] = s.max_bytes_per_sec
    return document


# ----------------------------------------------------------------------- text


def _client_text(s: ClientStatistics, now: float) -> str:
    """nsqd's ``ClientV2Stats.String()``: a producer line if it published, else a consumer's."""
    connected = go_duration_string(int(now - s.connect_ts) * 1_000_000_000)
    port = s.remote_address.rpartition(":")[2] if ":" in s.remote_address else ""
    ident = f"{s.hostname}:{port} {s.user_agent}"
    if s.pub_counts:
        total = sum(p.count for p in s.pub_counts)
        topics = ",".join(f"{p.topic}={p.count}" for p in s.pub_counts)
        return (
            f"[{s.version} {ident:<21}] msgs: {total:<8d} topics: {topics} connected: {connected}"
        )
    return (
        f"[{s.version} {ident:<21}] state: {s.state} inflt: {s.in_flight_count:<4d}"
        f" rdy: {s.ready_count:<4d} fin: {s.finish_count:<8d} re-q: {s.requeue_count:<8d}"
        f" msgs: {s.message_count:<8d} connected: {connected}"
    )


def _e2e_text(result: LatencyResult | None) -> str:
    """The quantile values as nsqd's ``NanoSecondToHuman``, comma separated."""
    if result is None:
        return ""
    return ", ".join(_nanoseconds_to_human(value) for _, value in result.percentiles)


def _nanoseconds_to_human(value: float) -> str:
    if value > 1e9:
        return f"{value / 1e9:.1f}s"
    if value > 1e6:
        return f"{value / 1e6:.1f}ms"
    if value > 1e3:
        return f"{value / 1e3:.1f}us"
    return f"{value:.1f}ns"


def _rfc3339(unix_seconds: float) -> str:
    """Go's ``time.RFC3339`` in the local zone: ``2006-01-02T15:04:05Z07:00``."""
    moment = datetime.fromtimestamp(math.floor(unix_seconds), tz=UTC).astimezone()
    offset = moment.utcoffset()
    minutes = 0 if offset is None else int(offset.total_seconds()) // 60
    if minutes == 0:
        zone = "Z"
    else:
        sign = "-" if minutes < 0 else "+"
        hours, rest = divmod(abs(minutes), 60)
        zone = f"{sign}{hours:02d}:{rest:02d}"
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + zone
