"""How ``trionsq top`` draws a :class:`~.state.TopState`: :func:`render` gives a rich
renderable (header, topics with their channels, the last events) for a given width,
so the view is testable without a terminal."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, TypeVar

import attrs
from rich.console import Group
from rich.table import Table
from rich.text import Text

from .state import BrokerInfo, ChannelRow, Sort, TopicRow

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from rich.console import RenderableType

    from .state import EventLine, TopState

__all__ = ["render"]


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


_Row = TypeVar("_Row", TopicRow, ChannelRow)


def _sorted(rows: Iterable[_Row], sort: Sort, size: Callable[[_Row], int]) -> list[_Row]:
    """By name, by message rate, or by ``size`` (a topic's backlog, a channel's
    depth): the busiest first."""
    if sort is Sort.NAME:
        return sorted(rows, key=lambda row: row.name)
    if sort is Sort.RATE:
        return sorted(rows, key=lambda row: (-row.message_rate, row.name))
    return sorted(rows, key=lambda row: (-size(row), row.name))


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
    for topic in _sorted(state.topics, sort, lambda topic: topic.backlog):
        name = Text(topic.name, style="bold")
        if topic.paused:
            name.append(" (paused)", style="yellow")
        lines.append((name, topic))
        channels = _sorted(topic.channels, sort, lambda channel: channel.depth)
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
