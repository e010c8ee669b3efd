"""Which topics and channels exist, and their flags: ``<data-path>/metadata.json``.

nsqd's ``nsqd.dat`` plays this role; the format is ours (docs/storage.md). Ephemeral
topics and channels are never written (nsqd's rule: they do not survive a restart).

File format (version 1): one compact JSON object, topics and channels sorted by name,
so the same broker state always gives the same bytes::

    {"version":1,"topics":[{"name":"orders","partitions":1,"paused":false,
     "ext":false,"ordered":false,"channels":[{"name":"billing","paused":true}]}]}

A topic's ``paused`` is the topic pause; a channel's ``paused`` is its pause in any
partition (a pause is never dropped). A channel listed is restored in every
partition. Decoding is strict: a wrong version, a missing member, a wrong type, an
invalid or ephemeral name, a repeated name or a partition count below 1 is a
:class:`MetadataError` that says what and where.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs

from ..persist import (
    StorageFormatError,
    decode_versioned,
    ensure_directory,
    read_optional,
    storage_converter,
    write_atomic,
)
from ..protocol.names import is_ephemeral, is_valid_name
from ..serialization import dumps, omit_defaults
from .rate_limits import PublishMode, Rates

if TYPE_CHECKING:
    import os
    from collections.abc import Collection, Mapping

    from .topic import Topic, Topics

__all__ = [
    "METADATA_FILE",
    "METADATA_VERSION",
    "ChannelMeta",
    "Metadata",
    "MetadataError",
    "TopicMeta",
    "decode_metadata",
    "encode_metadata",
    "load_metadata",
    "metadata_path",
    "repair",
    "save_metadata",
    "snapshot",
]

storage_log = logging.getLogger("trionsq.storage")

METADATA_VERSION: Final = 1
METADATA_FILE: Final = "metadata.json"

_CONVERTER: Final = storage_converter()


class MetadataError(StorageFormatError):
    """metadata.json cannot be used; the broker refuses to start rather than guess."""


@attrs.frozen
class ChannelMeta:
    """A durable channel of a topic."""

    name: str
    paused: bool
    max_attempts: int = 0
    """Dead-letter bound set over HTTP (0: none; written only when set)."""
    dead_letter_topic: str = ""
    """Named dead-letter topic (empty: ``<topic>.dead``; written only when set)."""
    rate_limit_msgs: int = 0
    """The channel's rate limit in messages/s (0: none; written only when set)."""
    rate_limit_bytes: int = 0
    """The channel's rate limit in bytes/s (0: none; written only when set)."""


omit_defaults(
    _CONVERTER,
    ChannelMeta,
    "max_attempts",
    "dead_letter_topic",
    "rate_limit_msgs",
    "rate_limit_bytes",
)


@attrs.frozen
class TopicMeta:
    """A durable topic: its partition count, flags and channels."""

    name: str
    partitions: int
    paused: bool
    ext: bool
    """Created with ``extend``: messages carry an ext header (PUB_EXT)."""
    ordered: bool
    channels: tuple[ChannelMeta, ...]
    ttl_ns: int = 0
    """The topic's TTL (0: none; written only when set)."""
    ttl_headers: bool = False
    """A message with ``##ttl`` was published to it (written only when so)."""
    publish_limit_msgs: int = 0
    """Per-producer publish limit in messages/s (0: none; written only when set)."""
    publish_limit_bytes: int = 0
    """Per-producer publish limit in bytes/s (0: none; written only when set)."""
    publish_limit_mode: str = PublishMode.THROTTLE.value
    """What the publish limit does over its rate: ``throttle`` or ``refuse`` (written
    only when ``refuse``)."""


omit_defaults(
    _CONVERTER,
    TopicMeta,
    "ttl_ns",
    "ttl_headers",
    "publish_limit_msgs",
    "publish_limit_bytes",
    "publish_limit_mode",
)


