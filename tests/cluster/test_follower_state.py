"""A follower applies the consumer state its leader ships at most once a second
(follower_stream.STATE_APPLY_INTERVAL), not at each of the leader's 10 shipments a
second: only a leader serves from it. The last state it got is applied when it is
elected, before it serves, and otherwise within the interval without any further
frame, so its own files keep up."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from tests.cluster.test_replicated_brokers import (
    Cluster,
    leader_killed_then_only_in_flight_redelivered,
    two_brokers_ten_in_flight,
)
from trionsq.cluster.follower_stream import STATE_APPLY_INTERVAL
from trionsq.cluster.roles import FollowerRole
from trionsq.protocol import Fin
from trionsq.queues.cursor import ChannelCursor

if TYPE_CHECKING:
    from pathlib import Path

    import trio

    from trionsq.broker.broker import Broker
    from trionsq.cluster.etcd_process import EtcdServer
    from trionsq.protocol.message import Message
    from trionsq.testing import ProtocolClient


def _id(message: Message) -> int:
    return int.from_bytes(message.id[:8], "big")


def _applied(broker: Broker, ids: list[int]) -> bool:
    """Whether the follower's own channel ``c`` holds every id as finished."""
    channel = broker.topics["q"].partitions[0].channels.get("c")
    if channel is None or not isinstance(channel.cursor, ChannelCursor):
        return False
    return all(channel.cursor.is_finished(i) for i in ids)


def _pending_finishes(role: FollowerRole, ids: list[int]) -> bool:
    """Whether a shipped state waits, not applied, that has every id finished."""
    if role.pending_state is None:
        return False
    state = orjson.loads(role.pending_state)["channels"]["c"]
    return all(i < state["confirmed_id"] or i in state["finished"] for i in ids)


async def _first_state_applied_then_second_pending(
    cluster: Cluster, consumer: ProtocolClient, messages: list[Message], follower: str
) -> tuple[FollowerRole, list[int]]:
    """FIN m0 and wait until the follower applied it (its interval starts), then FIN
    every message but m2, m5, m8 and wait until that state waits on the follower."""
    follower_broker = cluster.brokers[follower][0].broker
    await consumer.send(Fin(messages[0].id))
    await cluster.until(lambda: _applied(follower_broker, [_id(messages[0])]))
    role = cluster.manager(follower).roles["q", 0]
    assert isinstance(role, FollowerRole)
    second = [m for n, m in enumerate(messages) if n and n % 3 != 2]
    await consumer.send(*(Fin(m.id) for m in second))
    ids = [_id(m) for m in second]
    await cluster.until(lambda: _pending_finishes(role, ids))
    assert not _applied(follower_broker, ids)  # shipped, not applied yet
    return role, ids


async def test_an_elected_follower_serves_from_the_state_it_had_not_applied(
    etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    cluster, clients, leader, follower, consumer, messages = await two_brokers_ten_in_flight(
        etcd, cluster_id, nursery, tmp_path
    )
    await _first_state_applied_then_second_pending(cluster, consumer, messages, follower)
    # within the interval: the state still waits when the leader goes
    await leader_killed_then_only_in_flight_redelivered(cluster, clients, leader, follower)
    await clients.close_all()
    cluster.stop()


async def test_a_waiting_state_is_applied_within_the_interval_without_another_frame(
    etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    cluster, clients, _, follower, consumer, messages = await two_brokers_ten_in_flight(
        etcd, cluster_id, nursery, tmp_path
    )
    role, ids = await _first_state_applied_then_second_pending(
        cluster, consumer, messages, follower
    )
    follower_broker = cluster.brokers[follower][0].broker
    waited = await cluster.until(lambda: _applied(follower_broker, ids))
    assert waited <= STATE_APPLY_INTERVAL + 0.5  # the deadline, not a later shipment
    assert role.pending_state is None
    assert cluster.manager(follower).roles["q", 0] is role  # still following
    await clients.close_all()
    cluster.stop()
