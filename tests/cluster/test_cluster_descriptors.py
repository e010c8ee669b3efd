"""Issue 35 (with issue 30's descriptor budget): a cluster broker's own sockets count in
its open-file limit. Two real brokers under RLIMIT_NOFILE 512 replicate 140 partitions
(each broker holds 140 replication connections: one to the leader of each partition
it follows, one from the follower of each it leads), then clients take every
connection the brokers admit. Replication, etcd and /ping must go on: every publish
to a partition's leader is acknowledged by both replicas, no follower leaves an ISR,
nothing runs out of descriptors (no EMFILE in the logs, no stuck ``accept``).

Before replication connections counted, clients were admitted into descriptors the
replication connections already held, and the brokers ran out (accept stalled with
EMFILE).
"""

from __future__ import annotations

import json
import resource
import urllib.error
import urllib.request
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import orjson
import trio

from tests.cluster.failover_run import TOPIC, Lookup, _until_led, create_topic
from tests.e2e.test_descriptor_budget import served
from trionsq.cluster.local_cluster import LocalCluster
from trionsq.protocol import PubExt
from trionsq.protocol.client import Response
from trionsq.protocol.commands import ExtMessage
from trionsq.testing import ProtocolClient, wait_until

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from trionsq.cluster.etcd_process import EtcdServer
    from trionsq.cluster.local_cluster import BrokerProcess

LIMIT = 512
PARTITIONS = 140
"""Replication connections per broker (2 brokers, 2 replicas): more than the share of
the reserve the worker threads' moments leave unused, so they cannot hide in it."""


def _stats(broker: BrokerProcess) -> dict[str, object]:
    url = f"http://127.0.0.1:{broker.http_port}/stats?format=json"
    with urllib.request.urlopen(url, timeout=5) as reply:
        stats: dict[str, object] = json.load(reply)
    return stats


def _replication(broker: BrokerProcess) -> dict[int, dict[str, object]]:
    """Each partition of the topic this broker holds: its /stats replication section."""
    topics = _stats(broker)["topics"]
    assert isinstance(topics, list)
    for topic in topics:
        if topic["topic_name"] == TOPIC:
            return {p["partition"]: p["replication"] for p in topic["partitions"]}
    return {}


def _isr_size(state: dict[int, dict[str, object]], partition: int) -> int:
    isr = state.get(partition, {}).get("isr", [])
    assert isinstance(isr, list)
    return len(isr)


def _fully_in_sync(cluster: LocalCluster) -> bool:
    """Both replicas in the ISR of every partition, as both brokers see it."""
    states = [_replication(broker) for broker in cluster.brokers]
    return all(_isr_size(state, p) == 2 for state in states for p in range(PARTITIONS))


def _all_committed(cluster: LocalCluster) -> bool:
    """Every partition's one message committed on both replicas."""
    states = [_replication(broker) for broker in cluster.brokers]
    return all(state[p].get("commit_count") == 1 for state in states for p in range(PARTITIONS))


def _ping(broker: BrokerProcess) -> bytes:
    """/ping's body, ``OK`` (200) or ``NOK - ...`` (500, as nsqd's)."""
    url = f"http://127.0.0.1:{broker.http_port}/ping"
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            answer: bytes = reply.read()
    except urllib.error.HTTPError as error:
        code = error.code
        answer = error.read()
        assert code == 500, (code, answer)
    return answer


async def _fill(broker: BrokerProcess, idle: list[ProtocolClient]) -> int:
    """Client connections to ``broker`` until it refuses one (each served first), kept
    in ``idle`` (closed by the caller, failure or not); how many it admitted."""
    for count in range(LIMIT):
        client = await ProtocolClient.connect(("127.0.0.1", broker.tcp_port))
        idle.append(client)
        if not await served(client):
            await trio.aclose_forcefully(idle.pop().stream)
            return count
    raise AssertionError(f"{broker.name} admitted {LIMIT} clients under a limit of {LIMIT}")


