"""``trionsq top``: a terminal view of one broker, following its admin stream.

The stream (docs/admin.md) pushes every change as it happens and a full snapshot
every interval. Three layers, so the view is testable without a terminal or a socket:

- :class:`TopState` and :func:`apply`: a pure reducer over the stream's JSON messages.
  Snapshots replace the table; events patch it in between (a created channel shows at
  once, a deleted one goes) and fill the event log. Anything it does not understand is
  ignored, never raised: a newer broker may send more.
- :func:`render`: the state as a rich renderable (header, topics with their channels,
  the last events) for a given width.
- :func:`follow` and :func:`main`: the websocket, the ``Live`` display (redrawn at most
  :data:`MIN_RENDER_INTERVAL` apart however fast events arrive) and the exit codes.
"""

from __future__ import annotations

import enum
import math
import signal
import ssl
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Final
from urllib.parse import SplitResult, quote, urlencode, urlsplit, urlunsplit

import attrs
import orjson
import trio
import trio_websocket
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Mapping, Sequence

    from rich.console import RenderableType

__all__ = [
    "EVENT_LOG_SIZE",
    "MIN_RENDER_INTERVAL",
    "BrokerInfo",
    "CannotConnect",
    "ChannelRow",
    "EventLine",
    "Sort",
    "StreamClosed",
    "TopState",
    "TopicRow",
    "apply",
    "close_message",
    "follow",
    "main",
    "render",
    "stream_url",
]

EVENT_LOG_SIZE: Final = 10
"""Events kept for the view (the newest last)."""
MIN_RENDER_INTERVAL: Final = 0.25
"""Seconds between redraws at most: ~4 a second, whatever the event rate."""
MAX_FRAME_BYTES: Final = 64 << 20
"""A snapshot carries every client of every channel: far above trio-websocket's 1 MiB default."""
CONNECT_TIMEOUT: Final = 10.0
CLOSE_TIMEOUT: Final = 2.0
"""Seconds for the closing handshake when ``top`` ends the stream."""
STREAM_PATH: Final = "/admin/stream"


class Sort(enum.Enum):
    """The table's order (``--sort``): deepest backlog, name, or busiest first."""

    DEPTH = "depth"
    NAME = "name"
    RATE = "rate"


# ---------------------------------------------------------------------- state


@attrs.frozen
class ChannelRow:
    """One channel as the latest snapshot (and events since) describe it."""

    name: str
    depth: int = 0
    in_flight: int = 0
    deferred: int = 0
    message_rate: float = 0.0
    finish_rate: float = 0.0
    requeue_rate: float = 0.0
    timeout_rate: float = 0.0
    clients: int = 0
    paused: bool = False
    e2e_p99_ns: float | None = None


@attrs.frozen
class TopicRow:
    """One topic and its channels."""

    name: str
    depth: int = 0
    message_count: int = 0
    message_rate: float = 0.0
    paused: bool = False
    partitions: int = 1
    e2e_p99_ns: float | None = None
    channels: tuple[ChannelRow, ...] = ()

    @property
    def backlog(self) -> int:
        """Messages waiting anywhere in the topic: what ``--sort depth`` orders by."""
        return self.depth + sum(channel.depth for channel in self.channels)


@attrs.frozen
class BrokerInfo:
    """Who answered: the ``hello`` message."""

    hostname: str = ""
    broadcast_address: str = ""
    tcp_port: int = 0
    http_port: int = 0
    version: str = ""
    trionsq_version: str = ""
    auth_required: bool = False


@attrs.frozen
class EventLine:
    """One line of the event log."""

    seq: int
    ts_ms: int
    kind: str
    text: str


@attrs.frozen
class TopState:
    """Everything the view shows; built by :func:`apply` only."""

    broker: BrokerInfo | None = None
    snapshots: int = 0
    """Snapshots received on this connection."""
    health: str = ""
    start_time: int = 0
    """The broker's start, Unix seconds (from the snapshot)."""
    rss_bytes: int | None = None
    client_count: int = 0
    topics: tuple[TopicRow, ...] = ()
    events: tuple[EventLine, ...] = ()
    last_seq: int = 0
    missed: int = 0
    """Messages the sequence numbers say never arrived (the broker promises none)."""
    now_ms: int = 0
    """The newest ``ts`` seen: the view's clock, so uptime moves with every message."""
    notice: str = ""
    """The last ``error`` the broker sent, shown under the header."""