@attrs.frozen
class Metadata:
    """Every durable topic, sorted by name."""

    version: int
    topics: tuple[TopicMeta, ...]

    def topic(self, name: str) -> TopicMeta | None:
        """The topic's entry, if listed."""
        return next((t for t in self.topics if t.name == name), None)


def encode_metadata(metadata: Metadata) -> bytes:
    """Compact JSON bytes (the module docstring's format)."""
    return dumps(metadata, _CONVERTER)


def decode_metadata(data: bytes, *, what: str = METADATA_FILE) -> Metadata:
    """Parse and check metadata; ``what`` names the file in the error.

    Every member is required; unknown members are ignored.

    Raises:
        MetadataError: not usable version-1 metadata.
    """
    metadata = decode_versioned(
        data, Metadata, _CONVERTER, version=METADATA_VERSION, what=what, error=MetadataError
    )
    _check(metadata, what)
    return metadata


def _check(metadata: Metadata, what: str) -> None:
    names: set[str] = set()
    for topic in metadata.topics:
        where = f"{what}: topic {topic.name!r}"
        if not _durable(topic.name):
            raise MetadataError(f"{where}: not a valid durable topic name")
        if topic.name in names:
            raise MetadataError(f"{where}: listed twice")
        names.add(topic.name)
        if topic.partitions < 1:
            raise MetadataError(f"{where}: partitions must be at least 1, got {topic.partitions}")
        if topic.publish_limit_mode not in _PUBLISH_MODES:
            raise MetadataError(
                f"{where}: publish_limit_mode must be throttle or refuse,"
                f" got {topic.publish_limit_mode!r}"
            )
        channels: set[str] = set()
        for channel in topic.channels:
            if not _durable(channel.name):
                raise MetadataError(
                    f"{where}: channel {channel.name!r} is not a valid durable name"
                )
            if channel.name in channels:
                raise MetadataError(f"{where}: channel {channel.name!r} listed twice")
            channels.add(channel.name)


_PUBLISH_MODES: Final = frozenset(mode.value for mode in PublishMode)


def _durable(name: str) -> bool:
    return is_valid_name(name.encode()) and not is_ephemeral(name)


def snapshot(broker: Topics) -> Metadata:
    """The live broker's durable topics and channels (call on the broker's thread)."""
    topics = [
        topic_entry(name, broker.topics[name])
        for name in sorted(broker.topics)
        if not broker.topics[name].ephemeral
    ]
    return Metadata(METADATA_VERSION, tuple(topics))


def topic_entry(name: str, topic: Topic) -> TopicMeta:
    """One durable topic's entry (a replicated partition's leader ships it too)."""
    limit = topic.publish_limit
    publish = limit.rates if limit is not None else Rates()
    mode = limit.mode if limit is not None else PublishMode.THROTTLE
    paused: dict[str, bool] = {}
    dead_letters: dict[str, tuple[int, str]] = {}
    for partition in topic.partitions:
        for channel_name, channel in partition.channels.items():
            if not is_ephemeral(channel_name):
                paused[channel_name] = paused.get(channel_name, False) or channel.paused
                dead_letters[channel_name] = (channel.max_attempts, channel.dead_letter_topic)
    return TopicMeta(
        name=name,
        partitions=len(topic.partitions),
        paused=topic.paused,
        ext=topic.ext,
        ordered=topic.ordered,
        channels=tuple(
            ChannelMeta(c, paused[c], *dead_letters[c], *_channel_rates(topic, c))
            for c in sorted(paused)
        ),
        ttl_ns=topic.ttl.ttl_ns,
        ttl_headers=topic.ttl.headers,
        publish_limit_msgs=publish.msgs_per_sec,
        publish_limit_bytes=publish.bytes_per_sec,
        publish_limit_mode=mode.value,
    )


def _channel_rates(topic: Topic, channel: str) -> tuple[int, int]:
    """A channel's rate limit as (messages/s, bytes/s); (0, 0): none."""
    limit = topic.channel_limits.get(channel)
    if limit is None:
        return 0, 0
    return limit.rates.msgs_per_sec, limit.rates.bytes_per_sec


