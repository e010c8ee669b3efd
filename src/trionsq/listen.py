"""Opening listeners, with a failure the console scripts can tell from any other.

A broker that cannot bind says ``FATAL: cannot listen: ...`` and exits; every other
``OSError`` (a storage fault, say) must not be reported as one, so listening wraps
its errors in :class:`ListenError`.
"""

from __future__ import annotations

import trio

from .addresses import join_host_port

__all__ = ["ListenError", "open_listeners"]


class ListenError(OSError):
    """A listener could not be opened (address in use, not local, no permission)."""


async def open_listeners(host: str | None, port: int) -> list[trio.SocketListener]:
    """``trio.open_tcp_listeners``, raising :class:`ListenError` on failure."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as error:
        where = join_host_port(host or "0.0.0.0", port)  # noqa: S104 - Go's wording
        raise ListenError(error.errno, f"{where}: {error.strerror or error}") from error