# ---------------------------------------------------------------------- reading JSON leniently


def _object(value: object) -> Mapping[str, object] | None:
    return value if isinstance(value, dict) else None


def _int(document: Mapping[str, object], key: str, default: int = 0) -> int:
    value = document.get(key)
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return default


def _float(document: Mapping[str, object], key: str) -> float:
    value = document.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    number = float(value)
    return number if math.isfinite(number) else 0.0


def _str(document: Mapping[str, object], key: str, default: str = "") -> str:
    value = document.get(key)
    return value if isinstance(value, str) else default


def _bool(document: Mapping[str, object], key: str) -> bool:
    return document.get(key) is True


def _objects(document: Mapping[str, object], key: str) -> list[Mapping[str, object]]:
    value = document.get(key)
    if not isinstance(value, list):
        return []
    return [item for item in (_object(entry) for entry in value) if item is not None]


def _p99(document: Mapping[str, object]) -> float | None:
    """The 0.99 quantile of ``e2e_processing_latency`` (nanoseconds), when tracked."""
    latency = _object(document.get("e2e_processing_latency"))
    if latency is None or _int(latency, "count") == 0:  # tracked, nothing measured yet
        return None
    for percentile in _objects(latency, "percentiles"):
        quantile = _float(percentile, "quantile")
        if abs(quantile - 0.99) < 1e-9:
            return _float(percentile, "value")
    return None


def _channel_row(document: Mapping[str, object]) -> ChannelRow:
    clients = document.get("clients")
    return ChannelRow(
        name=_str(document, "channel_name"),
        depth=_int(document, "depth"),
        in_flight=_int(document, "in_flight_count"),
        deferred=_int(document, "deferred_count"),
        message_rate=_float(document, "message_rate"),
        finish_rate=_float(document, "finish_rate"),
        requeue_rate=_float(document, "requeue_rate"),
        timeout_rate=_float(document, "timeout_rate"),
        clients=len(clients) if isinstance(clients, list) else _int(document, "client_count"),
        paused=_bool(document, "paused"),
        e2e_p99_ns=_p99(document),
    )


def _topic_row(document: Mapping[str, object]) -> TopicRow:
    partitions = document.get("partitions")
    return TopicRow(
        name=_str(document, "topic_name"),
        depth=_int(document, "depth"),
        message_count=_int(document, "message_count"),
        message_rate=_float(document, "message_rate"),
        paused=_bool(document, "paused"),
        partitions=len(partitions) if isinstance(partitions, list) and partitions else 1,
        e2e_p99_ns=_p99(document),
        channels=tuple(_channel_row(channel) for channel in _objects(document, "channels")),
    )


# ---------------------------------------------------------------------- the reducer


def apply(state: TopState, message: object) -> TopState:
    """The state after one stream message (already JSON-decoded). Never raises:
    a message of an unknown type, or one that is not an object, changes nothing but
    the sequence bookkeeping."""
    document = _object(message)
    if document is None:
        return state
    seq = _int(document, "seq")
    ts = _int(document, "ts")
    kind = _str(document, "type")
    if kind == "hello":
        # a new connection: nothing from an earlier one still holds
        return TopState(
            broker=_broker_info(document),
            start_time=_int(document, "start_time"),  # trionsq adds it; the snapshot has it too
            last_seq=seq,
            now_ms=ts,
        )
    state = _sequenced(state, seq, ts)
    if kind == "snapshot":
        return attrs.evolve(
            state,
            snapshots=state.snapshots + 1,
            health=_str(document, "health", state.health),
            start_time=_int(document, "start_time", state.start_time),
            rss_bytes=_int(document, "rss_bytes", -1) if "rss_bytes" in document else None,
            client_count=_int(document, "client_count"),
            topics=tuple(row for row in map(_topic_row, _objects(document, "topics")) if row.name),
        )
    if kind == "reply":
        return _logged(state, seq, ts, kind, _reply_text(document))
    if kind == "error":
        text = _str(document, "error", "?")
        return attrs.evolve(_logged(state, seq, ts, kind, text), notice=text)
    if kind in _EVENTS:
        patched = _EVENTS[kind](state, document)
        return _logged(patched, seq, ts, kind, _event_text(kind, document))
    return state


