"""A broker that loses a partition's leadership while alive (its etcd lease lapsed:
the coordinator elects another ISR member) closes the consumers subscribed there
with Youzan's fatal ``E_FAILED_ON_NOT_LEADER``, so they look up the new leader; it
delivers nothing more as a follower, where the leader's shipped state would rewind
the channel and hand the same messages out again."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.cluster.test_replicated_brokers import Cluster
from tests.integration.raw import Clients, next_error, next_frame, next_message, ok
from trionsq.cluster.etcd import EtcdClient
from trionsq.cluster.keys import TopicMeta
from trionsq.protocol import Fin, Mpub, Rdy, Sub

if TYPE_CHECKING:
    from pathlib import Path

    import trio

    from trionsq.cluster.etcd_process import EtcdServer


async def test_consumers_are_closed_when_their_broker_loses_the_leadership(
    etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    cluster = Cluster(etcd, cluster_id, nursery, tmp_path)
    await cluster.with_topic("l", TopicMeta(1, 2), ("a", "b"))
    leader = cluster.leader_of("l", 0)
    address = cluster.brokers[leader][0].tcp
    clients = Clients()
    producer = await clients.connect(address)
    await producer.send(Mpub("l", tuple(b"m%d" % n for n in range(6)), partition=0))
    assert ok(await next_frame(producer))
    consumer = await clients.connect(address)
    await consumer.send(Sub("l", "c", partition=0), Rdy(10))
    assert ok(await next_frame(consumer))
    first = [await next_message(consumer) for _ in range(6)]
    await consumer.send(*(Fin(m.id) for m in first[:3]))  # three stay in flight

    lease = cluster.manager(leader).registration.lease
    async with EtcdClient(etcd.endpoints) as client:
        await client.revoke(lease)  # registers again: seen as restarted
    await cluster.until(lambda: cluster.leader_of("l", 0) not in ("", leader))

    error = await next_error(consumer)
    assert error.code == "E_FAILED_ON_NOT_LEADER"
    frames = await consumer.read(1)  # then the broker closes the connection
    assert frames == [], frames
    await clients.close_all()
    cluster.stop()
