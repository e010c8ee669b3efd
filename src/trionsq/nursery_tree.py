"""Where every long-lived task of a broker process gets its parent.

The tree this module builds (design §3); a task not named here has no place in
trionsq (a lookupd process has its own small tree, in lookupd/server.py; the client's
tasks, under the task that opens a producer or consumer, are :data:`CLIENT_TREE`
below)::

    serve_nsqd(config, task_status)                  this module: builds the tree
    ├── broker nursery
    │   ├── per channel: ChannelRunner [own CancelScope; delete = cancel]   dispatch/router.py
    │   │   ├── router task    cursor -> ready consumers, in batches
    │   │   ├── expiry task    in-flight + deferred deadlines (ExpiryTimer)
    │   │   └── read ahead     the next cold chunk of a disk backlog (one read, then ends)
    │   ├── storage: syncer (fsync by --sync-every/--sync-timeout)       broker/storage.py
    │   ├── storage: persister (metadata + channel states, atomic, 1 s)   broker/storage.py
    │   ├── dead-letter mover: moves what leaves a channel to its dead-letter topic  broker/dead_letter_moves.py
    │   ├── TTL timers: runners for a topic's idle channels once it has ##ttl headers (then ends)  broker/broker.py
    │   ├── group rebalance: a consumer group's deal after --group-rebalance-delay  broker/group_coordinator.py
    │   ├── alarm clock: wakes idle connections' pumps at their due times  server/alarms.py
    │   ├── statsd: pushes /stats figures every --statsd-interval (when set)  server/statsd.py
    │   ├── TCP listener (listen.serve_connections) -> per connection nursery   server/tcp.py
    │       ├── reader task            bytes -> protocol events -> broker; writes replies
    │       └── messagePump task       message batches + heartbeats -> socket
    │   ├── TubeMQ (with --tubemq-*-address): timer, leases and waiting pulls   tubemq/node.py
    │   ├── TubeMQ master listener -> per connection task (the reader)   tubemq/connection.py
    │   │   └── writer        replies answered after their call was read
    │   ├── TubeMQ broker listener -> per connection task (the reader)
    │   │   └── writer        pull replies the router completed
    │   ├── HTTP listener (serve_connections) -> per connection task: h11 loop   http/
    │   │   └── an /admin/stream upgrade: admin stream nursery   server/admin_stream.py
    │   │       ├── frame reader   trio-websocket: bytes -> frames, pings, close
    │   │       ├── op reader      subscribe / sample / admin ops -> replies queued
    │   │       └── (the connection task) writer: queued events + snapshots -> socket
    │   ├── HTTPS listener (serve_connections, with a TLS certificate) -> per connection task
    │   └── lookupd peers nursery (address list: config, PUT /config)  server/lookupd_peers.py
    │       ├── per lookupd address: peer [own CancelScope; removed = cancel]
    │       │   └── reader task    replies -> the waiting command; close -> reconnect
    │       └── per new topic: channel pre-creation (asks every lookupd, then ends)
    │   ├── replication listener (with --etcd-endpoints) -> per follower connection   cluster/leader_streams.py
    │   │   └── ACK reader   the follower's ACKs move the commit end
    │   └── replica manager (with --etcd-endpoints)   cluster/replica_manager.py
    │       ├── registration   the broker's key on its etcd lease, renewed
    │       ├── cluster view   etcd's keys, kept by a watch; roles follow it
    │       ├── ISR upkeep     lagging followers leave the ISR, caught-up ones join
    │       ├── consumer state shipper   channels' positions and settings, every 0.1 s
    │       └── per followed partition: follower stream [own CancelScope; role over = cancel]
    task_status.started(BoundAddresses(...))   # after every listener accepts

Every listener accepts through ``listen.serve_connections``: each connection's task
(``listen._run_connection``) catches and logs its own failures, so no connection can
end the broker; only a listener's own failure does.

Connections that outlive a call but are no task: the etcd client's kept-alive ones
(``http/kept_connections.py``) belong to the replica manager, which closes them when
it ends (after its tasks; a call in flight closes its own); in a lookupd, to the
coordinator (lookupd/server.py). A watch's connection is its own task's.

State of the build: ``serve_nsqd`` runs the broker nursery (channel runners), the
TCP listener with its per-connection nurseries, the HTTP/HTTPS listeners (whose
connections may become admin streams) and the lookupd peers. The lookupd peers start
before ``started`` but connect in the background: an unreachable lookupd delays
nothing.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

import attrs
import trio

from . import crash_points
from .addresses import peer_address
from .broker.broker import Broker
from .broker.storage import Storage, descriptor_budget
from .config import NsqdConfig
from .dispatch.router import ChannelRunner
from .http.connection import FdTransport, StreamTransport, serve_http_connection
from .listen import (
    bound_address,
    open_server,
    serve_connections,
    serve_listening,
)
from .server.admin_gate import AdminGate, lookupd_origins
from .server.admin_snapshots import SnapshotHub
from .server.admin_stream import StreamShared
from .server.admission import ConnectionGate, reserved_sockets
from .server.alarms import AlarmClock
from .server.group_views import LookupdGroupViews
from .server.lookupd_peers import LookupdPeers, PeerTiming, peer_identity
from .server.nsqd_api import NsqdHttpApi, RuntimeOptions
from .server.tcp import ClientSession
from .version import NSQD_RELEASE

if TYPE_CHECKING:
    import ssl
    from collections.abc import AsyncIterator, Awaitable, Callable

    from .descriptors import DescriptorBudget
    from .http.connection import Transport

log = logging.getLogger("trionsq")
CONNECTION_TASK: Final = "trionsq.server.tcp.ClientSession.run"
"""Every TCP connection's task has this one name (not one string built per task)."""
HTTP_TASK: Final = "trionsq.http.connection"
HTTPS_TASK: Final = "trionsq.https.connection"

