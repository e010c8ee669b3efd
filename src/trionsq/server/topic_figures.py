"""A topic's figures: everything its /stats document is made of, read without building it.

The admin stream sends a snapshot of every topic up to ten times a second to each
subscription; building a topic's document (stats.py's ``_topic_snapshot`` and its
JSON) costs about 60 µs, 17-20 ms for 300 topics of 3 channels, while most of a
large broker's topics do nothing between two snapshots. Reading the figures costs a
fifth of that (3-3.5 ms for the 300), so admin_snapshots.py builds an idle topic's
part again only when they moved.

The promise: equal figures at two moments, equal documents (``now`` included, for the
latency windows). So this reads every piece of state ``_topic_snapshot`` reads, with
its clients and no filter; a field added there must be read here too, which
tests/integration/test_admin_snapshots.py checks against a whole build after every
kind of change it makes (a field it does not change is not checked: add the change
there with the field).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .stats import group_snapshot, lost_records

if TYPE_CHECKING:
    from ..broker.broker import Broker
    from ..broker.channel import Channel
    from ..broker.topic import Topic

__all__ = ["topic_figures"]


def topic_figures(broker: Broker, topic: Topic, now: float) -> tuple[object, ...]:
    """The figures of ``topic`` at ``now`` (Unix seconds), comparable with ``==``."""
    limit, replication = topic.publish_limit, broker.replication
    figures: list[object] = [
        topic.paused,
        lost_records(broker, topic),
        None if limit is None else (limit.rates, limit.mode, limit.refused, limit.throttled),
    ]
    for partition in topic.partitions:
        log = partition.log
        figures.append(
            (
                partition.index,
                partition.held(),
                partition.message_count,
                partition.message_bytes,
                log.next_offset,
                log.next_id,
                getattr(log, "disk_bytes", 0),
                None
                if replication is None
                else replication.partition_status(topic.name, partition.index),
            )
        )
        figures.extend(
            _channel_figures(broker, topic.name, channel, now)
            for channel in partition.channels.values()
        )
    return tuple(figures)


def _channel_figures(
    broker: Broker, topic: str, channel: Channel, now: float
) -> tuple[object, ...]:
    """What ``Channel.statistics`` reads (without building it: a fifth of the cost), its
    FINs (the snapshot's ``finish_count``), its cursor, its latency window's version,
    its consumers' statistics and its consumer group."""
    cursor, latency, limit, consumers = (
        channel.cursor,
        channel.latency,
        channel.rate_limit,
        channel.consumers,
    )
    connected = broker.clients
    return (
        channel.name,
        channel.depth,
        len(channel.in_flight),
        len(channel.deferred),
        channel.message_count,
        channel.intake(),
        channel.requeue_count,
        channel.timeout_count,
        channel.paused,
        channel.attempts_bound(),
        channel.dead_letter_count,
        channel.ttl.ttl_ns,
        channel.expired_count,
        None if limit is None else (limit.rates, limit.throttled),
        channel.finish_count,
        getattr(cursor, "confirmed_offset", None),
        getattr(cursor, "confirmed_id", None),
        None if latency is None else latency.version(now),
        tuple(
            connected[client].statistics() if client in connected else None for client in consumers
        )
        if consumers
        else (),
        group_snapshot(broker, topic, channel.name)
        if (topic, channel.name) in broker.groups
        else None,
    )
