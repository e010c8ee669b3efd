"""Where every long-lived task of a lookupd gets its parent, and ``serve_lookupd``.

The tree this module builds (design §3); nursery_tree.py's TREE lists the broker's::

    serve_lookupd(config, task_status)               this module: builds the tree
    └── lookupd nursery
        ├── lookupd tcp listener (listen.serve_connections)               lookupd/tcp.py
        │   └── lookupd tcp connection: LookupSession, one per nsqd
        ├── lookupd http listener (listen.serve_connections)              lookupd/http_api.py
        │   └── lookupd http connection: h11 loop, one request at a time   http/connection.py
        ├── coordinator (with --etcd-endpoints): campaign, then coordinate   cluster/coordinator.py
        │   ├── cluster view   etcd's keys, kept by a watch
        │   └── reconcile      leaders and ISRs after each change (while elected)
        └── lookupd broker call: a placed broker that (re)registered       lookupd/brokers.py
            is told its managed topics, one task per broker while needed
    task_status.started(LookupdAddresses(...))   # after both listeners accept

Each connection's task catches and logs its own failures (listen.py): no connection
can end the lookupd. There are no timers: the registry is plain data, inactivity and tombstones are
judged when a request asks (``now`` against the stored times). A creation call
made by ``/topic/create`` itself runs inside that request. The coordinator owns
the etcd client: its kept-alive connections close when the coordinator task ends.
"""

from __future__ import annotations

import functools
import socket
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

import attrs
import trio

from ..http.connection import FdTransport, serve_http_connection
from ..listen import (
    bound_address,
    open_server,
    serve_connections,
    serve_listening,
)
from ..protocol.lookupd import LookupdInfo
from ..version import NSQD_RELEASE
from .brokers import BrokerSync
from .config import LookupdConfig
from .http_api import LookupdHttpApi
from .registry import RegistrationDB
from .tcp import LookupSession
from .topics import TopicCatalog

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable

__all__ = ["TREE", "LookupdAddresses", "open_lookupd", "serve_lookupd"]

TCP_TASK: Final = "trionsq.lookupd.tcp.LookupSession.run"
HTTP_TASK: Final = "trionsq.lookupd.http.connection"
"""Every connection's task of a listener has one name (not one string built per task)."""


@attrs.frozen
class LookupdAddresses:
    """Where a started lookupd listens (the real ports, so port 0 works), and its registry."""

    tcp: tuple[str, int]
    http: tuple[str, int]
    registry: RegistrationDB = attrs.field(eq=False, repr=False)
    """The live registration DB, for in-process inspection by an embedding app or a
    test. Use it only from the lookupd's own Trio thread."""
    catalog: TopicCatalog = attrs.field(factory=TopicCatalog, eq=False, repr=False)
    """Topics created through ``/topic/create`` with partitions, and their placement."""


async def serve_lookupd(
    config: LookupdConfig,
    *,
    task_status: trio.TaskStatus[LookupdAddresses] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a lookupd until cancelled; ``task_status.started`` gets the bound addresses.

    Use as ``addresses = await nursery.start(serve_lookupd, config)``. Both listeners
    are bound and accepting before ``started``, so an nsqd or a consumer may connect
    at once. Cancelling it closes every connection; nothing is persisted (nsqlookupd
    keeps no state either: nsqd instances re-register when they reconnect).

    Raises:
        ConfigError: a configuration nsqlookupd refuses, and
        OSError: a listener that cannot bind (``ListenError``); both themselves,
            not in an ExceptionGroup, as is anything else that fails before
            ``started``.
    """
    config.validate()  # a bad configuration is a ConfigError itself, before any task
    # bound before the nursery opens, as serve_nsqd binds its own
    start = functools.partial(_start_serving, config)
    await serve_listening((config.tcp_host_port, config.http_host_port), start, task_status)


async def _start_serving(
    config: LookupdConfig,
    listeners: list[list[trio.SocketListener]],
    nursery: trio.Nursery,
) -> LookupdAddresses:
    """Every task of the lookupd nursery started, on its TCP and HTTP listeners
    already bound; the addresses it serves at."""
    tcp_listeners, http_listeners = listeners
    registry = RegistrationDB(
        inactive_producer_timeout=config.inactive_producer_timeout,
        tombstone_lifetime=config.tombstone_lifetime,
    )
    clock = trio.current_time
    catalog = TopicCatalog()
    brokers = BrokerSync(catalog, registry, clock)
    brokers.nursery = nursery
    tcp = bound_address(tcp_listeners)
    http = bound_address(http_listeners)
    info = LookupdInfo(
        tcp_port=tcp[1],
        http_port=http[1],
        version=NSQD_RELEASE,
        broadcast_address=config.broadcast_address,
        hostname=socket.gethostname(),
    )

    def handle_tcp(stream: trio.SocketStream) -> Awaitable[None]:
        return LookupSession(stream, registry, info, clock, brokers).run()

    replicated = None
    if config.etcd_endpoints:  # the cluster's coordinator campaign (docs/replication.md)
        from ..cluster.etcd import EtcdClient
        from ..cluster.keys import ClusterKeys, CoordinatorInfo
        from ..cluster.lookupd_side import ClusterLookup
        from ..cluster.serve import refuse_start_if_etcd_refuses

        me = CoordinatorInfo(
            f"{config.broadcast_address}:{http[1]}", f"{config.broadcast_address}:{http[1]}"
        )
        client = EtcdClient(
            config.etcd_urls,
            access=config.etcd_access,
            probe_key=ClusterKeys(config.cluster_id).root,
        )
        await refuse_start_if_etcd_refuses(client)
        replicated = ClusterLookup(client, config.cluster_id, me, config.cluster_lease_ttl)
        await nursery.start(replicated.run)
    api = LookupdHttpApi(
        registry,
        clock,
        catalog=catalog,
        brokers=brokers,
        info=info,
        replicated=replicated,
        min_isr=config.min_isr,
    )

    def handle_http(stream: trio.SocketStream) -> Awaitable[object]:
        return serve_http_connection(FdTransport(stream), api.dispatch, api.body_limit)

    # each connection's failures stay in its own task (listen.py)
    await nursery.start(
        functools.partial(serve_connections, handle_tcp, tcp_listeners, name=TCP_TASK)
    )
    await nursery.start(
        functools.partial(serve_connections, handle_http, http_listeners, name=HTTP_TASK)
    )
    return LookupdAddresses(tcp=tcp, http=http, registry=registry, catalog=catalog)


@asynccontextmanager
async def open_lookupd(config: LookupdConfig | None = None) -> AsyncIterator[LookupdAddresses]:
    """``async with open_lookupd() as addresses:`` a lookupd on 127.0.0.1, free ports."""
    chosen = config if config is not None else LookupdConfig.loopback()
    async with open_server(serve_lookupd, chosen) as addresses:
        yield addresses


TREE: Final = (
    ("serve_lookupd", None),
    ("lookupd nursery", "serve_lookupd"),
    ("lookupd tcp listener", "lookupd nursery"),
    ("lookupd tcp connection", "lookupd tcp listener"),
    ("lookupd http listener", "lookupd nursery"),
    ("lookupd http connection", "lookupd http listener"),
    ("lookupd broker call", "lookupd nursery"),
    ("coordinator", "lookupd nursery"),
    ("coordinator view", "coordinator"),
    ("coordinator reconcile", "coordinator"),
)
"""Each long-lived task of a lookupd and its parent, as data (as nursery_tree.TREE),
so the docstring's tree and the code can be checked against each other."""
