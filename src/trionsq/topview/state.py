"""What ``trionsq top`` knows of a broker: :class:`TopState`, built only by
:func:`apply`, a pure reducer over the admin stream's JSON messages. Snapshots
replace the table; events patch it in between (a created channel shows at once, a
deleted one goes) and fill the event log. Anything it does not understand is
ignored, never raised: a newer broker may send more.
"""

from __future__ import annotations

import enum
import math
from typing import TYPE_CHECKING, Final, TypeVar

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

__all__ = [
    "EVENT_LOG_SIZE",
    "BrokerInfo",
    "ChannelRow",
    "EventLine",
    "Sort",
    "TopState",
    "TopicRow",
    "apply",
]

EVENT_LOG_SIZE: Final = 10
"""Events kept for the view (the newest last)."""


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


_READERS: Final[dict[str, Callable[[Mapping[str, object], str], object]]] = {
    "str": _str,
    "int": _int,
    "float": _float,
    "bool": _bool,
}
"""The lenient reader of each plain field type, by its annotation."""
_Read = TypeVar("_Read", ChannelRow, TopicRow, BrokerInfo)


def _read(
    cls: type[_Read], document: Mapping[str, object], keys: Mapping[str, str], **given: object
) -> _Read:
    """A ``cls`` whose plain fields are read leniently from ``document``, each under its
    JSON key (its name unless ``keys`` names another); ``given`` sets the others."""
    values = {
        field.name: _READERS[field.type](document, keys.get(field.name, field.name))
        for field in attrs.fields(cls)
        if field.name not in given and isinstance(field.type, str) and field.type in _READERS
    }
    return cls(**values, **given)  # type: ignore[arg-type]  # each value read by its field's type


_CHANNEL_KEYS: Final = {
    "name": "channel_name",
    "in_flight": "in_flight_count",
    "deferred": "deferred_count",
}


def _channel_row(document: Mapping[str, object]) -> ChannelRow:
    clients = document.get("clients")
    return _read(
        ChannelRow,
        document,
        _CHANNEL_KEYS,
        clients=len(clients) if isinstance(clients, list) else _int(document, "client_count"),
        e2e_p99_ns=_p99(document),
    )


def _topic_row(document: Mapping[str, object]) -> TopicRow:
    partitions = document.get("partitions")
    return _read(
        TopicRow,
        document,
        {"name": "topic_name"},
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
            broker=_read(BrokerInfo, document, {}),
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


_Row = TypeVar("_Row", TopicRow, ChannelRow)


def _patched(
    rows: Iterable[_Row],
    name: str,
    change: Callable[[_Row], _Row | None],
    new: Callable[[str], _Row] | None,
) -> tuple[_Row, ...]:
    """``rows`` with the row named ``name`` changed (None: removed); if there is none,
    ``new(name)`` changed and added, when ``new`` is given."""
    patched: list[_Row] = []
    found = False
    for row in rows:
        if row.name == name:
            found = True
            changed = change(row)
            if changed is not None:
                patched.append(changed)
        else:
            patched.append(row)
    if not found and new is not None:
        created = change(new(name))
        if created is not None:
            patched.append(created)
    return tuple(patched)


def _with_topic(
    state: TopState, name: str, change: Callable[[TopicRow], TopicRow | None], *, create: bool
) -> TopState:
    """``state`` with topic ``name`` changed (None: removed); created first if asked."""
    if not name:
        return state
    topics = _patched(state.topics, name, change, TopicRow if create else None)
    return attrs.evolve(state, topics=topics)


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
        channels = _patched(topic.channels, name, change, ChannelRow if create else None)
        return attrs.evolve(topic, channels=channels)

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