def _broker_info(document: Mapping[str, object]) -> BrokerInfo:
    return BrokerInfo(
        hostname=_str(document, "hostname"),
        broadcast_address=_str(document, "broadcast_address"),
        tcp_port=_int(document, "tcp_port"),
        http_port=_int(document, "http_port"),
        version=_str(document, "version"),
        trionsq_version=_str(document, "trionsq_version"),
        auth_required=_bool(document, "auth_required"),
    )


def _sequenced(state: TopState, seq: int, ts: int) -> TopState:
    gap = seq - state.last_seq - 1 if seq > state.last_seq and state.last_seq else 0
    return attrs.evolve(
        state,
        last_seq=max(state.last_seq, seq),
        missed=state.missed + max(gap, 0),
        now_ms=max(state.now_ms, ts),
    )


def _logged(state: TopState, seq: int, ts: int, kind: str, text: str) -> TopState:
    line = EventLine(seq=seq, ts_ms=ts, kind=kind, text=text)
    return attrs.evolve(state, events=(*state.events, line)[-EVENT_LOG_SIZE:])


def _reply_text(document: Mapping[str, object]) -> str:
    ref = document.get("ref")
    status = _int(document, "status")
    if _bool(document, "ok"):
        return f"ref {ref}: ok ({status})"
    return f"ref {ref}: {status} {_str(document, 'error')}".rstrip()


def _event_text(kind: str, document: Mapping[str, object]) -> str:
    """The event's subject in a few words: ``orders/billing``, ``client 7 127.0.0.1:5555``."""
    topic = _str(document, "topic")
    channel = _str(document, "channel")
    if kind.startswith("client_"):
        parts = [f"client {_str(document, 'client_id', '?')}"]
        if kind == "client_connected":
            parts.append(_str(document, "remote_address"))
        elif kind == "client_identified":
            parts.append(_str(document, "hostname"))
            parts.append(_str(document, "user_agent"))
            parts.extend(name for name in ("tls", "snappy", "deflate") if _bool(document, name))
        elif kind == "client_subscribed":
            partition = document.get("partition")
            where = f"{topic}/{channel}"
            parts.append(where if partition is None else f"{where} p{partition}")
        return " ".join(part for part in parts if part)
    if kind == "partition_created":
        return f"{topic} p{_int(document, 'partition')}"
    return f"{topic}/{channel}" if kind.startswith("channel_") else topic


def _with_topic(
    state: TopState, name: str, change: Callable[[TopicRow], TopicRow | None], *, create: bool
) -> TopState:
    """``state`` with topic ``name`` changed (None: removed); created first if asked."""
    if not name:
        return state
    topics: list[TopicRow] = []
    found = False
    for topic in state.topics:
        if topic.name == name:
            found = True
            changed = change(topic)
            if changed is not None:
                topics.append(changed)
        else:
            topics.append(topic)
    if not found and create:
        created = change(TopicRow(name=name))
        if created is not None:
            topics.append(created)
    return attrs.evolve(state, topics=tuple(topics))


def _with_channel(
    state: TopState,
    document: Mapping[str, object],
    change: Callable[[ChannelRow], ChannelRow | None],
    *,
    create: bool = False,
) -> TopState:
    name = _str(document, "channel")
    if not name:
        return state

    def patch(topic: TopicRow) -> TopicRow:
        channels: list[ChannelRow] = []
        found = False
        for channel in topic.channels:
            if channel.name == name:
                found = True
                changed = change(channel)
                if changed is not None:
                    channels.append(changed)
            else:
                channels.append(channel)
        if not found and create:
            created = change(ChannelRow(name=name))
            if created is not None:
                channels.append(created)
        return attrs.evolve(topic, channels=tuple(channels))

    return _with_topic(state, _str(document, "topic"), patch, create=create)


def _topic_event(
    change: Callable[[TopicRow], TopicRow | None], *, create: bool = False
) -> Callable[[TopState, Mapping[str, object]], TopState]:
    return lambda state, document: _with_topic(
        state, _str(document, "topic"), change, create=create
    )


def _channel_event(
    change: Callable[[ChannelRow], ChannelRow | None], *, create: bool = False
) -> Callable[[TopState, Mapping[str, object]], TopState]:
    return lambda state, document: _with_channel(state, document, change, create=create)


