"""Where every long-lived task of a broker process gets its parent.

The tree this module builds (design §3); a task not named here has no place in
trionsq. Branches marked (planned) arrive with their issues::

    serve_nsqd(config, task_status)                  this module: builds the tree
    ├── broker nursery
    │   ├── per channel: ChannelRunner [own CancelScope; delete = cancel]   dispatch/router.py
    │   │   ├── router task    cursor -> ready consumers, in batches
    │   │   └── expiry task    in-flight + deferred deadlines (ExpiryTimer)
    │   ├── per topic partition: log writer/sync task (planned: durable log)
    │   ├── metadata persister (planned: durable log)
    │   └── TCP listener (trio.serve_listeners) -> per connection nursery   server/tcp.py
    │       ├── reader task            bytes -> protocol events -> broker; writes replies
    │       └── messagePump task       message batches + heartbeats -> socket
    ├── HTTP listener (planned: HTTP API)
    ├── admin websocket listener (planned)
    └── lookupd peers: one task per lookupd address (planned: lookupd)
    task_status.started(BoundAddresses(...))   # after every listener accepts

State of the build: ``serve_nsqd`` runs the broker nursery (channel runners) and
the TCP listener with its per-connection nurseries; HTTP, the admin websocket and
lookupd peers arrive with their issues.
"""

from __future__ import annotations

import itertools
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

import attrs
import trio

from . import __version__
from .broker.broker import Broker
from .config import NsqdConfig
from .server.tcp import ClientSession

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ["TREE", "BoundAddresses", "open_nsqd", "serve_nsqd"]


@attrs.frozen
class BoundAddresses:
    """Where a started broker listens (the real ports, so port 0 works), and the broker."""

    tcp: tuple[str, int]
    broker: Broker = attrs.field(eq=False, repr=False)
    http: tuple[str, int] | None = None
    """None while the HTTP listener is disabled (``http_address=""``)."""
    https: tuple[str, int] | None = None
    """None unless a TLS certificate is configured."""
    """The running broker, for in-process control (pause, empty, delete) by an
    embedding app or a test. Call it only from the broker's own Trio thread."""


async def serve_nsqd(
    config: NsqdConfig, *, task_status: trio.TaskStatus[BoundAddresses] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run a broker until cancelled; ``task_status.started`` gets the bound addresses.

    Use as ``addresses = await nursery.start(serve_nsqd, config)``.
    """
    host, port = config.tcp_host_port
    settings = config.server_settings(__version__)
    async with trio.open_nursery() as broker_nursery:
        broker = Broker(config, broker_nursery)
        listeners = await trio.open_tcp_listeners(port, host=host)
        client_ids = itertools.count(1)

        async def handle(stream: trio.SocketStream) -> None:
            await ClientSession(next(client_ids), stream, broker, settings).run()

        await broker_nursery.start(trio.serve_listeners, handle, listeners)
        bound = listeners[0].socket.getsockname()
        task_status.started(BoundAddresses(tcp=(bound[0], bound[1]), broker=broker))


@asynccontextmanager
async def open_nsqd(config: NsqdConfig | None = None) -> AsyncIterator[BoundAddresses]:
    """``async with open_nsqd() as addresses:`` a broker on 127.0.0.1, port 0 by default."""
    async with trio.open_nursery() as nursery:
        chosen = config if config is not None else NsqdConfig(tcp_address="127.0.0.1:0")
        addresses: BoundAddresses = await nursery.start(serve_nsqd, chosen)
        try:
            yield addresses
        finally:
            nursery.cancel_scope.cancel()


TREE: Final = (
    ("serve_nsqd", None),
    ("broker nursery", "serve_nsqd"),
    ("channel runner", "broker nursery"),
    ("channel router", "channel runner"),
    ("channel expiry", "channel runner"),
    ("tcp listener", "broker nursery"),
    ("connection nursery", "tcp listener"),
    ("connection reader", "connection nursery"),
    ("connection message pump", "connection nursery"),
    ("partition log writer (planned)", "broker nursery"),
    ("metadata persister (planned)", "broker nursery"),
    ("http listener (planned)", "serve_nsqd"),
    ("admin websocket listener (planned)", "serve_nsqd"),
    ("lookupd peer (planned)", "serve_nsqd"),
)
"""Each long-lived task and the task or nursery that is its parent, as data, so the
tree in the docstring and the code that builds it can be checked against each other."""
