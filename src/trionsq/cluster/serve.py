"""Starting a broker's cluster side (``--etcd-endpoints``): the replication listener
and the replica manager, in the broker nursery (nursery_tree.py)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Final

from ..config import ConfigError, split_host_port
from ..listen import open_listeners, serve_connections
from ..version import NSQD_RELEASE
from .etcd import EtcdRefused
from .keys import BrokerInfo
from .replica_manager import ReplicaManager

if TYPE_CHECKING:
    import trio

    from ..broker.broker import Broker
    from ..config import NsqdConfig
    from ..server.admission import ConnectionGate
    from .etcd import EtcdClient

__all__ = ["REPLICATION_TASK", "refuse_start_if_etcd_refuses", "start_cluster"]

REPLICATION_TASK: Final = "trionsq.cluster.replication"


async def start_cluster(
    broker: Broker,
    config: NsqdConfig,
    ports: tuple[int, int],
    nursery: trio.Nursery,
    gate: ConnectionGate,
) -> ReplicaManager:
    """Hand the broker its replication hook, listen for followers, register in etcd;
    called before the client listeners serve, so no publish is taken as a single
    broker's (started again after a crash, a broker knows its roles first).

    The broker's cluster id is ``<broadcast address>:<TCP port>``: keep both fixed
    across restarts, since etcd names replicas by it. ``ports``: the bound TCP and
    HTTP ports; ``gate``: the broker's descriptor budget, which the replication
    connections share with the clients' (``descriptors.py``).
    """
    tcp_port, http_port = ports
    if config.replication_address:
        host, port = split_host_port(config.replication_address)
    else:
        host, port = config.tcp_host_port[0], 0
    listeners = await open_listeners(host, port)
    replication_port = listeners[0].socket.getsockname()[1]
    address = config.broadcast_address
    info = BrokerInfo(
        id=f"{address}:{config.broadcast_tcp_port or tcp_port}",
        broadcast_address=address,
        tcp_port=config.broadcast_tcp_port or tcp_port,
        http_port=config.broadcast_http_port or http_port,
        replication_port=replication_port,
        version=NSQD_RELEASE,
    )
    manager = ReplicaManager(broker, config, info, gate)
    try:
        await refuse_start_if_etcd_refuses(manager.client)
        broker.replication = manager  # refuses replicated writes until its roles are known
        await nursery.start(
            functools.partial(
                serve_connections, manager.serve_replication, listeners, name=REPLICATION_TASK
            )
        )
        await nursery.start(manager.run)  # registered, and the cluster's keys read
    except BaseException:
        await manager.client.aclose()  # the connection of the check, if run never took it
        raise
    return manager


async def refuse_start_if_etcd_refuses(client: EtcdClient) -> None:
    """One call to etcd before serving: a wrong password or certificate stops the
    start with one line (etcd merely down does not: the broker waits for it).

    Raises:
        ConfigError: etcd refused the credentials, the certificates or the scheme.
    """
    try:
        await client.check()
    except EtcdRefused as error:
        await client.aclose()
        raise ConfigError(f"etcd refused: {error}") from None
