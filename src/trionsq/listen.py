"""Opening listeners, with a failure the console scripts can tell from any other,
and the accept loop of the TCP protocol's connections.

A broker that cannot bind says ``FATAL: cannot listen: ...`` and exits; every other
``OSError`` (a storage fault, say) must not be reported as one, so listening wraps
its errors in :class:`ListenError`.
"""

from __future__ import annotations

import errno
import logging
import os
from typing import TYPE_CHECKING, NoReturn

import trio

from .addresses import join_host_port

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["ListenError", "open_listeners", "serve_connections"]

log = logging.getLogger("trionsq.accept")  # logs.configure_logging limits its rate
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
"""accept(2) failures that mean "not now": the loop waits and tries again."""
RETRY_AFTER = 0.1
"""Seconds between accepts while the process is out of descriptors or memory."""


class ListenError(OSError):
    """A listener could not be opened (address in use, not local, no permission)."""


async def open_listeners(host: str | None, port: int) -> list[trio.SocketListener]:
    """``trio.open_tcp_listeners``, raising :class:`ListenError` on failure."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as error:
        where = join_host_port(host or "0.0.0.0", port)  # noqa: S104 - Go's wording
        raise ListenError(error.errno, f"{where}: {error.strerror or error}") from error


async def serve_connections(
    handler: Callable[[trio.SocketStream], Awaitable[None]],
    listeners: list[trio.SocketListener],
    *,
    name: str,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Accept on every listener; each connection runs ``handler(stream)`` as its own
    task of this one's nursery, named ``name``.

    ``trio.serve_listeners`` does the same with a wrapper coroutine around each
    handler and a task name built per connection; with many idle connections those
    were 0.3 KB of each (issue 14). ``handler`` here is a plain function that returns
    the connection's coroutine, and that coroutine closes its own stream.
    """
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(_accept_forever, listener, nursery, handler, name)
        task_status.started()
    raise AssertionError("the accept loops never return")  # pragma: no cover


async def _accept_forever(
    listener: trio.SocketListener,
    nursery: trio.Nursery,
    handler: Callable[[trio.SocketStream], Awaitable[None]],
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
            nursery.start_soon(handler, stream, name=name)
