"""A DPUB on a replicated partition is delivered only once it is committed: a
follower frozen (SIGSTOP) before it has the message holds the message back however
short its deferral, and it goes out once the follower answers again."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import orjson
import trio

from tests.integration.raw import Clients, bodies, next_frame, next_message, ok, quiet
from trionsq.cluster.local_cluster import LocalCluster
from trionsq.http.client import http_get, http_request
from trionsq.protocol import Dpub, Mpub, Pub, Rdy, Sub

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.cluster.etcd_process import EtcdServer
    from trionsq.testing import ProtocolClient

TOPIC = "deferred"


async def create_and_find_leader(cluster: LocalCluster, topic: str) -> str:
    """Create ``topic`` (1 partition, 2 replicas) through the coordinator; its leader."""
    lookupd = f"127.0.0.1:{cluster.lookupd_http}"
    with trio.fail_after(20):  # until the coordinator is elected and sees both brokers
        while True:
            query = f"/topic/create?topic={topic}&partition_num=1&replicator=2"
            reply = await http_request(
                "POST", lookupd, query, connect_timeout=2, request_timeout=10
            )
            if reply.status == 200:
                break
            await trio.sleep(0.1)
    return await leader_of(cluster, topic)


async def leader_of(cluster: LocalCluster, topic: str) -> str:
    """The leader of ``topic``'s partition 0, from the lookupd (once it has one)."""
    lookupd = f"127.0.0.1:{cluster.lookupd_http}"
    with trio.fail_after(20):
        while True:
            target = f"/lookup?topic={topic}&access=w&metainfo=true"
            reply = await http_get(lookupd, target, connect_timeout=2, request_timeout=5)
            if reply.status == 200:
                partitions = orjson.loads(reply.body).get("partitions", {})
                leader: str = partitions.get("0", {}).get("id", "")
                if leader:
                    return leader
            await trio.sleep(0.1)


async def until_acknowledged(producer: ProtocolClient, publish: Pub | Mpub) -> None:
    """Publish until acknowledged: the first ones are refused until the follower
    streams (a partition with too few in-sync replicas is not writable)."""
    with trio.fail_after(20):
        while True:
            await producer.send(publish)
            if ok(await next_frame(producer)):
                return
            await trio.sleep(0.2)


async def test_a_dpub_waits_for_its_commit_however_short_its_deferral(
    etcd: EtcdServer, cluster_id: str, tmp_path: Path
) -> None:
    cluster = LocalCluster(tmp_path, etcd, cluster_id=cluster_id)
    clients = Clients()
    try:
        cluster.start(2)
        leader = cluster.by_id(await create_and_find_leader(cluster, TOPIC))
        follower = next(b for b in cluster.brokers if b is not leader)
        address = ("127.0.0.1", leader.tcp_port)
        producer = await clients.connect(address)
        await until_acknowledged(producer, Pub(TOPIC, b"first"))
        consumer = await clients.connect(address)
        await consumer.send(Sub(TOPIC, "c"), Rdy(10))
        assert ok(await next_frame(consumer))
        assert (await next_message(consumer)).body == b"first"

        assert follower.process is not None
        follower.process.send_signal(signal.SIGSTOP)
        try:
            await producer.send(Dpub(TOPIC, 50, b"deferred"))
            # due after 50 ms, but not committed: neither delivered nor acknowledged
            assert await quiet(consumer, 1.0) == []
            assert await quiet(producer, 0.01) == []
        finally:
            follower.process.send_signal(signal.SIGCONT)
        with trio.fail_after(10):
            assert ok(await next_frame(producer))
            assert (await next_message(consumer)).body == b"deferred"
        assert bodies(await quiet(consumer, 0.3)) == []
    finally:
        await clients.close_all()
        cluster.stop()
