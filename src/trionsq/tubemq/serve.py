"""The TubeMQ listeners: the master service and the broker service, one node.

Started by :func:`trionsq.nursery_tree.serve_nsqd` when both
``--tubemq-master-address`` and ``--tubemq-broker-address`` are set; the node's
timer and both listeners run in the broker nursery, each connection a task of its
listener with its writer beside it (nursery_tree.TREE).
"""

from __future__ import annotations

import functools
import secrets
import time
from typing import TYPE_CHECKING, Final

import attrs

from ..listen import bound_address, open_listeners, serve_connections
from ..protocol.tubemq import Request, encode_reply
from .broker_service import BrokerService
from .connection import TubeConnection
from .master import MasterService
from .node import Identity, TubeNode
from .sends import SendReplies

if TYPE_CHECKING:
    from collections.abc import Awaitable, Iterator

    import trio

    from ..broker.broker import Broker
    from ..config import NsqdConfig
    from ..server.admission import ConnectionGate
    from .connection import Answer

__all__ = [
    "BROKER_CONNECTION_TASK",
    "MASTER_CONNECTION_TASK",
    "TubeAddresses",
    "start_tubemq",
]

MASTER_CONNECTION_TASK: Final = "trionsq.tubemq.master.connection"
BROKER_CONNECTION_TASK: Final = "trionsq.tubemq.broker.connection"
FRAME_OVERHEAD: Final = 64 * 1024
"""Room for the envelope and fields around the largest message a frame carries."""


@attrs.frozen
class TubeAddresses:
    master: tuple[str, int]
    broker: tuple[str, int]
    node: TubeNode = attrs.field(eq=False, repr=False)


def _no_turn() -> None:
    """The master stores nothing at the end of a turn."""


def _advertised_host(bound: str, config: NsqdConfig) -> str:
    """The host brokerInfos names: the listener's own address, or the broadcast
    address when it listens on every interface."""
    return config.broadcast_address if bound in ("0.0.0.0", "::", "") else bound  # noqa: S104


async def _admitted(connection: TubeConnection, gate: ConnectionGate) -> None:
    """A connection the descriptor budget admitted: it gives its place back at the end."""
    try:
        await connection.run()
    finally:
        gate.closed()


async def start_tubemq(
    broker: Broker,
    config: NsqdConfig,
    client_ids: Iterator[int],
    nursery: trio.Nursery,
    gate: ConnectionGate,
) -> TubeAddresses:
    """Open both listeners, start the node's timer and the accept loops in ``nursery``
    (the broker's), and return the bound addresses once both accept. Each connection
    passes the descriptor budget's ``gate`` first, as the broker's TCP ones do."""
    master_host, master_port = config.tubemq_master_host_port
    broker_host, broker_port = config.tubemq_broker_host_port
    master_listeners = await open_listeners(master_host, master_port)
    broker_listeners = await open_listeners(broker_host, broker_port)
    bound_master = bound_address(master_listeners)
    bound_broker = bound_address(broker_listeners)
    identity = Identity(
        broker_id=config.node_id,
        host=_advertised_host(bound_broker[0], config),
        port=bound_broker[1],
        checksum=int(time.time() * 1000),
        visit_token=secrets.randbits(62),
    )
    node = TubeNode(broker, config, identity, client_ids)
    await nursery.start(node.run)
    master = MasterService(node)
    broker_service = BrokerService(node)
    max_payload = config.max_msg_size + FRAME_OVERHEAD

    async def answer_master(call: Request, connection: TubeConnection) -> bytes | None:
        reply = await master.handle(call.body, connection.remote_address)
        return encode_reply(call.serial_no, call.method, reply)

    async def answer_broker(call: Request, connection: TubeConnection) -> Answer:
        reply = await broker_service.handle(call.serial_no, call.body, connection.send)
        if reply is None or isinstance(reply, SendReplies):  # SendReplies: after the turn
            return reply
        return encode_reply(call.serial_no, call.method, reply)

    def master_connection(stream: trio.SocketStream) -> Awaitable[None]:
        if not gate.admit("TubeMQ"):
            return gate.refuse(stream)
        connection = TubeConnection(stream, master.services, answer_master, max_payload, _no_turn)
        return _admitted(connection, gate)

    sends = broker_service.sends
    # a run of SendMessage calls is answered in one go; with AUTH on, each call is
    # authorized on its own, through answer_broker
    answer_sends = None if node.auth.enabled else sends.send_calls

    def broker_connection(stream: trio.SocketStream) -> Awaitable[None]:
        if not gate.admit("TubeMQ"):
            return gate.refuse(stream)
        connection = TubeConnection(
            stream,
            broker_service.services,
            answer_broker,
            max_payload,
            sends.end_turn,
            answer_sends,
        )
        return _admitted(connection, gate)

    for handler, listeners, name in (
        (master_connection, master_listeners, MASTER_CONNECTION_TASK),
        (broker_connection, broker_listeners, BROKER_CONNECTION_TASK),
    ):
        await nursery.start(functools.partial(serve_connections, handler, listeners, name=name))
    return TubeAddresses(bound_master, bound_broker, node)
