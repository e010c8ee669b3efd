"""nsqd's statsd lines and datagrams from /stats snapshots (nsqd/statsd.go,
internal/statsd, internal/writers/boundary_buffered_writer.go)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.broker.latency import LatencyResult
from trionsq.server.memory_stats import MemoryStatistics
from trionsq.server.stats import ChannelSnapshot, TopicSnapshot
from trionsq.server.statsd_lines import (
    DEFAULT_PACKET_SIZE,
    host_key,
    pack_datagrams,
    statsd_lines,
    statsd_prefix,
)


def channel(name: str, **figures: object) -> ChannelSnapshot:
    values: dict[str, object] = {
        "depth": 0,
        "backend_depth": 0,
        "in_flight_count": 0,
        "deferred_count": 0,
        "message_count": 0,
        "requeue_count": 0,
        "timeout_count": 0,
        "client_count": 0,
        "clients": None,
        "paused": False,
        "e2e": None,
    }
    values.update(figures)
    return ChannelSnapshot(name=name, **values)  # type: ignore[arg-type]


def topic(name: str, *channels: ChannelSnapshot, **figures: object) -> TopicSnapshot:
    values: dict[str, object] = {
        "depth": 0,
        "backend_depth": 0,
        "message_count": 0,
        "message_bytes": 0,
        "paused": False,
        "e2e": None,
    }
    values.update(figures)
    return TopicSnapshot(name=name, channels=channels, **values)  # type: ignore[arg-type]


MEMORY = MemoryStatistics(
    heap_objects=1,
    heap_idle_bytes=2,
    heap_in_use_bytes=3,
    heap_released_bytes=4,
    gc_pause_usec_100=5,
    gc_pause_usec_99=6,
    gc_pause_usec_95=7,
    next_gc_bytes=8,
    gc_total_runs=30,
)


@pytest.mark.parametrize(
    ("template", "address", "port", "prefix"),
    [
        ("nsq.%s", "host.example.com", 4151, "nsq.host_example_com_4151."),
        ("nsq.%s", "10.0.0.1", 4151, "nsq.10_0_0_1_4151."),
        ("nsq.%s", "::1", 4151, "nsq.[__1]_4151."),  # Go's JoinHostPort brackets
        ("%s.nsq.%s", "h", 1, "h_1.nsq.h_1."),  # every %s
        ("stats.", "h", 1, "stats."),  # a final dot is not doubled
        ("stats", "h", 1, "stats."),
        ("", "h", 1, ""),  # no prefix at all, not "."
    ],
)
def test_the_prefix_is_nsqds(template: str, address: str, port: int, prefix: str) -> None:
    assert statsd_prefix(template, address, port) == prefix


def test_host_key_replaces_dots_and_colons() -> None:
    assert host_key("a.b:c.d") == "a_b_c_d"


def test_first_push_counts_from_zero_with_nsqds_names_and_order() -> None:
    latency = LatencyResult(count=3, percentiles=((0.5, 1500.9), (0.995, 2_000_000.0)))
    current = [
        topic(
            "t",
            channel(
                "c",
                depth=4,
                in_flight_count=2,
                deferred_count=1,
                message_count=9,
                requeue_count=3,
                timeout_count=1,
                client_count=2,
                e2e=latency,
            ),
            depth=5,
            message_count=12,
            message_bytes=120,
            e2e=latency,
        )
    ]
    assert statsd_lines(current, [], prefix="nsq.h_1.") == [
        "nsq.h_1.topic.t.message_count:12|c",
        "nsq.h_1.topic.t.message_bytes:120|c",
        "nsq.h_1.topic.t.depth:5|g",
        "nsq.h_1.topic.t.backend_depth:0|g",
        "nsq.h_1.topic.t.e2e_processing_latency_50:1500|g",
        "nsq.h_1.topic.t.e2e_processing_latency_100:2000000|g",  # Go's %.0f of 99.5
        "nsq.h_1.topic.t.channel.c.message_count:9|c",
        "nsq.h_1.topic.t.channel.c.depth:4|g",
        "nsq.h_1.topic.t.channel.c.backend_depth:0|g",
        "nsq.h_1.topic.t.channel.c.in_flight_count:2|g",
        "nsq.h_1.topic.t.channel.c.deferred_count:1|g",
        "nsq.h_1.topic.t.channel.c.requeue_count:3|c",
        "nsq.h_1.topic.t.channel.c.timeout_count:1|c",
        "nsq.h_1.topic.t.channel.c.clients:2|g",
        "nsq.h_1.topic.t.channel.c.e2e_processing_latency_50:1500|g",
        "nsq.h_1.topic.t.channel.c.e2e_processing_latency_100:2000000|g",
    ]


def test_counters_are_what_changed_since_the_previous_push_gauges_what_is() -> None:
    before = [
        topic("t", channel("c", message_count=4, requeue_count=1), message_count=10, depth=9),
        topic("gone", message_count=100),
    ]
    after = [
        topic("new", message_count=2, message_bytes=20),
        topic(
            "t",
            channel("c", message_count=7, requeue_count=1, timeout_count=2, depth=3),
            channel("d", message_count=5),
            message_count=15,
            message_bytes=150,
            depth=3,
        ),
    ]
    lines = statsd_lines(after, before, prefix="")
    assert "topic.new.message_count:2|c" in lines
    assert "topic.t.message_count:5|c" in lines
    assert "topic.t.message_bytes:150|c" in lines  # the previous snapshot had 0 bytes
    assert "topic.t.depth:3|g" in lines
    assert "topic.t.channel.c.message_count:3|c" in lines
    assert "topic.t.channel.c.requeue_count:0|c" in lines
    assert "topic.t.channel.c.timeout_count:2|c" in lines
    assert "topic.t.channel.c.depth:3|g" in lines
    assert "topic.t.channel.d.message_count:5|c" in lines  # a new channel counts from 0
    assert not [line for line in lines if ".gone." in line]


def test_a_count_that_restarted_gives_a_negative_counter_as_nsqd_does() -> None:
    lines = statsd_lines([topic("t", message_count=2)], [topic("t", message_count=5)], prefix="")
    assert lines[0] == "topic.t.message_count:-3|c"


def test_no_latency_lines_without_tracking() -> None:
    lines = statsd_lines([topic("t", channel("c"))], [], prefix="")
    assert not [line for line in lines if "e2e" in line]
    assert len(lines) == 4 + 8


def test_memory_lines_only_when_given_and_gc_runs_counts_since_last_push() -> None:
    assert not [line for line in statsd_lines([], [], prefix="p.") if "mem." in line]
    lines = statsd_lines([], [], prefix="p.", memory=MEMORY, previous_gc_runs=26)
    assert lines == [
        "p.mem.heap_objects:1|g",
        "p.mem.heap_idle_bytes:2|g",
        "p.mem.heap_in_use_bytes:3|g",
        "p.mem.heap_released_bytes:4|g",
        "p.mem.gc_pause_usec_100:5|g",
        "p.mem.gc_pause_usec_99:6|g",
        "p.mem.gc_pause_usec_95:7|g",
        "p.mem.next_gc_bytes:8|g",
        "p.mem.gc_runs:4|c",
    ]


def test_ephemeral_topics_and_channels_are_left_out_only_when_asked() -> None:
    current = [
        topic("t", channel("c"), channel("c#ephemeral")),
        topic("e#ephemeral", channel("c")),
    ]
    kept = statsd_lines(current, [], prefix="")
    assert any("topic.t.channel.c#ephemeral." in line for line in kept)
    assert any(line.startswith("topic.e#ephemeral.") for line in kept)
    excluded = statsd_lines(current, [], prefix="", exclude_ephemeral=True)
    assert not [line for line in excluded if "#ephemeral" in line]
    assert "topic.t.channel.c.depth:0|g" in excluded


def test_datagrams_fill_up_to_the_size_exactly() -> None:
    lines = ["a" * 4, "b" * 4, "c" * 4]  # 5 bytes each with the newline
    assert pack_datagrams(lines, 10) == [b"aaaa\nbbbb\n", b"cccc\n"]
    assert pack_datagrams(lines, 9) == [b"aaaa\n", b"bbbb\n", b"cccc\n"]
    assert pack_datagrams(["x" * 20, "y"], 10) == [b"x" * 20 + b"\n", b"y\n"]  # alone, whole
    assert pack_datagrams([], 10) == []


def test_a_size_of_zero_means_gos_default_buffer() -> None:
    lines = ["z" * 99] * 100  # 100 bytes each
    assert [len(d) for d in pack_datagrams(lines, 0)][:2] == [DEFAULT_PACKET_SIZE // 100 * 100] * 2


@given(
    lines=st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=40)),
    size=st.integers(min_value=1, max_value=120),
)
def test_packing_loses_nothing_keeps_order_and_respects_the_size(
    lines: list[str], size: int
) -> None:
    datagrams = pack_datagrams(lines, size)
    encoded = [line.encode() + b"\n" for line in lines]
    assert b"".join(datagrams) == b"".join(encoded)  # nothing lost, order kept
    position = 0
    for datagram in datagrams:
        assert datagram.endswith(b"\n")
        count = datagram.count(b"\n")  # whole lines only
        assert datagram == b"".join(encoded[position : position + count])
        assert len(datagram) <= size or count == 1  # only a single long line is over
        following = encoded[position + count : position + count + 1]
        if following:  # full: the next line would not have fitted
            assert len(datagram) + len(following[0]) > size
        position += count
    assert position == len(lines)
