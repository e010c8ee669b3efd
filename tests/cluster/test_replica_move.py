"""``/topic/partition/move`` on the coordinator's lookupd, real processes: the new
replica copies the partition and joins the ISR before the old one leaves (its
leadership moves with a new epoch), nothing acknowledged is lost, a new replica that
cannot catch up is reported and the move can be asked again, and bad asks are 400s."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import orjson
import trio

from tests.cluster.test_replicated_deferrals import (
    create_and_find_leader,
    leader_of,
    until_acknowledged,
)
from tests.integration.raw import Clients, next_frame, next_message, ok
from trionsq.cluster.local_cluster import LocalCluster
from trionsq.http.client import http_get, http_request
from trionsq.protocol import Mpub, Pub, Rdy, Sub

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.cluster.etcd_process import EtcdServer
    from trionsq.http.client import HttpReply

TOPIC = "moved"


async def _post(cluster: LocalCluster, target: str) -> HttpReply:
    lookupd = f"127.0.0.1:{cluster.lookupd_http}"
    return await http_request("POST", lookupd, target, connect_timeout=2, request_timeout=30)


async def test_a_replica_moves_with_its_leadership_and_loses_nothing(
    etcd: EtcdServer, cluster_id: str, tmp_path: Path
) -> None:
    cluster = LocalCluster(tmp_path, etcd, cluster_id=cluster_id)
    clients = Clients()
    try:
        cluster.start(3)
        leader = await create_and_find_leader(cluster, TOPIC)
        ids = [b.broker_id for b in cluster.brokers]
        producer = await clients.connect(("127.0.0.1", cluster.by_id(leader).tcp_port))
        await until_acknowledged(producer, Mpub(TOPIC, tuple(b"m%d" % n for n in range(100))))
        status = orjson.loads(
            (
                await http_get(
                    f"127.0.0.1:{cluster.by_id(leader).http_port}",
                    "/stats?format=json&topic=" + TOPIC,
                    connect_timeout=2,
                    request_timeout=5,
                )
            ).body
        )
        replicas = status["topics"][0]["partitions"][0]["replication"]["replicas"]
        [idle] = [b for b in ids if b not in replicas]

        # bad asks: one clear 400 each, nothing moved
        for query, reason in (
            ("topic=moved&partition=0&to=x", b"MISSING_ARG_FROM"),
            (
                f"topic=moved&partition=0&from={idle}&to={leader}",
                b"broker " + idle.encode() + b" holds no replica",
            ),
            (
                f"topic=moved&partition=0&from={leader}&to=127.0.0.1:1",
                b"broker 127.0.0.1:1 is not live",
            ),
            (
                f"topic=moved&partition=0&from={leader}&to={replicas[1] if replicas[0] == leader else replicas[0]}",
                b"already holds a replica",
            ),
            (
                f"topic=moved&partition=7&from={leader}&to={idle}",
                b"no replicated partition moved/7",
            ),
            (f"topic=moved&partition=x&from={leader}&to={idle}", b"INVALID_ARG_PARTITION"),
        ):
            reply = await _post(cluster, f"/topic/partition/move?{query}")
            assert (reply.status, reason in reply.body) == (400, True), (query, reply.body)

        # the new replica frozen: it cannot catch up, the move says so and can be asked again
        frozen = cluster.by_id(idle)
        assert frozen.process is not None
        frozen.process.send_signal(signal.SIGSTOP)
        try:
            query = f"/topic/partition/move?topic={TOPIC}&partition=0&from={leader}&to={idle}"
            reply = await _post(cluster, query + "&timeout=1s")
            assert reply.status == 400
            assert b"did not catch up within 1s" in reply.body
        finally:
            frozen.process.send_signal(signal.SIGCONT)
        await producer.send(Pub(TOPIC, b"during"))  # the partition works meanwhile
        assert ok(await next_frame(producer))

        reply = await _post(cluster, query)
        assert reply.status == 200, reply.body
        moved = orjson.loads(reply.body)
        assert moved["leader"] != leader
        assert sorted(moved["replicas"]) == sorted(moved["isr"])
        assert leader not in moved["replicas"]
        assert idle in moved["replicas"]
        new_leader = await leader_of(cluster, TOPIC)
        assert new_leader == moved["leader"]

        # the old leader refuses now; the new one has everything acknowledged
        await producer.send(Pub(TOPIC, b"refused"))
        assert not ok(await next_frame(producer))
        address = ("127.0.0.1", cluster.by_id(new_leader).tcp_port)
        again = await clients.connect(address)
        await again.send(Pub(TOPIC, b"after"))
        assert ok(await next_frame(again))
        consumer = await clients.connect(address)
        await consumer.send(Sub(TOPIC, "c"), Rdy(200))
        assert ok(await next_frame(consumer))
        with trio.fail_after(10):
            got = [(await next_message(consumer)).body for _ in range(102)]
        assert got == [b"m%d" % n for n in range(100)] + [b"during", b"after"]
    finally:
        await clients.close_all()
        cluster.stop()
