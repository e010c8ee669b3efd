"""Consumer state a replicated partition's leader ships to its followers.

What a broker persists for a durable topic (``metadata.json``: channels, pauses,
dead-letter bounds, rate limits, TTL, publish limit) and for each channel of the
partition (its state file: confirmed position, finished ids, deferrals, delivery
counts) is captured on the leader as one JSON document, the same shapes as on disk
(``broker/metadata.py``, ``queues/cursor_state.py``), and applied on a follower as a
restart would restore it, so after a failover a channel resumes from where it was
and redelivers only what was in flight (or finished after the last shipment). The
consumer-group member that owns each channel's partition goes with it, so that the
new leader's first deal starts from it (sticky, as on the leader) rather than
dealing the partition afresh.
The follower's persister then writes it like any state, so it survives the
follower's own restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
import trio

from ..protocol.names import is_ephemeral
from ..queues.cursor import ChannelCursor
from ..queues.cursor_state import decode_state, encode_state, restore_channel
from . import metadata
from .rate_limits import PublishLimit, PublishMode, RateLimit, Rates
from .state_writes import channel_state

if TYPE_CHECKING:
    from ..queues.cursor_state import ChannelState
    from .broker import Broker
    from .topic import Partition, Topic

__all__ = ["apply_consumer_state", "capture_consumer_state"]


def capture_consumer_state(broker: Broker, topic_name: str, index: int) -> bytes:
    """The topic's metadata entry and the partition's channel states, as JSON."""
    topic = broker.topics[topic_name]
    entry = metadata.topic_entry(topic_name, topic)
    now, wall = trio.current_time(), broker.wall_clock()
    partition = topic.partitions[index]
    shipped = metadata.Metadata(metadata.METADATA_VERSION, (entry,))
    parts = [b'{"meta":', metadata.encode_metadata(shipped), b',"channels":{']
    first = True
    for name, channel in sorted(partition.channels.items()):
        if not isinstance(channel.cursor, ChannelCursor):
            continue  # ephemeral: nothing to keep
        if not first:
            parts.append(b",")
        first = False
        parts += [orjson.dumps(name), b":", encode_state(channel_state(channel, now, wall))]
    owners = {
        name: channel.group.owner
        for name, channel in partition.channels.items()
        if channel.group.owner and isinstance(channel.cursor, ChannelCursor)
    }
    parts += [b'},"group_owners":', orjson.dumps(owners, option=orjson.OPT_SORT_KEYS), b"}"]
    return b"".join(parts)


def apply_consumer_state(broker: Broker, topic_name: str, index: int, data: bytes) -> None:
    """Make the follower's topic and partition channels what the leader shipped.

    Raises:
        ValueError: not a document :func:`capture_consumer_state` makes.
    """
    document = orjson.loads(data)
    if not isinstance(document, dict):
        raise ValueError("consumer state: not a JSON object")
    shipped = metadata.decode_metadata(orjson.dumps(document.get("meta")), what="consumer state")
    channels = document.get("channels")
    if not isinstance(channels, dict):
        raise ValueError("consumer state: no channels")
    topic = broker.topics[topic_name]
    partition = topic.partitions[index]
    entry = shipped.topic(topic_name)
    if entry is not None:
        _apply_topic(topic, entry)
    now, wall = trio.current_time(), broker.wall_clock()
    for name in [n for n in partition.channels if n not in channels and not is_ephemeral(n)]:
        broker.delete_channel(topic_name, index, name)
    for name, raw in channels.items():
        _apply_channel(partition, name, decode_state(orjson.dumps(raw)), now, wall)
    owners = document.get("group_owners", {})
    if not isinstance(owners, dict):
        raise ValueError("consumer state: group owners not an object")
    for name in channels:
        owner = owners.get(name, "")
        broker.group_coordinator.shipped_owner(topic_name, name, index, str(owner))
    if entry is not None:
        for meta in entry.channels:
            channel = partition.channels.get(meta.name)
            if channel is not None:
                channel.paused = meta.paused
                channel.max_attempts = meta.max_attempts
                channel.dead_letter_topic = meta.dead_letter_topic
    if broker.storage is not None:
        broker.storage.changed()


def _apply_topic(topic: Topic, entry: metadata.TopicMeta) -> None:
    topic.ttl.ttl_ns = entry.ttl_ns
    topic.ttl.headers = entry.ttl_headers
    now = trio.current_time()
    rates = Rates(entry.publish_limit_msgs, entry.publish_limit_bytes)
    if not rates:
        topic.publish_limit = None
    elif topic.publish_limit is None or topic.publish_limit.rates != rates:
        topic.publish_limit = PublishLimit(rates, now, PublishMode(entry.publish_limit_mode))
    for meta in entry.channels:
        channel_rates = Rates(meta.rate_limit_msgs, meta.rate_limit_bytes)
        limit = topic.channel_limits.get(meta.name)
        if not channel_rates:
            topic.channel_limits.pop(meta.name, None)
        elif limit is None or limit.rates != channel_rates:
            topic.channel_limits[meta.name] = RateLimit(channel_rates, now)
    if topic.paused != entry.paused:
        topic.set_paused(entry.paused)


def _apply_channel(
    partition: Partition, name: str, state: ChannelState, now: float, wall: int
) -> None:
    channel = partition.channel(name, oldest=True)
    restored = restore_channel(
        channel.log,
        state,
        now_monotonic=now,
        now_wall_ns=wall,
        label=f"{partition.topic}/{partition.index}/{name}",
    )
    channel.move_to(restored.cursor.confirmed_id)  # drops what was deferred or counted
    channel.cursor = restored.cursor
    channel.saved_confirmed = restored.cursor.confirmed_id
    for due, internal_id in restored.deferred:
        record = channel.log.get(internal_id)
        if record is not None:
            channel.defer_ahead(record, due, now=now, wall_ns=wall)
    for internal_id in restored.finished_ids:
        channel.skip_finished(internal_id)
    channel.restore_attempts({i: n for i, n in restored.attempts.items() if channel.unfinished(i)})