def _partition_created(state: TopState, document: Mapping[str, object]) -> TopState:
    index = _int(document, "partition")
    return _with_topic(
        state,
        _str(document, "topic"),
        lambda topic: attrs.evolve(topic, partitions=max(topic.partitions, index + 1)),
        create=True,
    )


def _clients(delta: int) -> Callable[[TopState, Mapping[str, object]], TopState]:
    return lambda state, _document: attrs.evolve(
        state, client_count=max(0, state.client_count + delta)
    )


def _unchanged(state: TopState, _document: Mapping[str, object]) -> TopState:
    return state


_EVENTS: Final[dict[str, Callable[[TopState, Mapping[str, object]], TopState]]] = {
    "topic_created": _topic_event(lambda topic: topic, create=True),
    "topic_deleted": _topic_event(lambda _topic: None),
    "topic_paused": _topic_event(lambda topic: attrs.evolve(topic, paused=True)),
    "topic_unpaused": _topic_event(lambda topic: attrs.evolve(topic, paused=False)),
    "topic_emptied": _topic_event(lambda topic: attrs.evolve(topic, depth=0)),
    "partition_created": _partition_created,
    "channel_created": _channel_event(lambda channel: channel, create=True),
    "channel_deleted": _channel_event(lambda _channel: None),
    "channel_paused": _channel_event(lambda channel: attrs.evolve(channel, paused=True)),
    "channel_unpaused": _channel_event(lambda channel: attrs.evolve(channel, paused=False)),
    "channel_emptied": _channel_event(
        lambda channel: attrs.evolve(channel, depth=0, in_flight=0, deferred=0)
    ),
    "channel_offset_set": _unchanged,
    "client_connected": _clients(+1),
    "client_identified": _unchanged,
    "client_subscribed": _unchanged,
    "client_disconnected": _clients(-1),
}
"""Each event's patch of the table between snapshots (the next snapshot is the truth)."""


# ---------------------------------------------------------------------- rendering


def render(state: TopState, width: int, *, sort: Sort = Sort.DEPTH) -> RenderableType:
    """The whole view: header, topics and channels, the last events."""
    parts: list[RenderableType] = [_header(state)]
    if state.snapshots == 0:
        parts.append(Text("waiting for the first snapshot…", style="dim"))
    else:
        parts.append(_topics_table(state, width, sort))
    if state.events:
        parts.append(_events_table(state.events))
    return Group(*parts)


def _header(state: TopState) -> Text:
    broker = state.broker or BrokerInfo()
    host = broker.broadcast_address or broker.hostname or "?"
    text = Text()
    text.append("trionsq top ", style="bold")
    text.append(f"{host}:{broker.http_port}", style="bold cyan")
    if broker.hostname and broker.hostname != host:
        text.append(f" ({broker.hostname})")
    text.append(f"  nsqd {broker.version or '?'} / trionsq {broker.trionsq_version or '?'}")
    if state.snapshots:
        text.append(f"\nuptime {_uptime(state.now_ms / 1000 - state.start_time)}")
        text.append(f"  rss {_bytes(state.rss_bytes)}")
        text.append("  health ")
        text.append(state.health or "?", style="green" if state.health == "OK" else "bold red")
        text.append(f"  clients {state.client_count}")
    if state.missed:
        plural = "" if state.missed == 1 else "s"
        text.append(f"\n{state.missed} stream message{plural} missed", style="bold red")
    if state.notice:
        text.append(f"\nbroker: {state.notice}", style="yellow")
    return text


def _sorted_topics(topics: Iterable[TopicRow], sort: Sort) -> list[TopicRow]:
    if sort is Sort.NAME:
        return sorted(topics, key=lambda topic: topic.name)
    if sort is Sort.RATE:
        return sorted(topics, key=lambda topic: (-topic.message_rate, topic.name))
    return sorted(topics, key=lambda topic: (-topic.backlog, topic.name))


def _sorted_channels(channels: Iterable[ChannelRow], sort: Sort) -> list[ChannelRow]:
    if sort is Sort.NAME:
        return sorted(channels, key=lambda channel: channel.name)
    if sort is Sort.RATE:
        return sorted(channels, key=lambda channel: (-channel.message_rate, channel.name))
    return sorted(channels, key=lambda channel: (-channel.depth, channel.name))


