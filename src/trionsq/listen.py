"""Opening listeners, with a failure the console scripts can tell from any other,
the one accept loop every listener of a broker and a lookupd goes through, and the
start of the nursery they serve in, whose failure is raised as itself
(:func:`open_started`).

A broker that cannot bind says ``FATAL: cannot listen: ...`` and exits; every other
``OSError`` (a storage fault, say) must not be reported as one, so listening wraps
its errors in :class:`ListenError`.

No error of one connection may end the process (issue 30): every connection runs
inside :func:`_run_connection`, which catches and logs whatever its handler raises
(``Exception``, never ``Cancelled``) and closes the stream. Only the listener's own
failure (an ``accept`` error other than running out of descriptors or memory) ends
:func:`serve_connections`, and with it the server.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import ssl
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, NoReturn, Protocol, TypeVar

import trio

from .addresses import join_host_port, peer_address

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

__all__ = [
    "ListenError",
    "bound_address",
    "connection_ended",
    "open_listeners",
    "open_server",
    "open_started",
    "serve_connections",
    "serve_listening",
    "serve_started",
]

log = logging.getLogger("trionsq.accept")  # logs.configure_logging limits its rate
connection_log = logging.getLogger("trionsq.connection")
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
"""accept(2) failures that mean "not now": the loop waits and tries again."""
RETRY_AFTER = 0.1
"""Seconds between accepts while the process is out of descriptors or memory."""
PEER_GONE = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    ConnectionError,
    TimeoutError,
    ssl.SSLError,
)
"""How a connection ends when its peer vanishes (reset, broken pipe, a TLS failure):
logged at debug level, as nsqd does not complain about them either."""
PEER_GONE_ERRNOS = frozenset(
    {
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ENOTCONN,
        errno.ESHUTDOWN,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
    }
)
"""A socket's own failures given as a plain ``OSError``. Any other ``OSError`` (a
file the disk refused, no descriptor left) is the broker's trouble, not the peer's:
logged as an error with its traceback."""

StreamT = TypeVar("StreamT", bound=trio.abc.AsyncResource)
StartedT = TypeVar("StartedT")
ConfigT_contra = TypeVar("ConfigT_contra", contravariant=True)
StartedT_co = TypeVar("StartedT_co", covariant=True)


class Server(Protocol[ConfigT_contra, StartedT_co]):
    """``serve_nsqd`` and ``serve_lookupd``: run with a configuration until cancelled,
    reporting what they serve at through ``task_status``."""

    def __call__(
        self, config: ConfigT_contra, *, task_status: trio.TaskStatus[StartedT_co]
    ) -> Awaitable[None]: ...


class ListenError(OSError):
    """A listener could not be opened (address in use, not local, no permission)."""


async def open_listeners(host: str | None, port: int) -> list[trio.SocketListener]:
    """``trio.open_tcp_listeners``, raising :class:`ListenError` on failure."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as error:
        where = join_host_port(host or "0.0.0.0", port)  # noqa: S104 - Go's wording
        raise ListenError(error.errno, f"{where}: {error.strerror or error}") from error


async def _open_listener_sets(
    addresses: Sequence[tuple[str | None, int] | None],
) -> list[list[trio.SocketListener]]:
    """One list of listeners per ``(host, port)``, an empty one for ``None``; if one
    cannot bind, those already bound are closed before its :class:`ListenError` goes up."""
    opened: list[list[trio.SocketListener]] = []
    try:
        for address in addresses:
            # one at a time (not a comprehension): those bound so far are closed on failure
            opened.append(await open_listeners(*address) if address is not None else [])  # noqa: PERF401
    except BaseException:
        _close_all(opened)
        raise
    return opened


def bound_address(listeners: Sequence[trio.SocketListener]) -> tuple[str, int]:
    """Where the first of ``listeners`` is bound: the real port, so port 0 works."""
    name = listeners[0].socket.getsockname()
    return name[0], name[1]


@asynccontextmanager
async def open_started(
    start: Callable[[trio.Nursery], Awaitable[StartedT]],
) -> AsyncIterator[StartedT]:
    """A nursery for an ``async with`` block: ``start(nursery)`` in it (start the
    tasks of a server, a cluster), what it returns given to the block; leaving the
    block cancels the tasks.

    What ``start`` raises (a listener that cannot bind, a data directory refused) is
    raised after the nursery, as itself: raised inside it, it would come out as an
    ``ExceptionGroup``, past the caller's ``except OSError`` (``nursery.start`` takes
    off only its own group, not that of a nursery inside).
    """
    failed: Exception | None = None
    async with trio.open_nursery() as nursery:
        try:
            started = await start(nursery)
        except Exception as error:  # raised below, outside the nursery
            failed = error
            nursery.cancel_scope.cancel()
        else:
            try:
                yield started
            finally:
                nursery.cancel_scope.cancel()
    if failed is not None:
        raise failed


