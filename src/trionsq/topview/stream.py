"""``trionsq top``'s connection: the admin stream's URL, following it (the
websocket, the ``Live`` display redrawn at most :data:`MIN_RENDER_INTERVAL` apart
however fast events arrive), and why it ended."""

from __future__ import annotations

import ssl
from contextlib import nullcontext
from typing import TYPE_CHECKING, Final
from urllib.parse import SplitResult, quote, urlencode, urlsplit, urlunsplit

import attrs
import orjson
import trio
import trio_websocket
from rich.live import Live

from .state import Sort, TopState, apply
from .view import render

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from rich.console import Console

__all__ = [
    "CLOSE_TIMEOUT",
    "CONNECT_TIMEOUT",
    "MIN_RENDER_INTERVAL",
    "CannotConnect",
    "StreamClosed",
    "close_message",
    "follow",
    "stream_url",
    "without_query",
]

MIN_RENDER_INTERVAL: Final = 0.25
"""Seconds between redraws at most: ~4 a second, whatever the event rate."""
MAX_FRAME_BYTES: Final = 64 << 20
"""A snapshot carries every client of every channel: far above trio-websocket's 1 MiB default."""
CONNECT_TIMEOUT: Final = 10.0
CLOSE_TIMEOUT: Final = 2.0
"""Seconds for the closing handshake when ``top`` ends the stream."""
STREAM_PATH: Final = "/admin/stream"


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
    where = without_query(url)
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
            refusal = _refusal(_sole(group), where, connected=connected)
            if refusal is None:
                raise
            raise refusal from None
    _check_end(follower, has_secret=bool(auth_secret))
    return follower.state


def _refusal(error: BaseException | None, where: str, *, connected: bool) -> CannotConnect | None:
    """Why the stream could not be followed, said to the user: the broker refused the
    upgrade, or what answered is no websocket server; None: ``error`` as it is."""
    if isinstance(error, trio_websocket.ConnectionRejected):
        return CannotConnect(
            f"{where} refused the websocket upgrade (HTTP {error.status_code});"
            " does this broker serve /admin/stream?"
        )
    if connected or not isinstance(error, Exception):
        return None
    # what answered is no HTTP server (an NSQ TCP port, say): h11's or wsproto's
    # protocol errors, or no answer at all
    why = "no answer" if isinstance(error, trio.TooSlowError) else _why(error)
    return CannotConnect(f"{where} did not answer as a websocket server ({why})")


def _check_end(follower: _Follower, *, has_secret: bool) -> None:
    """Raise what ended the stream, if the broker ended it or would wait for AUTH."""
    if follower.closed is not None:
        raise StreamClosed(follower.closed.code, follower.closed.reason, had_secret=has_secret)
    broker = follower.state.broker
    if broker is not None and broker.auth_required and not has_secret:
        # the broker would wait for an ``auth`` message, then close with 4001: say it now
        raise StreamClosed(4001, "the broker's hello says AUTH is on")


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


def without_query(url: str) -> str:
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