@attrs.frozen
class _Column:
    title: str
    topic: Callable[[TopicRow], str]
    channel: Callable[[ChannelRow], str]
    priority: int
    """Lower stays longer when the width does not hold every column."""


def _blank(_row: object) -> str:
    return ""


_COLUMNS: Final = (
    _Column("depth", lambda t: _count(t.depth), lambda c: _count(c.depth), 0),
    _Column("in-flight", _blank, lambda c: _count(c.in_flight), 2),
    _Column("deferred", _blank, lambda c: _count(c.deferred), 8),
    _Column("msg/s", lambda t: _rate(t.message_rate), lambda c: _rate(c.message_rate), 1),
    _Column("fin/s", _blank, lambda c: _rate(c.finish_rate), 3),
    _Column("req/s", _blank, lambda c: _rate(c.requeue_rate), 5),
    _Column("t/o/s", _blank, lambda c: _rate(c.timeout_rate), 9),
    _Column("clients", _blank, lambda c: _count(c.clients), 4),
    _Column("parts", lambda t: _count(t.partitions), _blank, 6),
    _Column("e2e p99", lambda t: _latency(t.e2e_p99_ns), lambda c: _latency(c.e2e_p99_ns), 7),
)
_GAP: Final = 2
"""Spaces between two columns (padding 1 on each side, no box)."""
_NAME_ROOM: Final = 16
"""Width kept for the names before a column is given up (longer names are cut)."""


def _topics_table(state: TopState, width: int, sort: Sort) -> Table:
    """Topics, each followed by its channels; the columns that fit ``width``, chosen
    by importance (depth and rate first), shown in their usual order."""
    lines: list[tuple[Text, TopicRow | ChannelRow]] = []
    for topic in _sorted_topics(state.topics, sort):
        name = Text(topic.name, style="bold")
        if topic.paused:
            name.append(" (paused)", style="yellow")
        lines.append((name, topic))
        channels = _sorted_channels(topic.channels, sort)
        for index, channel in enumerate(channels):
            branch = "└ " if index == len(channels) - 1 else "├ "
            label = Text(f"  {branch}{channel.name}")
            if channel.paused:
                label.append(" (paused)", style="yellow")
            lines.append((label, channel))
    cells = {
        column.title: [
            column.topic(row) if isinstance(row, TopicRow) else column.channel(row)
            for _, row in lines
        ]
        for column in _COLUMNS
    }
    shown = [column for column in _COLUMNS if column.title != "e2e p99" or any(cells[column.title])]
    names = max([len("topic / channel"), *(label.cell_len for label, _ in lines)])
    room = width - min(names, _NAME_ROOM)
    widths: dict[str, int] = {}
    for column in sorted(shown, key=lambda column: column.priority):
        needed = max([len(column.title), *map(len, cells[column.title])]) + _GAP
        if needed > room:
            break
        room -= needed
        widths[column.title] = needed
    columns = [column for column in shown if column.title in widths]
    table = Table(
        title=f"{len(state.topics)} topics, by {sort.value}",
        title_justify="left",
        box=None,
        pad_edge=False,
        header_style="bold",
    )
    # what the kept columns leave: longer names are cut there, not the numbers
    names_width = max(width - sum(widths.values()), _NAME_ROOM)
    table.add_column("topic / channel", no_wrap=True, overflow="ellipsis", max_width=names_width)
    for column in columns:
        table.add_column(column.title, justify="right", no_wrap=True)
    for index, (label, _row) in enumerate(lines):
        table.add_row(label, *(cells[column.title][index] for column in columns))
    return table