@asynccontextmanager
async def open_server(
    serve: Server[ConfigT_contra, StartedT], config: ConfigT_contra
) -> AsyncIterator[StartedT]:
    """``async with open_server(serve_nsqd, config) as addresses:`` the server runs
    in a nursery of its own (:func:`open_started`) until the block ends."""

    async def start(nursery: trio.Nursery) -> StartedT:
        started: StartedT = await nursery.start(serve, config)
        return started

    async with open_started(start) as started:
        yield started


async def serve_started(
    start: Callable[[trio.Nursery], Awaitable[StartedT]], task_status: trio.TaskStatus[StartedT]
) -> None:
    """A server's nursery until cancelled: ``start(nursery)`` in it, what it returns
    reported as started; what it raises raised as itself (:func:`open_started`)."""
    async with open_started(start) as started:
        task_status.started(started)
        await trio.sleep_forever()


async def serve_listening(
    addresses: Sequence[tuple[str | None, int] | None],
    start: Callable[[list[list[trio.SocketListener]], trio.Nursery], Awaitable[StartedT]],
    task_status: trio.TaskStatus[StartedT],
) -> None:
    """:func:`serve_started` on listeners bound first, one list per address (an empty
    one for ``None``: a listener turned off), as nsqd binds them before it loads its
    data: ``start(listeners, nursery)`` serves on them. A listener that cannot bind
    raises its :class:`ListenError` (those bound are closed); all are closed when the
    server ends, by their tasks, or here if the start failed before those began."""
    listener_sets = await _open_listener_sets(addresses)
    try:
        await serve_started(functools.partial(start, listener_sets), task_status)
    finally:
        _close_all(listener_sets)


def _close_all(listener_sets: Sequence[Sequence[trio.SocketListener]]) -> None:
    for listeners in listener_sets:
        for listener in listeners:
            listener.socket.close()


async def serve_connections(
    handler: Callable[[StreamT], Awaitable[object]],
    listeners: Sequence[trio.abc.Listener[StreamT]],
    *,
    name: str,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Accept on every listener; each connection runs ``handler(stream)`` in a task of
    this one's nursery, named ``name``, where its failures stay (see the module).

    ``trio.serve_listeners`` does much the same, but a handler's exception ends the
    server, and it builds a task name per connection (with many idle connections
    that was 0.3 KB of each, issue 14): here every task shares ``name``.
    """
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(_accept_forever, listener, nursery, handler, name)
        task_status.started()
    raise AssertionError("the accept loops never return")  # pragma: no cover


async def _accept_forever(
    listener: trio.abc.Listener[StreamT],
    nursery: trio.Nursery,
    handler: Callable[[StreamT], Awaitable[object]],
    name: str,
) -> NoReturn:
    async with listener:
        while True:
            try:
                stream = await listener.accept()
            except OSError as error:
                if error.errno not in OUT_OF_RESOURCES:
                    raise
                log.error(
                    "accept returned %s (%s); retrying in %s seconds",
                    errno.errorcode[error.errno],
                    os.strerror(error.errno),
                    RETRY_AFTER,
                )
                await trio.sleep(RETRY_AFTER)
                continue
            nursery.start_soon(_run_connection, handler, stream, name=name)


async def _run_connection(handler: Callable[[StreamT], Awaitable[object]], stream: StreamT) -> None:
    """One connection's task: its handler, whose failure ends only this connection.

    The handler is called here, not in the accept loop, so even a failure while it
    is built (a peer gone before its address was read) stays here. ``Cancelled``
    (the server stopping) passes through untouched.
    """
    try:
        await handler(stream)
    except Exception as error:
        if connection_ended(error):
            connection_log.debug("connection from %s ended: %r", _peer(stream), error)
        else:
            connection_log.exception(
                "connection from %s failed; closing it (the server goes on)", _peer(stream)
            )
    finally:
        await trio.aclose_forcefully(stream)


def connection_ended(error: BaseException) -> bool:
    """Whether ``error`` (or every error in its group) only says the peer went away."""
    if isinstance(error, BaseExceptionGroup):
        return all(connection_ended(inner) for inner in error.exceptions)
    if isinstance(error, PEER_GONE):
        return True
    return isinstance(error, OSError) and error.errno in PEER_GONE_ERRNOS


def _peer(stream: trio.abc.AsyncResource) -> str:
    """The peer's address for a log line (through TLS to the socket), or ``?``."""
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    if isinstance(stream, trio.SocketStream):
        return peer_address(stream.socket) or "?"
    return "?"
