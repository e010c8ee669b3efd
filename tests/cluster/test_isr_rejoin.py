"""A follower that catches up while etcd is down re-enters the ISR once etcd is back.

Reduced from chaos seed 103 (benchmarks/chaos.py): a follower left the ISR, caught
up while etcd was stopped, and the leader's proposal to add it back failed
(etcd unreachable); the leader kept it as "joining" and never proposed again, so the
partition stayed one replica short for good."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import orjson
import trio

from tests.cluster.failover_run import cluster_of_its_own
from tests.cluster.test_replicated_deferrals import create_and_find_leader, until_acknowledged
from tests.integration.raw import Clients, next_frame, ok
from trionsq.cluster.etcd import EtcdClient
from trionsq.cluster.keys import ClusterKeys, PartitionState, decode
from trionsq.http.client import http_get
from trionsq.protocol import Pub

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    from trionsq.cluster.local_cluster import BrokerProcess, LocalCluster
    from trionsq.testing import ProtocolClient

TOPIC = "rejoin"


async def _isr(cluster: LocalCluster) -> tuple[str, ...]:
    key = ClusterKeys(cluster.cluster_id).partition(TOPIC, 0)
    async with EtcdClient(tuple(cluster.etcd.endpoints)) as client:
        found = await client.get(key)
    assert found is not None
    return tuple(sorted(decode(found.value, PartitionState).isr))


async def _follower_lag(cluster: LocalCluster, leader: str) -> int | None:
    """The follower's lag as the leader counts it (None: not acknowledged yet)."""
    reply = await http_get(
        f"127.0.0.1:{cluster.by_id(leader).http_port}",
        f"/stats?format=json&topic={TOPIC}",
        connect_timeout=2,
        request_timeout=5,
    )
    [follower] = orjson.loads(reply.body)["topics"][0]["partitions"][0]["replication"]["followers"]
    lag: int = follower["lag_count"]
    return lag if follower["acked_count"] > 0 else None


async def _until(check: Callable[[], Awaitable[bool]], within: float) -> bool:
    """Whether ``check()`` came true within ``within`` seconds (etcd and /stats are
    read again every 0.1 s: no event tells a test process when they change)."""
    with trio.move_on_after(within):
        while True:
            if await check():
                return True
            await trio.sleep(0.1)
    return False


async def _caught_up_while_etcd_was_down(
    cluster: LocalCluster, producer_of: Clients
) -> tuple[str, BrokerProcess, ProtocolClient]:
    """Leader, follower and a producer to the leader, once the follower left the ISR
    (frozen), then caught up while etcd was stopped (the leader's proposal to add it
    back failed); etcd is still stopped."""
    leader = await create_and_find_leader(cluster, TOPIC)
    [follower] = [b for b in cluster.brokers if b.broker_id != leader]
    assert follower.process is not None
    producer = await producer_of.connect(("127.0.0.1", cluster.by_id(leader).tcp_port))
    await until_acknowledged(producer, Pub(TOPIC, b"first"))

    # the follower frozen: the publish waits until it leaves the ISR
    follower.process.send_signal(signal.SIGSTOP)
    await producer.send(Pub(TOPIC, b"while frozen"))
    with trio.fail_after(15):
        assert ok(await next_frame(producer))

    async def follower_out() -> bool:
        return await _isr(cluster) == (leader,)

    assert await _until(follower_out, 10), await _isr(cluster)

    # etcd down; the follower thaws and catches up: the leader cannot tell etcd
    await trio.to_thread.run_sync(cluster.etcd.stop)
    follower.process.send_signal(signal.SIGCONT)

    async def caught_up() -> bool:
        return await _follower_lag(cluster, leader) == 0

    assert await _until(caught_up, 10), "the follower did not catch up"
    await trio.sleep(1.0)  # the leader's ISR upkeep tries (and fails) meanwhile
    return leader, follower, producer


async def test_a_follower_caught_up_while_etcd_was_down_rejoins_the_isr(tmp_path: Path) -> None:
    clients = Clients()
    with cluster_of_its_own(tmp_path, "rejoin", 2) as cluster:  # this test stops its etcd
        try:
            leader, follower, _ = await _caught_up_while_etcd_was_down(cluster, clients)
            await trio.to_thread.run_sync(cluster.etcd.start)
            whole = tuple(sorted((leader, follower.broker_id)))

            async def rejoined() -> bool:
                return await _isr(cluster) == whole

            assert await _until(rejoined, 10), "the caught-up follower never rejoined the ISR"
        finally:
            await clients.close_all()


async def test_a_joiner_etcd_never_took_that_dies_does_not_hold_commits(tmp_path: Path) -> None:
    """The leader counts a follower it proposed to join from the proposal on; if etcd
    never took the proposal and the follower then dies, it must stop counting it (it
    held every later publish unacknowledged for good)."""
    clients = Clients()
    with cluster_of_its_own(tmp_path, "deadjoiner", 2) as cluster:  # this test stops its etcd
        try:
            leader, follower, producer = await _caught_up_while_etcd_was_down(cluster, clients)
            follower.kill()
            await trio.to_thread.run_sync(cluster.etcd.start)
            # refused (not writable) until the broker has its lease again, then acknowledged
            await until_acknowledged(producer, Pub(TOPIC, b"after the joiner died"))
            assert await _isr(cluster) == (leader,)
        finally:
            await clients.close_all()
