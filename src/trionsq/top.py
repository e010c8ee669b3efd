"""``trionsq top``: a terminal view of one broker, following its admin stream.

Three layers, so the view is testable without a terminal or a socket: the state
and its reducer (:mod:`.topview.state`), the view (:mod:`.topview.view`), and the stream
(:mod:`.topview.stream`), with the command here.
"""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

import trio
from rich.console import Console

from .topview.keys import quit_on_key
from .topview.state import (
    EVENT_LOG_SIZE,
    BrokerInfo,
    ChannelRow,
    EventLine,
    Sort,
    TopicRow,
    TopState,
    apply,
)
from .topview.stream import (
    CONNECT_TIMEOUT,
    MIN_RENDER_INTERVAL,
    CannotConnect,
    StreamClosed,
    close_message,
    follow,
    stream_url,
    without_query,
)
from .topview.view import render

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence


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


async def _run(
    url: str,
    *,
    console: Console,
    sort: Sort,
    auth_secret: str | None,
    once: bool,
    once_timeout: float,
) -> int:
    """Follow until ``q`` or Ctrl-C (0) or a close (1); ``once``: print the view once a
    second snapshot came (0): the broker's rates are the change between two."""
    status = 0
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_signal, signals, nursery.cancel_scope)
            try:
                if once:
                    with trio.move_on_after(once_timeout) as waited:
                        state = await follow(
                            url, console=None, auth_secret=auth_secret, max_snapshots=2
                        )
                        console.print(render(state, console.width, sort=sort))
                    if waited.cancelled_caught:
                        _fail(f"no snapshot from {without_query(url)} within {once_timeout:g}s")
                        status = 1
                else:
                    nursery.start_soon(quit_on_key, nursery.cancel_scope)
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
    """``trionsq top``: the exit status (0: ``q``, Ctrl-C, or ``once`` printed; 1: no
    stream)."""
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
                once_timeout=max(5.0, 4 * interval + CONNECT_TIMEOUT),
            )
        )
    except KeyboardInterrupt:  # Ctrl-C before the signal receiver was in place
        return 0