def repair(
    metadata: Metadata,
    topics_on_disk: Mapping[str, int],
    channels_on_disk: Mapping[tuple[str, int], Collection[str]] | None = None,
) -> Metadata:
    """Add what the disk proves exists but metadata lacks (metadata written before a
    crash lags the log); logged on ``trionsq.storage``.

    ``topics_on_disk``: topic -> partition count seen from its segment files;
    ``channels_on_disk``: (topic, partition) -> channels with a state file
    (:func:`trionsq.queues.cursor_state.scan_channel_states`). A missing topic is
    added unpaused, with ext/ordered false (unknown); a partition count below what
    the disk shows is raised; a missing channel is added (its state file's pause
    flag applies, see docs/storage.md). Nothing is ever removed here. Ephemeral and
    invalid names are ignored.
    """
    partitions: dict[str, int] = {}
    channels: dict[str, set[str]] = {}
    for name, count in topics_on_disk.items():
        if _durable(name) and count > 0:
            partitions[name] = max(partitions.get(name, 0), count)
    for (name, index), names in (channels_on_disk or {}).items():
        if not _durable(name) or index < 0:
            continue
        partitions[name] = max(partitions.get(name, 0), index + 1)
        channels.setdefault(name, set()).update(c for c in names if _durable(c))
    added_topics = raised = added_channels = 0
    by_name = {topic.name: topic for topic in metadata.topics}
    for name in sorted(partitions):
        topic = by_name.get(name)
        if topic is None:
            topic = TopicMeta(
                name, partitions[name], paused=False, ext=False, ordered=False, channels=()
            )
            added_topics += 1
            storage_log.warning(
                "metadata is behind the log: topic %s (%d partition(s)) found on disk, added",
                name,
                partitions[name],
            )
        elif topic.partitions < partitions[name]:
            storage_log.warning(
                "metadata is behind the log: topic %s has %d partition(s) on disk, not %d",
                name,
                partitions[name],
                topic.partitions,
            )
            topic = attrs.evolve(topic, partitions=partitions[name])
            raised += 1
        known = {channel.name for channel in topic.channels}
        missing = sorted(channels.get(name, set()) - known)
        for channel_name in missing:
            storage_log.warning(
                "metadata is behind the log: channel %s/%s has a state file, added",
                name,
                channel_name,
            )
        if missing:
            added_channels += len(missing)
            merged = [*topic.channels, *(ChannelMeta(c, paused=False) for c in missing)]
            topic = attrs.evolve(topic, channels=tuple(sorted(merged, key=lambda c: c.name)))
        by_name[name] = topic
    if added_topics or raised or added_channels:
        storage_log.warning(
            "metadata repaired from disk: %d topic(s) added, %d partition count(s) raised, "
            "%d channel(s) added",
            added_topics,
            raised,
            added_channels,
        )
        return Metadata(metadata.version, tuple(by_name[name] for name in sorted(by_name)))
    return metadata


# ------------------------------------------------------------------ files


def metadata_path(data_path: str | os.PathLike[str]) -> Path:
    """``<data-path>/metadata.json`` (``""``: the current directory, as nsqd)."""
    return Path(data_path or ".") / METADATA_FILE


def save_metadata(data_path: str | os.PathLike[str], metadata: Metadata) -> None:
    """Write metadata.json atomically (blocking: call from a worker thread)."""
    ensure_directory(Path(data_path or "."))
    write_atomic(metadata_path(data_path), encode_metadata(metadata))


def load_metadata(data_path: str | os.PathLike[str]) -> Metadata | None:
    """The stored metadata; None on a first start (blocking).

    Raises:
        MetadataError: the file is there but unusable.
    """
    path = metadata_path(data_path)
    data = read_optional(path)
    return None if data is None else decode_metadata(data, what=str(path))
