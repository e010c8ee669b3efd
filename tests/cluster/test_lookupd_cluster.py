"""Lookupds over etcd: one coordinates, /topic/create?replicator=N places replicas,
and /lookup answers Youzan's shape (leaders, ``meta.replica``) that Youzan's Go client
relies on; the other lookupd refuses creation with E_FAILED_ON_NOT_LEADER."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

import httpx
import orjson
import trio

from tests.integration.test_lookupd_youzan import PEER_KEYS
from trionsq import NsqdConfig, serve_nsqd
from trionsq.client.producer import open_producer
from trionsq.cluster.replica_manager import ReplicaManager
from trionsq.cluster.roles import LeaderRole
from trionsq.lookupd.config import LookupdConfig
from trionsq.lookupd.server import serve_lookupd
from trionsq.protocol.commands import ExtMessage
from trionsq.testing import wait_until

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.cluster.etcd_process import EtcdServer
    from trionsq.lookupd.server import LookupdAddresses
    from trionsq.nursery_tree import BoundAddresses


class _Cluster(TypedDict):
    """The options every process of the cluster shares (lookupds and brokers)."""

    etcd_endpoints: tuple[str, ...]
    cluster_id: str
    cluster_lease_ttl: float


def _cluster(etcd: EtcdServer, cluster_id: str) -> _Cluster:
    """The cluster options every lookupd and broker of a test shares."""
    return {
        "etcd_endpoints": (",".join(etcd.endpoints),),
        "cluster_id": cluster_id,
        "cluster_lease_ttl": 1.0,
    }


def _url(lookupd: LookupdAddresses, path: str) -> str:
    return f"http://127.0.0.1:{lookupd.http[1]}{path}"


def _youzan_shape(
    found: dict[str, object], brokers: list[BoundAddresses]
) -> dict[str, dict[str, object]]:
    """What Youzan's go-nsq reads of ``/lookup?access=w&metainfo=true``: ``meta`` with
    ``replica``, each partition's leader in nsqlookupd's peer shape, the producers;
    returns the partitions."""
    assert found["meta"] == {
        "partition_num": 4,
        "replica": 3,
        "extend_support": False,
        "ordered": False,
        "multi_part": False,
        "disable_channel_auto_create": False,
    }
    partitions = found["partitions"]
    assert isinstance(partitions, dict)
    ports = {b.tcp[1] for b in brokers}
    leaders = [partitions[str(n)]["tcp_port"] for n in range(4)]
    assert set(leaders) <= ports
    assert len(set(leaders)) == 3  # 4 partitions led by all 3 brokers
    entry = partitions["0"]
    assert list(entry) == PEER_KEYS  # Youzan's PeerY, as a single lookupd lists it
    producers = found["producers"]
    assert isinstance(producers, list)
    assert len(producers) == 3
    return partitions


async def test_create_and_lookup_through_the_coordinator(
    etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    cluster = _cluster(etcd, cluster_id)
    first: LookupdAddresses = await nursery.start(serve_lookupd, LookupdConfig.loopback(**cluster))
    brokers: list[BoundAddresses] = []
    for name in ("a", "b", "c"):
        config = NsqdConfig.loopback(
            data_path=str(tmp_path / name), broadcast_address="127.0.0.1", **cluster
        )
        brokers.append(await nursery.start(serve_nsqd, config))
    second: LookupdAddresses = await nursery.start(
        serve_lookupd, LookupdConfig.loopback(**cluster, min_isr=2)
    )
    async with httpx.AsyncClient() as http:

        async def create(lookupd: LookupdAddresses, query: str) -> httpx.Response:
            return await http.post(_url(lookupd, f"/topic/create?{query}"))

        # the first lookupd campaigned first: it coordinates
        refused = await create(second, "topic=t&partition_num=4&replicator=3")
        assert (refused.status_code, refused.json()["message"]) == (400, "E_FAILED_ON_NOT_LEADER")
        bad = await create(first, "topic=t&partition_num=4&replicator=3&min_isr=4")
        assert (bad.status_code, bad.json()["message"]) == (400, "INVALID_ARG_MIN_ISR")
        too_many = await create(first, "topic=t&partition_num=4&replicator=4")
        assert too_many.status_code == 400
        assert "4 replicas need 4 live brokers" in too_many.json()["message"]
        created = await create(first, "topic=t&partition_num=4&replicator=3&min_isr=2")
        assert created.status_code == 200, created.text

        async def lookup(lookupd: LookupdAddresses, query: str) -> dict[str, object]:
            reply = await http.get(_url(lookupd, f"/lookup?topic=t&{query}"))
            assert reply.status_code == 200, reply.text
            data: dict[str, object] = reply.json()
            return data

        found: dict[str, object] = {}

        async def refresh() -> None:
            found.update(await lookup(second, "access=w&metainfo=true"))

        for _ in range(200):  # the second lookupd learns the topic through its watch
            await refresh()
            partitions = found.get("partitions")
            if isinstance(partitions, dict) and len(partitions) == 4:
                break
            await trio.sleep(0.02)
        partitions = _youzan_shape(found, brokers)
        readers = await lookup(first, "access=r")
        assert readers["partitions"] == partitions
        assert "meta" not in readers
        one = await lookup(first, "access=r&partition=2")
        assert list(one["partitions"]) == ["2"]  # type: ignore[call-overload]
        # every broker holds its partitions (roles settled): a publish to a leader works
        leader_port = partitions["1"]["tcp_port"]
        leader = next(b for b in brokers if b.tcp[1] == leader_port)
        await wait_until(
            lambda: ("t", 1) in getattr(leader.broker.replication, "roles", {}), "roles settled"
        )
        assert leader.http is not None
        reply = await http.post(
            f"http://127.0.0.1:{leader.http[1]}/pub?topic=t&partition=1", content=b"hello"
        )
        assert reply.text == "OK"
        follower = next(b for b in brokers if b.tcp[1] != leader_port)
        assert follower.http is not None
        reply = await http.post(
            f"http://127.0.0.1:{follower.http[1]}/pub?topic=t&partition=1", content=b"no"
        )
        assert (reply.status_code, reply.json()["message"]) == (400, "E_FAILED_ON_NOT_LEADER")
    nursery.cancel_scope.cancel()


async def test_the_client_publishes_through_a_leader_change(
    etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    cluster = _cluster(etcd, cluster_id)
    lookupd: LookupdAddresses = await nursery.start(
        serve_lookupd, LookupdConfig.loopback(**cluster)
    )
    scopes: dict[int, trio.CancelScope] = {}
    brokers: dict[int, BoundAddresses] = {}
    for name in ("a", "b"):
        config = NsqdConfig.loopback(
            data_path=str(tmp_path / name), broadcast_address="127.0.0.1", **cluster
        )
        scope = trio.CancelScope()

        async def run(
            task_status: trio.TaskStatus[BoundAddresses],
            config: NsqdConfig = config,
            scope: trio.CancelScope = scope,
        ) -> None:
            with scope:
                await serve_nsqd(config, task_status=task_status)

        started: BoundAddresses = await nursery.start(run)
        scopes[started.tcp[1]] = scope
        brokers[started.tcp[1]] = started
    lookupd_http = f"127.0.0.1:{lookupd.http[1]}"
    async with httpx.AsyncClient() as http:
        for _ in range(100):
            reply = await http.post(
                f"http://{lookupd_http}/topic/create?topic=e&partition_num=1&replicator=2&extend=true"
            )
            if reply.status_code == 200:
                break
            await trio.sleep(0.05)
        assert reply.status_code == 200, reply.text
    async with open_producer(lookupd=lookupd_http) as producer:
        for number in range(60):
            if number == 30:  # the leader goes: the next publishes wait for the new one
                leader = next(b for b in brokers.values() if _leads(b, "e"))
                scopes[leader.tcp[1]].cancel()
                survivor = next(b for b in brokers.values() if b is not leader)
            header = orjson.dumps({"##idempotency_key": f"k{number}"})
            await producer.publish_ext("e", ExtMessage(header, b"%d" % number), partition=0)
    partition = survivor.broker.topics["e"].partitions[0]
    bodies = [r.body for r in partition.log.read(1, 100)]
    assert bodies == [b"%d" % n for n in range(60)]  # each once, in order
    nursery.cancel_scope.cancel()


def _leads(broker: BoundAddresses, topic: str) -> bool:
    manager = broker.broker.replication
    return isinstance(manager, ReplicaManager) and isinstance(
        manager.roles.get((topic, 0)), LeaderRole
    )


async def test_a_topic_of_more_partitions_than_an_etcd_transaction_takes(
    etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    """etcd takes at most 128 operations a transaction (its default --max-txn-ops):
    Youzan's 255 partitions are still created, all or (to a retry) nothing visible."""
    # a 5 s lease: 255 partitions starting in this test's one process keep the
    # loop busy for longer than the other tests' 1 s lease on a loaded machine
    cluster: _Cluster = {**_cluster(etcd, cluster_id), "cluster_lease_ttl": 5.0}
    lookupd: LookupdAddresses = await nursery.start(
        serve_lookupd, LookupdConfig.loopback(**cluster)
    )
    config = NsqdConfig.loopback(
        data_path=str(tmp_path / "a"), broadcast_address="127.0.0.1", **cluster
    )
    await nursery.start(serve_nsqd, config)
    async with httpx.AsyncClient(timeout=30) as http:
        for _ in range(100):  # until the lookupd is elected coordinator and sees the broker
            created = await http.post(
                _url(lookupd, "/topic/create?topic=wide&partition_num=255&replicator=1")
            )
            if not any(why in created.content for why in (b"live brokers", b"NOT_LEADER")):
                break
            await trio.sleep(0.05)
        assert created.status_code == 200, created.text
        again = await http.post(
            _url(lookupd, "/topic/create?topic=wide&partition_num=255&replicator=1")
        )
        assert again.status_code == 200, again.text
        found = await http.get(_url(lookupd, "/lookup?topic=wide&access=w&metainfo=true"))
    assert found.status_code == 200, found.text
    document = found.json()
    assert document["meta"]["partition_num"] == 255
    assert sorted(map(int, document["partitions"])) == list(range(255))