def _events_table(events: Sequence[EventLine]) -> Table:
    table = Table(title="events", title_justify="left", box=None, pad_edge=False, show_header=False)
    table.add_column("time", style="dim", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("subject")
    for event in events:
        style = "red" if event.kind == "error" else ""
        table.add_row(_clock(event.ts_ms), Text(event.kind, style=style), event.text)
    return table


def _count(value: int) -> str:
    return f"{value:,}"


def _rate(value: float) -> str:
    if value == 0:
        return "0"
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def _latency(nanoseconds: float | None) -> str:
    if nanoseconds is None:
        return ""
    if nanoseconds < 1e6:
        return f"{nanoseconds / 1e3:.0f}µs"
    if nanoseconds < 1e9:
        return f"{nanoseconds / 1e6:.1f}ms"
    return f"{nanoseconds / 1e9:.2f}s"


def _bytes(value: int | None) -> str:
    if value is None or value < 0:
        return "?"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _uptime(seconds: float) -> str:
    total = max(0, int(seconds)) if math.isfinite(seconds) else 0
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _clock(ts_ms: int) -> str:
    """Local wall-clock time of an event, to the millisecond."""
    try:
        moment = time.localtime(ts_ms / 1000)
    except (OverflowError, OSError, ValueError):
        return "?"
    return time.strftime("%H:%M:%S", moment) + f".{ts_ms % 1000:03d}"


# ---------------------------------------------------------------------- the stream's address


def stream_url(
    address: str, *, topics: Sequence[str] = (), snapshot_interval_ms: int | None = None
) -> str:
    """The stream's ``ws://`` (``wss://``) URL from ``host:port``, ``http(s)://host:port``
    or a ``ws(s)://`` URL, with the subscription as query parameters."""
    text = address.strip()
    if "://" not in text:
        text = f"http://{text}"
    parts = urlsplit(text)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme.lower())
    if scheme is None or not parts.netloc:
        raise ValueError(f"not an HTTP address: {address!r}")
    path = parts.path.rstrip("/")
    if not path.endswith(STREAM_PATH):
        path += STREAM_PATH
    query: dict[str, str] = {}
    if topics:
        query["topics"] = ",".join(topics)
    if snapshot_interval_ms is not None:
        query["snapshot_interval_ms"] = str(snapshot_interval_ms)
    encoded = urlencode(query, safe=",", quote_via=quote)
    return urlunsplit((scheme, parts.netloc, path, encoded, ""))


# ---------------------------------------------------------------------- closing


class CannotConnect(Exception):
    """No stream: the broker did not answer, or refused the websocket upgrade."""


class StreamClosed(Exception):
    """The broker closed the stream (code and reason from the close frame)."""

    def __init__(self, code: int, reason: str | None, *, had_secret: bool = False) -> None:
        super().__init__(close_message(code, reason, had_secret=had_secret))
        self.code = code
        self.reason = reason


_CLOSE_MEANINGS: Final = {
    1000: "the broker is shutting down",
    1001: "the broker is going away",
    1006: "the connection was lost",
    1008: "the broker refused the subscription",
    1009: "a message was too big",
    1011: "the broker failed",
    4008: "too slow: the broker dropped this subscriber (its queue overflowed); reconnect",
}


def close_message(code: int, reason: str | None, *, had_secret: bool = False) -> str:
    """One line on why the stream closed, in the doc's terms (docs/admin.md)."""
    if code == 4001:
        meaning = (
            "the broker refused the auth secret"
            if had_secret
            else "the broker needs an auth secret (--auth-secret)"
        )
    else:
        meaning = _CLOSE_MEANINGS.get(code, "the broker closed the stream")
    detail = f"code {code}" + (f": {reason}" if reason else "")
    return f"stream closed, {meaning} ({detail})"


# ---------------------------------------------------------------------- following


@attrs.define
class _Follower:
    """The reader's state shared with the renderer: the latest state and a wake-up."""

    state: TopState = attrs.field(factory=TopState)
    dirty: trio.Event = attrs.field(factory=trio.Event)
    closed: trio_websocket.CloseReason | None = None
    """Why the broker closed the stream, once it has."""