def _room_for_client_ends() -> None:
    """This process holds the clients' ends: more than the brokers' limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4 * LIMIT:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8 * LIMIT), hard))


@asynccontextmanager
async def _limited_cluster(
    etcd: EtcdServer, cluster_id: str, tmp_path: Path
) -> AsyncIterator[tuple[LocalCluster, list[ProtocolClient]]]:
    """Two brokers under :data:`LIMIT`, and a list for the test's clients: closed at
    the end, failure or not; then neither broker may have run out of descriptors."""
    _room_for_client_ends()
    cluster = LocalCluster(tmp_path, etcd, cluster_id=cluster_id, open_file_limit=LIMIT)
    clients: list[ProtocolClient] = []
    try:
        cluster.start(2)
        yield cluster, clients
    finally:
        for client in clients:
            await trio.aclose_forcefully(client.stream)
        cluster.stop()
    _ran_out_nowhere(cluster)


async def _connect_producers(
    cluster: LocalCluster, clients: list[ProtocolClient]
) -> dict[str, ProtocolClient]:
    """One producer connection per broker, by broker id (kept in ``clients`` too)."""
    producers: dict[str, ProtocolClient] = {}
    for broker in cluster.brokers:
        producer = await ProtocolClient.connect(("127.0.0.1", broker.tcp_port))
        clients.append(producer)
        producers[broker.broker_id] = producer
    return producers


async def _publish_one_per_partition(
    cluster: LocalCluster, lookup: Lookup, producers: dict[str, ProtocolClient]
) -> None:
    """One PUB_EXT per partition on its leader, each acknowledged, then committed on
    both replicas (the follower learns the commit a moment after the leader)."""
    leaders = {p: lookup.leaders[p][2] for p in range(PARTITIONS)}
    for partition, leader in leaders.items():
        body = f"m{partition}".encode()
        header = orjson.dumps({"##idempotency_key": body.decode()})
        await producers[leader].send(PubExt(TOPIC, ExtMessage(header, body), partition=partition))
    with trio.fail_after(15):
        for leader in producers:
            count = sum(1 for p in leaders.values() if p == leader)
            frames = await producers[leader].read(count)
            assert frames == [Response(b"OK")] * count, frames
    await wait_until(lambda: _all_committed(cluster), "committed on both", within=10)
    assert _fully_in_sync(cluster)


def _log(broker: BrokerProcess) -> bytes:
    return (broker.directory / "broker.log").read_bytes()


def _ran_out_nowhere(cluster: LocalCluster) -> None:
    for broker in cluster.brokers:
        log = _log(broker)
        assert b"Too many open files" not in log
        assert b"EMFILE" not in log


def _replication_connections(broker: BrokerProcess) -> int:
    budget = _stats(broker)["descriptors"]
    assert isinstance(budget, dict)
    held: int = budget["replication_connections"]
    return held


async def test_replication_and_etcd_keep_their_descriptors_when_clients_take_the_rest(
    etcd: EtcdServer, cluster_id: str, tmp_path: Path
) -> None:
    async with _limited_cluster(etcd, cluster_id, tmp_path) as (cluster, clients):
        await create_topic(cluster.lookupd_http, PARTITIONS, 2)
        lookup = Lookup(cluster.lookupd_http)
        await _until_led(lookup, PARTITIONS)
        await wait_until(lambda: _fully_in_sync(cluster), "both replicas in every ISR", within=20)
        producers = await _connect_producers(cluster, clients)
        for broker in cluster.brokers:
            admitted = await _fill(broker, clients)
            budget = _stats(broker)["descriptors"]
            assert isinstance(budget, dict)
            # every replication connection held within the budget, clients the rest
            assert budget["replication_connections"] == PARTITIONS, budget
            assert budget["replication_claimed"] == PARTITIONS, budget
            assert admitted > LIMIT // 3, budget
        for broker in cluster.brokers:
            assert _ping(broker) == b"OK"
        await _publish_one_per_partition(cluster, lookup, producers)
        for broker in cluster.brokers:
            assert _ping(broker) == b"OK"
            assert broker.process is not None
            assert broker.process.poll() is None


async def test_replication_without_room_waits_said_in_the_log_and_connects_once_clients_leave(
    etcd: EtcdServer, cluster_id: str, tmp_path: Path
) -> None:
    """The replicated topic comes after clients took every connection of one broker:
    its replication connections are not opened there, neither the ones it follows
    (no socket opened) nor the ones its followers open (the leader REFUSEs them),
    no EMFILE for anything else; both brokers say so, keep answering /ping and etcd,
    and try again; once the clients leave, the followers connect, catch up, and
    publishes are replicated."""
    async with _limited_cluster(etcd, cluster_id, tmp_path) as (cluster, clients):
        producers = await _connect_producers(cluster, clients)
        full, other = cluster.brokers
        await _fill(full, clients)
        await create_topic(cluster.lookupd_http, PARTITIONS, 2)
        lookup = Lookup(cluster.lookupd_http)
        await _until_led(lookup, PARTITIONS)
        await wait_until(
            lambda: (
                b"not held, retried" in _log(full)  # once a minute, both ends counted
                and b"waits: the leader's descriptor budget is full" in _log(other)
            ),
            "the brokers saying their replication connections wait for room",
            within=10,
        )
        assert _replication_connections(full) == 0
        waiting = _ping(full)  # answered (HTTP keeps its share), and says why it lags
        assert waiting.startswith(b"NOK - descriptor budget full: "), waiting
        assert b"replication connection(s) wait for room" in waiting, waiting
        assert _ping(other) == b"OK"  # its own budget has room: the leader's lacks it
        for client in clients[len(producers) :]:  # the idle clients leave
            await trio.aclose_forcefully(client.stream)
        await wait_until(
            lambda: all(_replication_connections(b) == PARTITIONS for b in cluster.brokers),
            "every replication connection held",
            within=15,
        )
        await wait_until(lambda: _ping(full) == b"OK", "/ping OK again", within=10)
        await wait_until(lambda: _fully_in_sync(cluster), "both replicas in every ISR", within=20)
        await _publish_one_per_partition(cluster, lookup, producers)
