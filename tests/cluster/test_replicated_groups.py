"""A consumer group over a replicated partition: its leader ships who owns the
partition, so the new leader's first deal after a failover starts from that owner
(sticky) instead of dealing the partition afresh."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.cluster.test_replicated_brokers import Cluster
from tests.integration.raw import Clients, next_frame, next_message, ok, quiet
from trionsq.cluster.keys import TopicMeta
from trionsq.cluster.roles import LeaderRole
from trionsq.protocol import IdentifyRequest, Pub, Rdy, Sub
from trionsq.protocol.client import encode_identify

if TYPE_CHECKING:
    from pathlib import Path

    import trio

    from trionsq.cluster.etcd_process import EtcdServer
    from trionsq.testing import ProtocolClient

FIRST, SECOND = "z-worker", "a-worker"
"""The first member to join owns the partition; a deal made afresh over both gives
it to the other (the deal takes members in name order)."""


async def _join(clients: Clients, address: tuple[str, int], member: str) -> ProtocolClient:
    link = await clients.connect(address)
    await link.stream.send_all(encode_identify(IdentifyRequest(group_member=member)))
    assert ok(await next_frame(link))
    await link.send(Sub("g", "c", partition=0), Rdy(10))
    assert ok(await next_frame(link))
    return link


async def test_the_new_leader_keeps_the_partition_with_its_group_owner(
    etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    cluster = Cluster(etcd, cluster_id, nursery, tmp_path)
    await cluster.with_topic("g", TopicMeta(1, 2), ("a", "b"))
    leader = cluster.leader_of("g", 0)
    follower = next(b for b in cluster.brokers if b != leader)
    clients = Clients()
    leader_broker = cluster.brokers[leader][0].broker
    await _join(clients, cluster.brokers[leader][0].tcp, FIRST)
    await cluster.until(lambda: leader_broker.groups[("g", "c")].owners == {0: FIRST})
    await _join(clients, cluster.brokers[leader][0].tcp, SECOND)
    group = leader_broker.groups[("g", "c")]
    await cluster.until(lambda: group.generation >= 2 and set(group.connections) == {FIRST, SECOND})
    assert group.owners == {0: FIRST}  # sticky on the leader

    coordinator = cluster.brokers[follower][0].broker.group_coordinator
    await cluster.until(lambda: coordinator.shipped_owners("g", "c") == {0: FIRST})
    cluster.brokers[leader][1].cancel()
    del cluster.brokers[leader]
    await cluster.until(lambda: cluster.leader_of("g", 0) == follower)
    await cluster.until(
        lambda: isinstance(cluster.manager(follower).roles.get(("g", 0)), LeaderRole)
    )
    address = cluster.brokers[follower][0].tcp
    second = await _join(clients, address, SECOND)  # the other member comes back first
    first = await _join(clients, address, FIRST)
    new_broker = cluster.brokers[follower][0].broker
    await cluster.until(lambda: ("g", "c") in new_broker.groups)
    regrouped = new_broker.groups[("g", "c")]
    await cluster.until(lambda: set(regrouped.connections) == {FIRST, SECOND})
    await cluster.until(lambda: regrouped.generation >= 1 and not regrouped.pending)
    assert regrouped.owners == {0: FIRST}

    producer = await clients.connect(address)
    await producer.send(Pub("g", b"after", partition=0))
    assert ok(await next_frame(producer))
    assert (await next_message(first)).body == b"after"
    assert await quiet(second, 0.3) == []
    await clients.close_all()
    cluster.stop()
