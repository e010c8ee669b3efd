"""nsqd's statsd push as data: the key prefix, the lines, the UDP datagrams.

nsqd pushes, every ``--statsd-interval``, one line per figure (``name:value|c`` for
a counter, ``name:value|g`` for a gauge), each ending in a newline, and fills each
UDP datagram with whole lines up to ``--statsd-udp-packet-size`` bytes. Counters
carry what changed since the previous push (the first push: everything since
start); gauges carry the figure now. Names are per topic and channel, every
partition of a topic summed as ``/stats`` sums them.

Pure: the caller takes the snapshots (:func:`trionsq.server.stats.snapshot`,
:func:`~trionsq.server.memory_stats.memory_statistics`) and sends the datagrams.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..addresses import join_host_port
from ..protocol.names import is_ephemeral

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ..broker.latency import LatencyResult
    from .memory_stats import MemoryStatistics
    from .stats import ChannelSnapshot, TopicSnapshot

__all__ = [
    "DEFAULT_PACKET_SIZE",
    "host_key",
    "pack_datagrams",
    "statsd_lines",
    "statsd_prefix",
]

DEFAULT_PACKET_SIZE: Final = 4096
"""The datagram size a packet size of 0 or less means: Go's ``bufio`` default, which
nsqd's buffered writer falls back to."""


def host_key(address: str) -> str:
    """nsqd's ``statsd.HostKey``: dots and colons become underscores."""
    return address.replace(".", "_").replace(":", "_")


def statsd_prefix(template: str, broadcast_address: str, http_port: int) -> str:
    """The key prefix nsqd builds at start-up from ``--statsd-prefix``.

    ``%s`` becomes the host key of ``broadcast address:HTTP port`` (the port the
    broker announces), and a prefix that does not end in a dot gets one; an empty
    template means no prefix at all.
    """
    if not template:
        return ""
    key = host_key(join_host_port(broadcast_address, http_port))
    prefix = template.replace("%s", key)
    return prefix if prefix.endswith(".") else prefix + "."


def statsd_lines(
    current: Sequence[TopicSnapshot],
    previous: Sequence[TopicSnapshot],
    *,
    prefix: str,
    exclude_ephemeral: bool = False,
    memory: MemoryStatistics | None = None,
    previous_gc_runs: int = 0,
) -> list[str]:
    """One push's lines, in nsqd's order, without their newlines.

    ``previous`` is what the last push saw (empty for the first); a topic or channel
    it lacks counts from zero. ``memory`` (with ``--statsd-mem-stats``) adds the
    ``mem.*`` lines; ``previous_gc_runs`` is the collection count the last push sent.
    """
    lines: list[str] = []
    before = {topic.name: topic for topic in previous}
    for topic in current:
        if exclude_ephemeral and is_ephemeral(topic.name):
            continue
        last = before.get(topic.name)
        base = f"{prefix}topic.{topic.name}."
        lines += (
            _counter(
                base + "message_count", topic.message_count, last.message_count if last else 0
            ),
            _counter(
                base + "message_bytes", topic.message_bytes, last.message_bytes if last else 0
            ),
            f"{base}depth:{topic.depth}|g",
            f"{base}backend_depth:{topic.backend_depth}|g",
        )
        lines += _latency(base, topic.e2e)
        last_channels = {c.name: c for c in last.channels} if last else {}
        for channel in topic.channels:
            if exclude_ephemeral and is_ephemeral(channel.name):
                continue
            lines += _channel_lines(
                f"{base}channel.{channel.name}.", channel, last_channels.get(channel.name)
            )
    if memory is not None:
        lines += (
            f"{prefix}mem.heap_objects:{memory.heap_objects}|g",
            f"{prefix}mem.heap_idle_bytes:{memory.heap_idle_bytes}|g",
            f"{prefix}mem.heap_in_use_bytes:{memory.heap_in_use_bytes}|g",
            f"{prefix}mem.heap_released_bytes:{memory.heap_released_bytes}|g",
            f"{prefix}mem.gc_pause_usec_100:{memory.gc_pause_usec_100}|g",
            f"{prefix}mem.gc_pause_usec_99:{memory.gc_pause_usec_99}|g",
            f"{prefix}mem.gc_pause_usec_95:{memory.gc_pause_usec_95}|g",
            f"{prefix}mem.next_gc_bytes:{memory.next_gc_bytes}|g",
            _counter(f"{prefix}mem.gc_runs", memory.gc_total_runs, previous_gc_runs),
        )
    return lines


def pack_datagrams(lines: Iterable[str], size: int) -> list[bytes]:
    """Whole newline-ended lines per datagram, in order, each datagram as full as
    ``size`` bytes allows (nsqd's boundary-buffered writer).

    A line longer than ``size`` goes alone in a datagram of its own; ``size`` 0 or
    less means :data:`DEFAULT_PACKET_SIZE`.
    """
    limit = size if size > 0 else DEFAULT_PACKET_SIZE
    datagrams: list[bytes] = []
    pending: list[bytes] = []
    filled = 0
    for line in lines:
        data = line.encode() + b"\n"
        if pending and filled + len(data) > limit:
            datagrams.append(b"".join(pending))
            pending, filled = [], 0
        pending.append(data)
        filled += len(data)
    if pending:
        datagrams.append(b"".join(pending))
    return datagrams


def _channel_lines(base: str, channel: ChannelSnapshot, last: ChannelSnapshot | None) -> list[str]:
    return [
        _counter(base + "message_count", channel.message_count, last.message_count if last else 0),
        f"{base}depth:{channel.depth}|g",
        f"{base}backend_depth:{channel.backend_depth}|g",
        f"{base}in_flight_count:{channel.in_flight_count}|g",
        f"{base}deferred_count:{channel.deferred_count}|g",
        _counter(base + "requeue_count", channel.requeue_count, last.requeue_count if last else 0),
        _counter(base + "timeout_count", channel.timeout_count, last.timeout_count if last else 0),
        f"{base}clients:{channel.client_count}|g",
        *_latency(base, channel.e2e),
    ]


def _counter(name: str, now: int, before: int) -> str:
    """What changed since the last push; negative when the count restarted (a topic
    deleted and created again), as nsqd's unsigned difference cast to int64 is."""
    return f"{name}:{now - before}|c"


def _latency(base: str, result: LatencyResult | None) -> list[str]:
    """``e2e_processing_latency_<percent>`` gauges in whole nanoseconds (truncated)."""
    if result is None:
        return []
    return [
        f"{base}e2e_processing_latency_{quantile * 100.0:.0f}:{int(value)}|g"
        for quantile, value in result.percentiles
    ]
