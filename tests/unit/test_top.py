"""``trionsq top``'s pure parts: the reducer over the admin stream's messages
(docs/admin.md), the rendered view, the stream URL and the close messages."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from trionsq.top import (
    EVENT_LOG_SIZE,
    BrokerInfo,
    ChannelRow,
    Sort,
    TopicRow,
    TopState,
    apply,
    close_message,
    render,
    stream_url,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

TS = 1_764_000_000_000
HELLO: dict[str, object] = {
    "type": "hello",
    "seq": 1,
    "ts": TS,
    "version": "1.3.0",
    "trionsq_version": "0.2.0",
    "hostname": "brokerhost",
    "broadcast_address": "broker.example",
    "tcp_port": 4150,
    "http_port": 4151,
    "auth_required": False,
    "subscription": {
        "topics": None,
        "events": ["topic", "partition", "channel", "client", "snapshot", "sample"],
        "snapshot_interval_ms": 1000,
    },
}


def channel_doc(name: str, **fields: object) -> dict[str, object]:
    document: dict[str, object] = {
        "channel_name": name,
        "depth": 0,
        "backend_depth": 0,
        "in_flight_count": 0,
        "deferred_count": 0,
        "message_count": 0,
        "requeue_count": 0,
        "timeout_count": 0,
        "client_count": 0,
        "clients": [],
        "paused": False,
        "e2e_processing_latency": {"count": 0, "percentiles": None},
        "finish_count": 0,
        "message_rate": 0.0,
        "finish_rate": 0.0,
        "requeue_rate": 0.0,
        "timeout_rate": 0.0,
    }
    document.update(fields)
    return document


def topic_doc(name: str, *channels: dict[str, object], **fields: object) -> dict[str, object]:
    document: dict[str, object] = {
        "topic_name": name,
        "channels": list(channels),
        "depth": 0,
        "backend_depth": 0,
        "message_count": 0,
        "message_bytes": 0,
        "paused": False,
        "e2e_processing_latency": {"count": 0, "percentiles": None},
        "partitions": [{"partition": 0}],
        "message_rate": 0.0,
    }
    document.update(fields)
    return document


def snapshot(seq: int, *topics: dict[str, object], **fields: object) -> dict[str, object]:
    document: dict[str, object] = {
        "type": "snapshot",
        "seq": seq,
        "ts": TS + 61_000,
        "interval_ms": 1000,
        "health": "OK",
        "start_time": TS // 1000 - 3600,
        "rss_bytes": 50 << 20,
        "client_count": 2,
        "topics": list(topics),
        "producers": [],
    }
    document.update(fields)
    return document


def event(kind: str, seq: int, **fields: object) -> dict[str, object]:
    return {"type": kind, "seq": seq, "ts": TS + seq, **fields}


def reduce(messages: Iterable[object], state: TopState | None = None) -> TopState:
    current = state or TopState()
    for message in messages:
        current = apply(current, message)
    return current


def text_of(state: TopState, *, width: int = 120, sort: Sort = Sort.DEPTH) -> str:
    console = Console(record=True, width=width, file=io.StringIO())
    console.print(render(state, width, sort=sort))
    return console.export_text()


def row_order(text: str, *names: str) -> list[str]:
    """``names`` in the order their rows appear in the rendered text."""
    return sorted(names, key=text.index)


ORDERS = topic_doc(
    "orders",
    channel_doc(
        "billing",
        depth=1234,
        in_flight_count=7,
        deferred_count=3,
        message_rate=12.5,
        finish_rate=11.25,
        requeue_rate=0.5,
        timeout_rate=0.25,
        clients=[{"client_id": "1"}, {"client_id": "2"}],
        client_count=2,
        e2e_processing_latency={
            "count": 10,
            "percentiles": [
                {"quantile": 0.5, "value": 1_000_000},
                {"quantile": 0.99, "value": 12_300_000},
            ],
        },
    ),
    channel_doc("audit", depth=5, paused=True),
    message_rate=40.0,
    partitions=[{"partition": 0}, {"partition": 1}, {"partition": 2}],
)
LOGS = topic_doc("logs", channel_doc("archive", depth=2), depth=9000, message_rate=1.0)
QUIET = topic_doc("quiet", paused=True, message_rate=99.0)


# ---------------------------------------------------------------------- the reducer


def test_hello_and_snapshot_fill_the_state() -> None:
    state = reduce([HELLO, snapshot(2, ORDERS, LOGS)])
    assert state.broker == BrokerInfo(
        hostname="brokerhost",
        broadcast_address="broker.example",
        tcp_port=4150,
        http_port=4151,
        version="1.3.0",
        trionsq_version="0.2.0",
    )
    assert state.snapshots == 1
    assert (state.health, state.rss_bytes, state.client_count) == ("OK", 50 << 20, 2)
    orders = state.topics[0]
    assert (orders.name, orders.partitions, orders.message_rate) == ("orders", 3, 40.0)
    assert orders.channels[0] == ChannelRow(
        name="billing",
        depth=1234,
        in_flight=7,
        deferred=3,
        message_rate=12.5,
        finish_rate=11.25,
        requeue_rate=0.5,
        timeout_rate=0.25,
        clients=2,
        e2e_p99_ns=12_300_000,
    )
    assert orders.channels[1].paused
    assert orders.channels[1].e2e_p99_ns is None
    assert orders.backlog == 1239
    assert state.now_ms == TS + 61_000
    assert state.missed == 0


def test_a_snapshot_replaces_the_table() -> None:
    state = reduce([HELLO, snapshot(2, ORDERS, LOGS), snapshot(3, LOGS)])
    assert [topic.name for topic in state.topics] == ["logs"]
    assert state.snapshots == 2


def test_events_patch_the_table_between_snapshots() -> None:
    state = reduce(
        [
            HELLO,
            snapshot(2, ORDERS),
            event("topic_created", 3, topic="fresh"),
            event("channel_created", 4, topic="fresh", channel="c1"),
            event("channel_created", 5, topic="elsewhere", channel="c2"),
            event("partition_created", 6, topic="fresh", partition=3),
            event("channel_paused", 7, topic="orders", channel="billing"),
            event("channel_unpaused", 8, topic="orders", channel="audit"),
            event("topic_paused", 9, topic="orders"),
            event("channel_emptied", 10, topic="orders", channel="billing"),
            event("channel_deleted", 11, topic="fresh", channel="c1"),
            event("topic_deleted", 12, topic="elsewhere"),
            event("client_connected", 13, client_id="9", remote_address="127.0.0.1:5000"),
            event("client_connected", 14, client_id="10", remote_address="127.0.0.1:5001"),
            event("client_disconnected", 15, client_id="9"),
        ]
    )
    topics = {topic.name: topic for topic in state.topics}
    assert set(topics) == {"orders", "fresh"}
    assert topics["fresh"] == TopicRow(name="fresh", partitions=4)
    orders = topics["orders"]
    assert orders.paused
    billing, audit = orders.channels
    assert billing.paused
    assert (billing.depth, billing.in_flight, billing.deferred) == (0, 0, 0)
    assert billing.message_rate == 12.5  # rates wait for the next snapshot
    assert not audit.paused
    assert state.client_count == 3
    assert state.missed == 0
    assert len(state.events) == EVENT_LOG_SIZE
    assert state.events[-1].kind == "client_disconnected"
    assert state.events[-1].seq == 15


def test_the_event_log_keeps_the_last_events_in_order() -> None:
    creations = [event("topic_created", seq, topic=f"t{seq}") for seq in range(2, 40)]
    state = reduce([HELLO, *creations])
    assert [line.text for line in state.events] == [f"t{seq}" for seq in range(30, 40)]


def test_event_subjects() -> None:
    state = reduce(
        [
            HELLO,
            event("client_connected", 2, client_id="7", remote_address="10.0.0.1:4000"),
            event(
                "client_identified",
                3,
                client_id="7",
                hostname="worker",
                user_agent="pynsq/0.9",
                tls=True,
                snappy=False,
                deflate=True,
            ),
            event("client_subscribed", 4, client_id="7", topic="t", channel="c", partition=None),
            event("client_subscribed", 5, client_id="7", topic="t", channel="c", partition=2),
            event("partition_created", 6, topic="t", partition=1),
            event("channel_offset_set", 7, topic="t", channel="c"),
            {"type": "reply", "seq": 8, "ts": TS, "ref": 7, "ok": True, "status": 200},
            {
                "type": "reply",
                "seq": 9,
                "ts": TS,
                "ref": 8,
                "ok": False,
                "status": 404,
                "error": "CHANNEL_NOT_FOUND",
            },
        ]
    )
    assert [line.text for line in state.events] == [
        "client 7 10.0.0.1:4000",
        "client 7 worker pynsq/0.9 tls deflate",
        "client 7 t/c",
        "client 7 t/c p2",
        "t p1",
        "t/c",
        "ref 7: ok (200)",
        "ref 8: 404 CHANNEL_NOT_FOUND",
    ]


def test_an_error_is_logged_and_noticed() -> None:
    state = reduce([HELLO, {"type": "error", "seq": 2, "ts": TS, "error": "unknown op 'x'"}])
    assert state.notice == "unknown op 'x'"
    assert state.events[-1].kind == "error"
    assert "broker: unknown op 'x'" in text_of(state)


def test_a_gap_in_the_sequence_is_counted() -> None:
    state = reduce(
        [HELLO, event("topic_created", 2, topic="a"), event("topic_created", 5, topic="b")]
    )
    assert state.missed == 2
    assert "2 stream messages missed" in text_of(state)


def test_hello_starts_over() -> None:
    first = reduce([HELLO, snapshot(2, ORDERS), event("topic_created", 3, topic="x")])
    again = apply(first, HELLO)
    assert again.topics == ()
    assert again.events == ()
    assert again.snapshots == 0
    assert again.last_seq == 1


@pytest.mark.parametrize(
    "message",
    [
        None,
        "snapshot",
        42,
        [HELLO],
        {},
        {"type": "sample", "seq": 3, "ts": TS, "topic": "orders", "id": "00", "size": 3},
        {"type": "from_the_future", "seq": 3, "ts": TS, "topics": "not a list"},
        {"type": 7, "seq": "three"},
    ],
)
def test_unknown_or_foreign_messages_change_nothing_shown(message: object) -> None:
    before = reduce([HELLO, snapshot(2, ORDERS)])
    after = apply(before, message)
    assert attrs.evolve(after, last_seq=before.last_seq, now_ms=before.now_ms) == before


def test_wrong_field_types_fall_back_to_defaults() -> None:
    odd = snapshot(
        2,
        {"topic_name": "t", "depth": "many", "channels": [{"channel_name": "c", "depth": True}, 5]},
        {"depth": 3},  # no name: not a topic
        rss_bytes=None,
        health=5,
        client_count=float("nan"),
    )
    state = reduce([HELLO, odd])
    assert state.topics == (TopicRow(name="t", channels=(ChannelRow(name="c"),)),)
    assert state.client_count == 0
    assert "rss ?" in text_of(state)


# ---------------------------------------------------------------------- rendering


def test_render_shows_the_header() -> None:
    text = text_of(reduce([HELLO, snapshot(2, ORDERS)]))
    assert "broker.example:4151 (brokerhost)" in text
    assert "nsqd 1.3.0 / trionsq 0.2.0" in text
    assert "uptime 1h01m" in text
    assert "rss 50.0 MiB" in text
    assert "health OK" in text
    assert "clients 2" in text


def test_render_before_the_first_snapshot() -> None:
    text = text_of(reduce([HELLO]))
    assert "waiting for the first snapshot" in text
    assert "topics" not in text


def test_render_shows_every_channel_column() -> None:
    lines = text_of(reduce([HELLO, snapshot(2, ORDERS)])).splitlines()
    header = next(line for line in lines if "topic / channel" in line)
    assert header.split() == [
        "topic",
        "/",
        "channel",
        "depth",
        "in-flight",
        "deferred",
        "msg/s",
        "fin/s",
        "req/s",
        "t/o/s",
        "clients",
        "parts",
        "e2e",
        "p99",
    ]
    billing = next(line for line in lines if "billing" in line)
    assert billing.split()[2:] == ["1,234", "7", "3", "12.5", "11.2", "0.5", "0.2", "2", "12.3ms"]
    audit = next(line for line in lines if "audit" in line)
    assert "(paused)" in audit
    orders = next(line for line in lines if line.startswith("orders"))
    assert orders.split() == ["orders", "0", "40.0", "3"]


def test_render_leaves_out_p99_when_no_latency_is_tracked() -> None:
    text = text_of(reduce([HELLO, snapshot(2, LOGS)]))
    assert "p99" not in text


def test_a_tracked_latency_with_no_samples_has_no_p99() -> None:
    unmeasured = {"count": 0, "percentiles": [{"quantile": 0.99, "value": 0}]}
    state = reduce([HELLO, snapshot(2, topic_doc("t", e2e_processing_latency=unmeasured))])
    assert state.topics[0].e2e_p99_ns is None


def test_render_drops_minor_columns_to_fit_and_keeps_the_numbers_whole() -> None:
    text = text_of(reduce([HELLO, snapshot(2, ORDERS, LOGS)]), width=60)
    assert all(len(line) <= 60 for line in text.splitlines())
    header = next(line for line in text.splitlines() if "topic / channel" in line)
    assert "depth" in header
    assert "msg/s" in header
    assert "t/o/s" not in header
    assert "1,234" in text
    assert "9,000" in text
    assert "…" not in text


def test_render_cuts_long_names_not_numbers() -> None:
    long_name = "a-topic-with-a-name-far-too-long-for-a-narrow-terminal"
    state = reduce([HELLO, snapshot(2, topic_doc(long_name, depth=123_456))])
    text = text_of(state, width=50)
    assert "…" in text
    assert "123,456" in text
    assert all(len(line) <= 50 for line in text.splitlines())


@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        (Sort.DEPTH, ["logs", "orders", "quiet"]),
        (Sort.NAME, ["logs", "orders", "quiet"]),
        (Sort.RATE, ["quiet", "orders", "logs"]),
    ],
)
def test_render_sorts_topics(sort: Sort, expected: list[str]) -> None:
    text = text_of(reduce([HELLO, snapshot(2, QUIET, ORDERS, LOGS)]), sort=sort)
    assert row_order(text, *(f"\n{name} " for name in expected)) == [
        f"\n{name} " for name in expected
    ]


def test_render_sorts_channels_by_depth_or_name() -> None:
    state = reduce([HELLO, snapshot(2, ORDERS)])
    assert row_order(text_of(state), "billing", "audit") == ["billing", "audit"]
    assert row_order(text_of(state, sort=Sort.NAME), "billing", "audit") == ["audit", "billing"]


def test_render_shows_the_last_events() -> None:
    state = reduce(
        [HELLO, snapshot(2, ORDERS), event("channel_paused", 3, topic="orders", channel="billing")]
    )
    text = text_of(state)
    assert "channel_paused" in text
    assert "orders/billing" in text
    assert "billing (paused)" in text


def test_render_marks_bad_health() -> None:
    text = text_of(reduce([HELLO, snapshot(2, health="NOK - disk full")]))
    assert "health NOK - disk full" in text


# ---------------------------------------------------------------------- any message


NAMES = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=12)
COUNTS = st.integers(min_value=0, max_value=10**12)
RATES = st.floats(min_value=0, max_value=1e9, allow_nan=False)
SEQS = st.integers(min_value=1, max_value=10**9)

CHANNELS = st.builds(
    lambda name, depth, inflight, deferred, rate, paused, p99: channel_doc(
        name,
        depth=depth,
        in_flight_count=inflight,
        deferred_count=deferred,
        message_rate=rate,
        finish_rate=rate / 2,
        paused=paused,
        e2e_processing_latency={"count": 1, "percentiles": p99},
    ),
    NAMES,
    COUNTS,
    COUNTS,
    COUNTS,
    RATES,
    st.booleans(),
    st.none() | st.lists(st.fixed_dictionaries({"quantile": st.floats(0, 1), "value": RATES})),
)
TOPICS = st.builds(
    lambda name, channels, depth, rate, partitions: topic_doc(
        name,
        *channels,
        depth=depth,
        message_rate=rate,
        partitions=[{"partition": index} for index in range(partitions)],
    ),
    NAMES,
    st.lists(CHANNELS, max_size=4),
    COUNTS,
    RATES,
    st.integers(0, 8),
)
TOPIC_KINDS = st.sampled_from(
    ["topic_created", "topic_deleted", "topic_paused", "topic_unpaused", "topic_emptied"]
)
CHANNEL_KINDS = st.sampled_from(
    [
        "channel_created",
        "channel_deleted",
        "channel_paused",
        "channel_unpaused",
        "channel_emptied",
        "channel_offset_set",
    ]
)
CLIENT_IDS = st.integers(1, 50).map(str)


def _event(kind: str, seq: int, **fields: object) -> dict[str, object]:
    return event(kind, seq, **fields)


MESSAGES = st.one_of(
    st.builds(lambda seq: {**HELLO, "seq": seq}, SEQS),
    st.builds(
        lambda seq, topics, clients, health: snapshot(
            seq, *topics, client_count=clients, health=health
        ),
        SEQS,
        st.lists(TOPICS, max_size=4),
        COUNTS,
        st.sampled_from(["OK", "NOK - x"]),
    ),
    st.builds(lambda kind, seq, topic: _event(kind, seq, topic=topic), TOPIC_KINDS, SEQS, NAMES),
    st.builds(
        lambda seq, topic, partition: _event(
            "partition_created", seq, topic=topic, partition=partition
        ),
        SEQS,
        NAMES,
        st.integers(0, 64),
    ),
    st.builds(
        lambda kind, seq, topic, channel: _event(kind, seq, topic=topic, channel=channel),
        CHANNEL_KINDS,
        SEQS,
        NAMES,
        NAMES,
    ),
    st.builds(
        lambda seq, client: _event(
            "client_connected", seq, client_id=client, remote_address="127.0.0.1:1"
        ),
        SEQS,
        CLIENT_IDS,
    ),
    st.builds(
        lambda seq, client, tls: _event(
            "client_identified",
            seq,
            client_id=client,
            hostname="h",
            user_agent="ua",
            tls=tls,
            snappy=False,
            deflate=False,
        ),
        SEQS,
        CLIENT_IDS,
        st.booleans(),
    ),
    st.builds(
        lambda seq, client, topic, channel, partition: _event(
            "client_subscribed",
            seq,
            client_id=client,
            topic=topic,
            channel=channel,
            partition=partition,
        ),
        SEQS,
        CLIENT_IDS,
        NAMES,
        NAMES,
        st.none() | st.integers(0, 8),
    ),
    st.builds(
        lambda seq, client: _event("client_disconnected", seq, client_id=client),
        SEQS,
        CLIENT_IDS,
    ),
    st.builds(
        lambda seq, ref, ok, status: {
            "type": "reply",
            "seq": seq,
            "ts": TS,
            "ref": ref,
            "ok": ok,
            "status": status,
            **({} if ok else {"error": "E_X"}),
        },
        SEQS,
        st.integers() | st.text(max_size=5) | st.none(),
        st.booleans(),
        st.integers(100, 599),
    ),
    st.builds(lambda text: {"type": "error", "error": text}, st.text(max_size=40)),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
LOOSE = st.builds(
    lambda kind, rest: {**rest, "type": kind},
    st.sampled_from(
        ["hello", "snapshot", "topic_created", "channel_paused", "client_connected", "reply"]
    ),
    st.dictionaries(
        st.sampled_from(["seq", "ts", "topic", "channel", "topics", "channels", "health"]),
        JSON,
    ),
)


@given(st.lists(MESSAGES, max_size=30), st.sampled_from(list(Sort)), st.integers(20, 200))
def test_any_sequence_of_schema_valid_messages_reduces_and_renders(
    messages: list[Mapping[str, object]], sort: Sort, width: int
) -> None:
    state = reduce(messages)
    assert len(state.events) <= EVENT_LOG_SIZE
    assert state.client_count >= 0
    text_of(state, width=width, sort=sort)


@given(st.lists(MESSAGES, max_size=10), st.builds(lambda seq: snapshot(seq), SEQS))
def test_a_snapshot_is_the_truth_whatever_came_before(
    messages: list[Mapping[str, object]], last: dict[str, object]
) -> None:
    state = reduce([*messages, last])
    assert state.topics == ()
    assert state.client_count == 2


@given(st.lists(LOOSE | JSON, max_size=20))
def test_malformed_messages_never_raise(messages: list[object]) -> None:
    text_of(reduce(messages), width=80)


# ---------------------------------------------------------------------- URL and close codes


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:4151", "ws://127.0.0.1:4151/admin/stream"),
        ("http://broker:4151", "ws://broker:4151/admin/stream"),
        ("https://broker:4152/", "wss://broker:4152/admin/stream"),
        ("HTTPS://broker:4152", "wss://broker:4152/admin/stream"),
        ("[::1]:4151", "ws://[::1]:4151/admin/stream"),
        ("ws://broker:4151/admin/stream", "ws://broker:4151/admin/stream"),
        ("http://proxy/nsq/", "ws://proxy/nsq/admin/stream"),
    ],
)
def test_stream_url(address: str, expected: str) -> None:
    assert stream_url(address) == expected


def test_stream_url_carries_the_subscription() -> None:
    url = stream_url("127.0.0.1:4151", topics=["a", "b#ephemeral"], snapshot_interval_ms=500)
    assert url == (
        "ws://127.0.0.1:4151/admin/stream?topics=a,b%23ephemeral&snapshot_interval_ms=500"
    )


@pytest.mark.parametrize("address", ["ftp://broker:21", "http://", ""])
def test_stream_url_refuses_what_is_not_http(address: str) -> None:
    with pytest.raises(ValueError, match="not an HTTP address"):
        stream_url(address)


@pytest.mark.parametrize(
    ("code", "reason", "had_secret", "expected"),
    [
        (4001, "unauthorized", False, "the broker needs an auth secret (--auth-secret)"),
        (4001, None, True, "the broker refused the auth secret"),
        (4008, "subscriber too slow", False, "too slow"),
        (1000, None, False, "the broker is shutting down"),
        (1006, None, False, "the connection was lost"),
        (4999, "odd", False, "the broker closed the stream"),
    ],
)
def test_close_messages(code: int, reason: str | None, had_secret: bool, expected: str) -> None:
    message = close_message(code, reason, had_secret=had_secret)
    assert expected in message
    assert f"code {code}" in message
    if reason:
        assert reason in message
    assert "\n" not in message