__all__ = [
    "CLIENT_TASKS",
    "CLIENT_TREE",
    "TASKS",
    "TREE",
    "BoundAddresses",
    "open_nsqd",
    "serve_nsqd",
]


@attrs.frozen
class BoundAddresses:
    """Where a started broker listens (the real ports, so port 0 works), and the broker."""

    tcp: tuple[str, int]
    broker: Broker = attrs.field(eq=False, repr=False)
    """The running broker, for in-process control (pause, empty, delete) by an
    embedding app or a test. Call it only from the broker's own Trio thread."""
    http: tuple[str, int] | None = None
    """None while the HTTP listener is disabled (``http_address=""``)."""
    https: tuple[str, int] | None = None
    """None unless a TLS certificate is configured."""
    tubemq_master: tuple[str, int] | None = None
    """TubeMQ's master service; None unless ``--tubemq-*-address`` are set."""
    tubemq_broker: tuple[str, int] | None = None
    """TubeMQ's broker service; None unless ``--tubemq-*-address`` are set."""


async def serve_nsqd(
    config: NsqdConfig,
    *,
    wall_clock: Callable[[], int] = time.time_ns,
    task_status: trio.TaskStatus[BoundAddresses] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a broker until cancelled; ``task_status.started`` gets the bound addresses.

    Use as ``addresses = await nursery.start(serve_nsqd, config)``. Every listener is
    bound before ``started``, so a client may connect at once. ``wall_clock``: Unix
    nanoseconds now, for publish times and delays (a test under Trio's MockClock
    passes one that follows it, so a DPUB due in days comes due in virtual time).

    Raises:
        ConfigError: a configuration nsqd refuses (``NsqdConfig.validate``), and
        OSError: a listener that cannot bind; both themselves, before any task
            starts (as nsqd, the listeners are bound before the data is loaded);
            a TubeMQ or replication listener is bound later, its ``OSError``
            raised itself as well, as is
        StorageFormatError: a data directory the broker cannot read.
    """
    config.validate()
    # the broker nursery: what fails before it serves (a TubeMQ or replication
    # listener, the data directory) is raised as itself, not in its group
    start = functools.partial(_start_serving, config, wall_clock)
    await serve_listening(_listen_addresses(config), start, task_status)


async def _start_serving(
    config: NsqdConfig,
    wall_clock: Callable[[], int],
    listeners: list[list[trio.SocketListener]],
    broker_nursery: trio.Nursery,
) -> BoundAddresses:
    """Every task of the broker nursery started, on listeners already bound; the
    addresses it serves at."""
    settings = config.server_settings(NSQD_RELEASE)
    started_at = time.time()
    tcp_listeners, http_listeners, https_listeners = listeners
    broker, gate = await _start_broker(config, broker_nursery, wall_clock)
    tcp = bound_address(tcp_listeners)
    http = bound_address(http_listeners) if http_listeners else None
    https = bound_address(https_listeners) if https_listeners else None
    client_ids = itertools.count(1)
    tls_context = _tls_context(config)

    def handle_tcp(stream: trio.SocketStream) -> Awaitable[None]:
        if not gate.admit("TCP"):
            return gate.refuse(stream)
        # the session's own coroutine, not an async wrapper awaiting it: one frame
        # fewer for each of many idle connections (issue 14); the listener's task
        # around it keeps its failures to itself (listen.py)
        return ClientSession(
            next(client_ids), stream, broker, settings, alarms, tls_context, gate.closed
        ).run()

    peers = await _start_peers(config, broker, broker_nursery, gate, (tcp, http))
    broker.group_coordinator.learn = LookupdGroupViews(peers.http_addresses, config)
    alarms = AlarmClock()
    await broker_nursery.start(alarms.run)
    if config.statsd_address:
        from .server.statsd import StatsdPusher

        statsd = StatsdPusher(broker, config, http_port=http[1] if http else 0)
        await broker_nursery.start(statsd.run)
    await broker_nursery.start(
        functools.partial(serve_connections, handle_tcp, tcp_listeners, name=CONNECTION_TASK)
    )
    tubemq = None
    if config.tubemq_enabled:
        from .tubemq.serve import start_tubemq

        tubemq = await start_tubemq(broker, config, client_ids, broker_nursery, gate)
    # one set of runtime options for HTTP and HTTPS, as nsqd has one
    runtime = RuntimeOptions(
        config.log_level, config.lookupd_tcp_addresses, lookupd_changed=peers.set_addresses
    )
    # and one admin stream gate and snapshot hub, so bounds and builds are per broker
    admin = StreamShared(
        AdminGate(config, lookupd_origins=lambda: lookupd_origins(peers.page_names())),
        SnapshotHub(broker, started_at=started_at),
    )

    def api(is_https: bool) -> NsqdHttpApi:
        return NsqdHttpApi(
            broker,
            config,
            started_at=started_at,
            ports=lambda: (tcp[1], http[1] if http else -1),
            https_port=lambda: https[1] if https else None,
            is_https=is_https,
            runtime=runtime,
            admin=admin,
        )

    await _start_http(broker_nursery, api, http_listeners, https_listeners, tls_context, gate)
    if crash_points.ARMED:
        crash_points.arm()
    return BoundAddresses(
        tcp=tcp,
        broker=broker,
        http=http,
        https=https,
        tubemq_master=tubemq.master if tubemq else None,
        tubemq_broker=tubemq.broker if tubemq else None,
    )


async def _start_broker(
    config: NsqdConfig, broker_nursery: trio.Nursery, wall_clock: Callable[[], int]
) -> tuple[Broker, ConnectionGate]:
    """The broker with what its storage recovers, and the storage's tasks started."""
    descriptors = _descriptor_budget(config)
    gate = ConnectionGate(descriptors)
    storage = Storage(config, wall_clock, descriptors)
    broker = Broker(config, broker_nursery, storage, drive=ChannelRunner, wall_clock=wall_clock)
    storage.recover(broker)
    broker.dead_letter_mover.settle()  # what recovery found on its way, before serving
    await broker_nursery.start(storage.run, broker)
    await broker_nursery.start(broker.dead_letter_mover.run)
    await broker.run_ttl_timers()  # restored channels' messages expire unread too
    return broker, gate


def _tls_context(config: NsqdConfig) -> ssl.SSLContext | None:
    """One TLS configuration for the TCP upgrade and HTTPS, as nsqd has (None: no
    certificate)."""
    if not config.tls_enabled:
        return None
    from .server.tls import server_tls_context

    return server_tls_context(config)


def _descriptor_budget(config: NsqdConfig) -> DescriptorBudget:
    """The broker's share of the process's open-file limit (``descriptors.py``), said
    at start: a limit too low for the reserve gets a warning."""
    budget = descriptor_budget(config, sockets=reserved_sockets(config))
    log.log(
        logging.WARNING if budget.starved else logging.INFO,
        "descriptors: open-file limit %d, %d reserved, %d for files and connections%s",
        budget.limit,
        budget.reserved,
        budget.pool,
        f" (files at most {budget.max_open_files})" if config.max_open_files else "",
    )
    return budget


def _listen_addresses(config: NsqdConfig) -> tuple[tuple[str, int] | None, ...]:
    """TCP, HTTP (None when disabled) and HTTPS (None without a certificate)."""
    http = config.http_host_port if config.http_address else None
    https = config.https_host_port if config.tls_enabled and config.https_address else None
    return config.tcp_host_port, http, https


async def _start_http(
    broker_nursery: trio.Nursery,
    api: Callable[[bool], NsqdHttpApi],
    http_listeners: list[trio.SocketListener],
    https_listeners: list[trio.SocketListener],
    tls_context: ssl.SSLContext | None,
    gate: ConnectionGate,
) -> None:
    """The HTTP and HTTPS listeners, each connection a task of its listener."""
    if http_listeners:
        plain_api = api(False)

        async def handle_http(stream: trio.SocketStream) -> None:
            if not gate.admit("HTTP"):
                await gate.refuse(stream)
                return
            try:
                await _serve_http(FdTransport(stream), stream, plain_api)
            finally:
                gate.http_closed()

        await broker_nursery.start(
            functools.partial(serve_connections, handle_http, http_listeners, name=HTTP_TASK)
        )
    if https_listeners and tls_context is not None:
        tls_api = api(True)
        ssl_listeners = [
            trio.SSLListener(listener, tls_context, https_compatible=True)
            for listener in https_listeners
        ]

        async def handle_https(stream: trio.SSLStream[trio.SocketStream]) -> None:
            if not gate.admit("HTTPS"):
                await gate.refuse(stream)
                return
            try:
                peer = peer_address(stream.transport_stream.socket)
                await _serve_http(StreamTransport(stream, peer), stream, tls_api)
            finally:
                gate.http_closed()

        await broker_nursery.start(
            functools.partial(serve_connections, handle_https, ssl_listeners, name=HTTPS_TASK)
        )


async def _serve_http(transport: Transport, stream: trio.abc.Stream, api: NsqdHttpApi) -> None:
    """One HTTP connection (its listener's task closes it, whatever happens); an
    ``/admin/stream`` upgrade continues on the connection as the admin stream."""
    stream_api = api.admin_stream
    upgrade = await serve_http_connection(
        transport, api.dispatch, api.body_limit, upgrade=stream_api.accepts
    )
    if upgrade is not None:
        await stream_api.serve(stream, upgrade)


@asynccontextmanager
async def open_nsqd(config: NsqdConfig | None = None) -> AsyncIterator[BoundAddresses]:
    """``async with open_nsqd() as addresses:`` a broker on 127.0.0.1, port 0 by default.

    Raises:
        ConfigError, OSError, StorageFormatError: as :func:`serve_nsqd`, themselves
            (not in a group).
    """
    chosen = config if config is not None else NsqdConfig.loopback()
    async with open_server(serve_nsqd, chosen) as addresses:
        yield addresses


async def _start_peers(
    config: NsqdConfig,
    broker: Broker,
    nursery: trio.Nursery,
    gate: ConnectionGate,
    bound: tuple[tuple[str, int], tuple[str, int] | None],
) -> LookupdPeers:
    """The broker's peers: with ``--etcd-endpoints`` the replicated cluster's side
    (docs/replication.md; its hook in place before anyone may publish; its
    connections within the descriptor budget of ``gate``), then the connections to
    the configured lookupds, identifying with the ``bound`` TCP and HTTP ports."""
    tcp, http = bound
    http_port = http[1] if http else 0
    if config.cluster_enabled:
        from .cluster.serve import start_cluster

        await start_cluster(broker, config, (tcp[1], http_port), nursery, gate)
    identity = peer_identity(config, NSQD_RELEASE, tcp[1], http_port)
    peers = LookupdPeers(
        broker,
        identity,
        config.lookupd_tcp_addresses,
        max_reply_size=config.max_body_size,
        timing=PeerTiming(ping_interval=config.lookupd_ping_interval),
    )
    await nursery.start(peers.run)
    return peers


TREE: Final = (
    ("serve_nsqd", None),
    ("broker nursery", "serve_nsqd"),
    ("channel runner", "broker nursery"),
    ("channel router", "channel runner"),
    ("channel expiry", "channel runner"),
    ("channel read ahead", "channel runner"),
    ("alarm clock", "broker nursery"),
    ("statsd", "broker nursery"),
    ("tcp listener", "broker nursery"),
    ("connection nursery", "tcp listener"),
    ("connection reader", "connection nursery"),
    ("connection message pump", "connection nursery"),
    ("storage", "broker nursery"),
    ("storage syncer", "storage"),
    ("storage persister", "storage"),
    ("dead letter mover", "broker nursery"),
    ("ttl timers", "broker nursery"),
    ("group rebalance", "broker nursery"),
    ("tubemq timer", "broker nursery"),
    ("tubemq master listener", "broker nursery"),
    ("tubemq master connection", "tubemq master listener"),
    ("tubemq master connection writer", "tubemq master connection"),
    ("tubemq broker listener", "broker nursery"),
    ("tubemq broker connection", "tubemq broker listener"),
    ("tubemq broker connection writer", "tubemq broker connection"),
    ("http listener", "broker nursery"),
    ("http connection", "http listener"),
    ("https listener", "broker nursery"),
    ("https connection", "https listener"),
    ("lookupd peers", "broker nursery"),
    ("lookupd peer", "lookupd peers"),
    ("lookupd peer reader", "lookupd peer"),
    ("channel pre-creation", "lookupd peers"),
    ("admin stream", "http connection"),
    ("admin stream frame reader", "admin stream"),
    ("admin stream op reader", "admin stream"),
    ("replication listener", "broker nursery"),
    ("replication connection", "replication listener"),
    ("replication ack reader", "replication connection"),
    ("replica manager", "broker nursery"),
    ("cluster registration", "replica manager"),
    ("cluster view", "replica manager"),
    ("isr upkeep", "replica manager"),
    ("follower stream", "replica manager"),
    ("consumer state shipper", "replica manager"),
)
"""Each long-lived task and the task or nursery that is its parent, as data, so the
tree in the docstring and the code that builds it can be checked against each other."""

TASKS: Final = {
    "serve_nsqd": "serve_nsqd",
    "channel runner": "ChannelRunner.run",  # the router loop runs in this task
    "channel expiry": "ExpiryTimer.run",
    "channel read ahead": "ChannelRunner._read_ahead",
    "alarm clock": "AlarmClock.run",
    "statsd": "StatsdPusher.run",
    "tcp listener": "serve_connections",
    "connection nursery": "_run_connection",  # ClientSession.run: the reader, in this task
    "connection message pump": "ClientSession._pump",
    "storage": "Storage.run",
    "storage syncer": "Storage._sync_forever",
    "storage persister": "Storage._persist_forever",
    "dead letter mover": "DeadLetterMover.run",
    "ttl timers": "Broker.run_ttl_timers",
    "group rebalance": "GroupCoordinator._rebalance_after",
    "tubemq timer": "TubeNode.run",
    "tubemq master listener": "serve_connections",
    "tubemq master connection": "_run_connection",  # TubeConnection.run: the reader
    "tubemq master connection writer": "TubeConnection._write_late",
    "tubemq broker listener": "serve_connections",
    "tubemq broker connection": "_run_connection",  # TubeConnection.run: the reader
    "tubemq broker connection writer": "TubeConnection._write_late",
    "http listener": "serve_connections",
    "http connection": "_run_connection",
    "https listener": "serve_connections",
    "https connection": "_run_connection",
    "admin stream frame reader": "WebSocketConnection._reader_task",
    "admin stream op reader": "_Subscriber._read_ops",
    "lookupd peers": "LookupdPeers.run",
    "lookupd peer": "LookupdPeer.run",
    "lookupd peer reader": "LookupdPeer._read_replies",
    "channel pre-creation": "LookupdPeers.precreate_channels",
    "replication listener": "serve_connections",
    "replication connection": "_run_connection",  # leader_streams.serve_follower
    "replication ack reader": "_read_acks",
    "replica manager": "ReplicaManager.run",
    "cluster registration": "Registration.run",  # its lease keep-alive loop too
    "cluster view": "follow_cluster",
    "isr upkeep": "ReplicaManager._upkeep_forever",
    "follower stream": "ReplicaManager._follow",
    "consumer state shipper": "ReplicaManager._ship_state_forever",
}
"""The coroutine each node of :data:`TREE` runs as, for the nodes that are tasks (the
others are nurseries, or loops inside their parent's task): a test walks a running
broker's task tree and finds each task where TREE puts it
(tests/integration/test_task_tree.py)."""


CLIENT_TREE: Final = (
    ("caller task", None),
    ("consumer nursery", "caller task"),
    ("consumer subscription", "consumer nursery"),
    ("consumer connection", "consumer subscription"),
    ("consumer connection writer", "consumer connection"),
    ("consumer connection reader", "consumer connection"),
    ("consumer RDY redistribution", "consumer nursery"),
    ("consumer discovery", "consumer nursery"),
    ("consumer backoff wait", "consumer nursery"),
    ("consumer goodbye nursery", "caller task"),
    ("consumer goodbye", "consumer goodbye nursery"),
    ("handle call", "caller task"),
    ("handler nursery", "handle call"),
    ("handler group", "handler nursery"),
    ("handler workers", "handler group"),
    ("handler", "handler workers"),
    ("producer nursery", "caller task"),
    ("producer connection", "producer nursery"),
    ("producer connection writer", "producer connection"),
    ("producer connection reader", "producer connection"),
    ("producer batcher", "producer nursery"),
    ("producer batch sends", "producer batcher"),
    ("producer batch send", "producer batch sends"),
    ("producer discovery", "producer nursery"),
    ("blocking nursery", "caller task"),
    ("blocking message pump", "blocking nursery"),
    ("blocking answer flusher", "blocking nursery"),
    ("blocking publish gatherer", "blocking nursery"),
)
"""The tasks :mod:`trionsq.client` starts, under the task that opens the producer or
consumer (``async with open_consumer(...)`` runs its nursery in the caller's task):
none outlives the ``async with`` block that owns it. A consumer's connections run in
cancel scopes of their own, shielded while subscribed, so that a cancelled consumer
still stops gracefully over them: its goodbye (CLS and CLOSE_WAIT on each, one task
a connection, in the caller's task as the block ends) comes first, then they are
cancelled. Handler mode's tasks run in a scope shielded until the consumer stops,
then for ``drain_timeout``. The blocking client runs the same tree in its thread's
``trio.run`` (the caller task is ``_Hosted._main``), with a consumer's pump and
answer flusher, or a producer's gatherer of the threads' publishes, beside the
client's nursery."""

CLIENT_TASKS: Final = {
    "consumer subscription": "Consumer._serve",  # reconnects in a loop
    "consumer connection writer": "open_connection.<locals>.write",
    "consumer connection reader": "open_connection.<locals>.read",
    "consumer RDY redistribution": "Consumer._redistribute_forever",
    "consumer discovery": "Discovery.run",
    "consumer backoff wait": "Consumer._backoff_wait",
    "consumer goodbye": "Consumer._say_goodbye",
    "handle call": "Consumer.handle",
    "handler group": "Consumer._handlers",
    "handler": "Consumer._handle_forever",
    "producer connection": "Producer._serve",
    "producer connection writer": "open_connection.<locals>.write",
    "producer connection reader": "open_connection.<locals>.read",
    "producer batcher": "Batcher.run",
    "producer batch send": "Batcher._send_then_release",
    "producer discovery": "Discovery.run",
    "blocking message pump": "BlockingConsumer._pump",
    "blocking answer flusher": "BlockingConsumer._flush_forever",
    "blocking publish gatherer": "ThreadPublishes.gather_forever",
}
"""The coroutine each task node of :data:`CLIENT_TREE` runs as (checked by
tests/integration/test_task_tree.py on a running producer and consumer)."""