async def follow(
    url: str,
    *,
    console: Console | None = None,
    sort: Sort = Sort.DEPTH,
    auth_secret: str | None = None,
    max_snapshots: int | None = None,
    stop_when: Callable[[TopState], bool] | None = None,
    min_render_interval: float = MIN_RENDER_INTERVAL,
    connect_timeout: float = CONNECT_TIMEOUT,
    ssl_context: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> TopState:
    """Follow the stream at ``url``, redrawing a ``Live`` view on ``console`` (none:
    no display) at most every ``min_render_interval`` seconds; returns the state once
    ``max_snapshots`` snapshots have arrived or ``stop_when`` holds for it, else runs
    until cancelled. ``nursery.start(follow, ...)`` returns at the first snapshot.

    Raises:
        CannotConnect: the broker did not answer or refused the upgrade.
        StreamClosed: the broker closed the stream.
    """
    headers = [] if auth_secret is None else [(b"authorization", f"Bearer {auth_secret}".encode())]
    follower = _Follower()
    live = (
        Live(console=console, auto_refresh=False, redirect_stdout=False, redirect_stderr=False)
        if console is not None
        else None
    )

    def draw() -> None:
        if live is not None and console is not None:
            live.update(render(follower.state, console.width, sort=sort), refresh=True)

    parts = urlsplit(url)
    where = _where(url)
    stream: trio.SocketStream | trio.SSLStream[trio.SocketStream] | None = None
    with trio.move_on_after(connect_timeout):
        stream = await _open_stream(parts, ssl_context)
    if stream is None:
        raise CannotConnect(f"cannot connect to {where}: timed out")
    # this function closes the socket itself: trio-websocket's client leaves it open
    # when the server closes first (4001, 4008, shutdown)
    async with stream:
        connected = False
        try:
            async with trio.open_nursery() as nursery:
                with trio.fail_after(connect_timeout):
                    websocket = await trio_websocket.wrap_client_stream(
                        nursery,
                        stream,
                        parts.netloc.rpartition("@")[2],
                        urlunsplit(("", "", parts.path or "/", parts.query, "")),
                        extra_headers=headers,
                        max_message_size=MAX_FRAME_BYTES,
                    )
                connected = True
                with live if live is not None else nullcontext():
                    try:
                        nursery.start_soon(_redraw, follower, draw, min_render_interval)
                        done = _until(max_snapshots, stop_when, has_secret=bool(auth_secret))
                        await _read(websocket, follower, done, task_status)
                    finally:
                        draw()
                with trio.move_on_after(CLOSE_TIMEOUT):
                    await websocket.aclose()
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            error = _sole(group)
            if isinstance(error, trio_websocket.ConnectionRejected):
                raise CannotConnect(
                    f"{where} refused the websocket upgrade (HTTP {error.status_code});"
                    " does this broker serve /admin/stream?"
                ) from None
            if connected or not isinstance(error, Exception):
                raise
            # what answered is no HTTP server (an NSQ TCP port, say): h11's or
            # wsproto's protocol errors, or no answer at all
            why = "no answer" if isinstance(error, trio.TooSlowError) else _why(error)
            raise CannotConnect(f"{where} did not answer as a websocket server ({why})") from None
    if follower.closed is not None:
        raise StreamClosed(
            follower.closed.code, follower.closed.reason, had_secret=bool(auth_secret)
        )
    broker = follower.state.broker
    if broker is not None and broker.auth_required and not auth_secret:
        # the broker would wait for an ``auth`` message, then close with 4001: say it now
        raise StreamClosed(4001, "the broker's hello says AUTH is on")
    return follower.state


async def _open_stream(
    parts: SplitResult, ssl_context: ssl.SSLContext | None
) -> trio.SocketStream | trio.SSLStream[trio.SocketStream]:
    """The TCP (and TLS) connection to the broker's HTTP listener."""
    secure = parts.scheme == "wss"
    host = parts.hostname or ""
    where = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    try:
        port = parts.port or (443 if secure else 80)
        if not secure:
            return await trio.open_tcp_stream(host, port)
        context = ssl_context or ssl.create_default_context()
        tls = await trio.open_ssl_over_tcp_stream(
            host, port, ssl_context=context, https_compatible=True
        )
        try:
            await tls.do_handshake()
        except BaseException:
            await trio.aclose_forcefully(tls)
            raise
        return tls
    except (OSError, ValueError, trio.BrokenResourceError) as error:
        raise CannotConnect(f"cannot connect to {where}: {_why(error)}") from None


def _sole(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception in ``group`` (nested groups flattened), if there is one."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        error = pending.pop()
        if isinstance(error, BaseExceptionGroup):
            pending.extend(error.exceptions)
        else:
            leaves.append(error)
    return leaves[0] if len(leaves) == 1 else None


def _where(url: str) -> str:
    """The URL without its query: the subscription is noise in an error message."""
    return url.split("?", 1)[0]


def _why(error: BaseException) -> str:
    """The innermost reason of a failed connection (``Connection refused``), or the
    outermost text there is."""
    reason = str(error) or type(error).__name__
    seen: BaseException | None = error.__cause__ or error.__context__
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return str(seen.strerror)
        if str(seen):
            reason = str(seen)
        if isinstance(seen, BaseExceptionGroup) and seen.exceptions:
            seen = seen.exceptions[0]
        else:
            seen = seen.__cause__ or seen.__context__
    return reason


def _until(
    max_snapshots: int | None,
    stop_when: Callable[[TopState], bool] | None,
    *,
    has_secret: bool,
) -> Callable[[TopState], bool]:
    """When to stop reading: enough snapshots, the caller's condition, or a ``hello``
    saying AUTH is on when there is no secret to give."""

    def done(state: TopState) -> bool:
        if state.broker is not None and state.broker.auth_required and not has_secret:
            return True
        if max_snapshots is not None and state.snapshots >= max_snapshots:
            return True
        return stop_when is not None and stop_when(state)

    return done


async def _read(
    websocket: trio_websocket.WebSocketConnection,
    follower: _Follower,
    done: Callable[[TopState], bool],
    task_status: trio.TaskStatus[None],
) -> None:
    """Apply every message as it arrives; wake the renderer, never render here."""
    started = False
    while True:
        try:
            frame = await websocket.get_message()
        except trio_websocket.ConnectionClosed as closed:
            follower.closed = closed.reason or trio_websocket.CloseReason(1006, None)
            return
        try:
            message = orjson.loads(frame)
        except orjson.JSONDecodeError:
            continue
        follower.state = apply(follower.state, message)
        follower.dirty.set()
        if not started and follower.state.snapshots:
            started = True
            task_status.started()
        if done(follower.state):
            return


async def _redraw(follower: _Follower, draw: Callable[[], None], interval: float) -> None:
    """Draw whenever the state changed, at most once per ``interval``: under a flood
    of events the view shows the newest state ~4 times a second, not every message."""
    while True:
        await follower.dirty.wait()
        follower.dirty = trio.Event()
        draw()
        await trio.sleep(interval)


# ---------------------------------------------------------------------- the command


async def _run(
    url: str,
    *,
    console: Console,
    sort: Sort,
    auth_secret: str | None,
    once: bool,
    once_timeout: float,
) -> int:
    """Follow until Ctrl-C (0) or a close (1); ``once``: print the first snapshot (0)."""
    status = 0
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_signal, signals, nursery.cancel_scope)
            try:
                if once:
                    with trio.move_on_after(once_timeout) as waited:
                        state = await follow(
                            url, console=None, auth_secret=auth_secret, max_snapshots=1
                        )
                        console.print(render(state, console.width, sort=sort))
                    if waited.cancelled_caught:
                        _fail(f"no snapshot from {_where(url)} within {once_timeout:g}s")
                        status = 1
                else:
                    await follow(url, console=console, sort=sort, auth_secret=auth_secret)
            except (CannotConnect, StreamClosed) as error:
                _fail(str(error))
                status = 1
            nursery.cancel_scope.cancel()
    return status


def _fail(message: str) -> None:
    """The one line a failed ``top`` prints (plain text: no rich markup in errors)."""
    sys.stderr.write(f"trionsq top: {message}\n")
    sys.stderr.flush()


async def _cancel_on_signal(signals: AsyncIterator[int], scope: trio.CancelScope) -> None:
    async for _ in signals:
        scope.cancel()
        return


def main(
    http_address: str,
    *,
    topics: Sequence[str] = (),
    interval_ms: int | None = None,
    auth_secret: str | None = None,
    sort: Sort = Sort.DEPTH,
    once: bool = False,
) -> int:
    """``trionsq top``: the exit status (0: Ctrl-C, or ``once`` printed; 1: no stream)."""
    try:
        url = stream_url(http_address, topics=topics, snapshot_interval_ms=interval_ms)
    except ValueError as error:
        _fail(str(error))
        return 1
    interval = (interval_ms or 1000) / 1000
    try:
        return trio.run(
            lambda: _run(
                url,
                console=Console(highlight=False),
                sort=sort,
                auth_secret=auth_secret,
                once=once,
                once_timeout=max(5.0, 3 * interval + CONNECT_TIMEOUT),
            )
        )
    except KeyboardInterrupt:  # Ctrl-C before the signal receiver was in place
        return 0
