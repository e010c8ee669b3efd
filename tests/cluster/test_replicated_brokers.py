"""Three brokers replicating through a real etcd: acknowledged once on every in-sync
replica, Youzan's errors off the leader, consumers read committed records, and a
leader's loss moves the partition to a follower holding everything acknowledged."""

from __future__ import annotations

import math
import shutil
import signal
from typing import TYPE_CHECKING, NamedTuple

import httpx
import orjson
import trio

from tests.integration.raw import Clients, next_error, next_frame, next_message, ok, quiet
from tests.integration.test_admin_snapshots import continuation_payload
from trionsq import NsqdConfig, serve_nsqd
from trionsq.broker.events import Watcher
from trionsq.cluster.coordinator import Coordinator
from trionsq.cluster.etcd import EtcdClient
from trionsq.cluster.etcd_process import free_port
from trionsq.cluster.keys import ClusterKeys, CoordinatorInfo, TopicMeta
from trionsq.cluster.replica_manager import ReplicaManager
from trionsq.cluster.roles import FollowerRole, LeaderRole
from trionsq.protocol import Fin, Mpub, Pub, Rdy, Sub
from trionsq.queues.cursor import ChannelCursor
from trionsq.server.admin_snapshots import Snapshot, SnapshotHub
from trionsq.testing import wait_until

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from trionsq.cluster.etcd_process import EtcdServer
    from trionsq.nursery_tree import BoundAddresses
    from trionsq.protocol.message import Message
    from trionsq.testing import ProtocolClient

TTL = 1.0


class Cluster:
    """A coordinator and brokers in this Trio run, each broker in its own scope."""

    def __init__(self, etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp: Path) -> None:
        self.etcd = etcd
        self.cluster_id = cluster_id
        self.nursery = nursery
        self.tmp = tmp
        self.coordinator = Coordinator(
            EtcdClient(etcd.endpoints), ClusterKeys(cluster_id), CoordinatorInfo("l1", "-"), TTL
        )
        self.brokers: dict[str, tuple[BoundAddresses, trio.CancelScope]] = {}

    async def start(self) -> None:
        await self.nursery.start(self.coordinator.run)

    async def add_broker(self, name: str, tcp_port: int = 0) -> BoundAddresses:
        config = NsqdConfig.loopback(
            tcp_address=f"127.0.0.1:{tcp_port}",
            data_path=str(self.tmp / name),
            etcd_endpoints=tuple(self.etcd.endpoints),
            cluster_id=self.cluster_id,
            cluster_lease_ttl=TTL,
            replica_lag_time=2.0,
            broadcast_address="127.0.0.1",
        )
        scope = trio.CancelScope()

        async def run(task_status: trio.TaskStatus[BoundAddresses]) -> None:
            with scope:
                await serve_nsqd(config, task_status=task_status)

        addresses: BoundAddresses = await self.nursery.start(run)
        self.brokers[f"127.0.0.1:{addresses.tcp[1]}"] = (addresses, scope)
        return addresses

    async def with_topic(
        self, topic: str, meta: TopicMeta, brokers: dict[str, int] | tuple[str, ...]
    ) -> None:
        """Start the coordinator and ``brokers`` (names, or names to TCP ports), then
        create ``topic`` and wait until every replica has its role."""
        await self.start()
        ports = brokers if isinstance(brokers, dict) else dict.fromkeys(brokers, 0)
        for name, port in ports.items():
            await self.add_broker(name, port)
        await self.until(
            lambda: self.coordinator.leading and len(self.coordinator.view.brokers) == len(ports)
        )
        await self.coordinator.create_topic(topic, meta)
        await self.until(lambda: self.settled(topic, meta.partitions))

    def stop(self) -> None:
        """Stop every broker still running (the coordinator ends with the nursery)."""
        for _, scope in self.brokers.values():
            scope.cancel()

    def manager(self, broker_id: str) -> ReplicaManager:
        hook = self.brokers[broker_id][0].broker.replication
        assert isinstance(hook, ReplicaManager)
        return hook

    async def until(self, condition: Callable[[], bool], within: float = 15) -> float:
        """Wait (polling: the brokers' views change in their own tasks); the seconds."""
        start = trio.current_time()
        await wait_until(condition, "the cluster settled", within=within)
        return trio.current_time() - start

    def leader_of(self, topic: str, partition: int) -> str:
        return self.coordinator.view.partitions[topic, partition].leader

    def settled(self, topic: str, partitions: int) -> bool:
        """Every replica of every partition has its role, and every follower streams."""
        for index in range(partitions):
            state = self.coordinator.view.partitions.get((topic, index))
            if state is None or not state.leader:
                return False
            for broker_id in state.replicas:
                if broker_id not in self.brokers:
                    continue
                role = self.manager(broker_id).roles.get((topic, index))
                if role is None or role.epoch != state.epoch:
                    return False
                if isinstance(role, FollowerRole) and not role.connected:
                    return False
        return True


async def test_replicated_publish_failover_and_youzan_errors(
    etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    cluster = Cluster(etcd, cluster_id, nursery, tmp_path)
    await cluster.with_topic("t", TopicMeta(2, 3, min_isr=2), ("a", "b", "c"))
    clients = Clients()
    leader = cluster.leader_of("t", 0)
    followers = [b for b in cluster.brokers if b != leader]
    producer = await clients.connect(cluster.brokers[leader][0].tcp)
    for number in range(20):
        await producer.send(Pub("t", b"m%d" % number, partition=0))
    for _ in range(20):
        assert ok(await next_frame(producer))
    # acknowledged: on every in-sync replica, byte for byte (a copy is read from its
    # files: a follower keeps no Records of what it copied)
    leader_log = cluster.brokers[leader][0].broker.topics["t"].partitions[0].log
    for follower in followers:
        follower_log = cluster.brokers[follower][0].broker.topics["t"].partitions[0].log
        assert [r.body for r in follower_log.read_cold(1, 100)] == [
            r.body for r in leader_log.read(1, 100)
        ]
    role = cluster.manager(leader).roles["t", 0]
    assert isinstance(role, LeaderRole)
    assert role.progress.committed == 21

    # a follower refuses publishes (non-fatal) and consumers (fatal), as Youzan's nsqd
    elsewhere = await clients.connect(cluster.brokers[followers[0]][0].tcp)
    await elsewhere.send(Pub("t", b"x", partition=0))
    assert (await next_error(elsewhere)).code == "E_FAILED_ON_NOT_LEADER"
    await elsewhere.send(Pub("t", b"y", partition=0))
    assert (await next_error(elsewhere)).code == "E_FAILED_ON_NOT_LEADER"  # still open
    reader = await clients.connect(cluster.brokers[followers[0]][0].tcp)
    await reader.send(Sub("t", "c", partition=0))
    assert (await next_error(reader)).code == "E_FAILED_ON_NOT_LEADER"
    with trio.fail_after(5):
        assert await reader.stream.receive_some(100) == b""  # fatal for SUB: closed

    # the leader goes (an orderly stop revokes its lease): a follower takes over
    cluster.brokers[leader][1].cancel()
    del cluster.brokers[leader]
    taken = await cluster.until(lambda: cluster.leader_of("t", 0) not in ("", leader))
    assert taken < 5
    new_leader = cluster.leader_of("t", 0)
    await cluster.until(
        lambda: isinstance(cluster.manager(new_leader).roles.get(("t", 0)), LeaderRole)
    )
    again = await clients.connect(cluster.brokers[new_leader][0].tcp)
    await again.send(Pub("t", b"after", partition=0))
    assert ok(await next_frame(again))  # two in-sync replicas remain: min_isr=2 holds
    consumer = await clients.connect(cluster.brokers[new_leader][0].tcp)
    await consumer.send(Sub("t", "c", partition=0), Rdy(100))
    assert ok(await next_frame(consumer))
    got = [(await next_message(consumer)).body for _ in range(21)]
    assert got == [b"m%d" % n for n in range(20)] + [b"after"]
    await clients.close_all()
    cluster.stop()


def partition_replication(snapshot: Snapshot) -> dict[str, object]:
    """The replication of topic ``s``'s one partition in an admin stream snapshot."""
    body = orjson.loads(snapshot.head(0) + continuation_payload(snapshot.tail))
    [topic] = [topic for topic in body["topics"] if topic["topic_name"] == "s"]
    replication: dict[str, object] = topic["partitions"][0]["replication"]
    return replication


async def test_stats_metrics_ping_and_admin_events(
    etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    cluster = Cluster(etcd, cluster_id, nursery, tmp_path)
    await cluster.with_topic("s", TopicMeta(1, 2), ("a", "b"))
    leader = cluster.leader_of("s", 0)
    follower = next(b for b in cluster.brokers if b != leader)
    events = Watcher(lambda: None, groups=["partition"])
    cluster.brokers[follower][0].broker.events.add(events)
    clients = Clients()
    producer = await clients.connect(cluster.brokers[leader][0].tcp)
    await producer.send(Pub("s", b"one", partition=0), Pub("s", b"two", partition=0))
    assert ok(await next_frame(producer))
    assert ok(await next_frame(producer))
    async with httpx.AsyncClient() as http:

        async def stats(broker_id: str) -> dict[str, object]:
            http_address = cluster.brokers[broker_id][0].http
            assert http_address is not None
            reply = await http.get(f"http://127.0.0.1:{http_address[1]}/stats?format=json&topic=s")
            [topic] = reply.json()["topics"]
            [partition] = topic["partitions"]
            replication: dict[str, object] = partition["replication"]
            return replication

        led = await stats(leader)
        assert led["role"] == "leader"
        assert led["leader"] == leader
        assert led["isr"] == [leader, follower] or led["isr"] == [follower, leader]
        assert led["commit_count"] == 2
        assert led["followers"] == [
            {"id": follower, "in_sync": True, "acked_count": 2, "lag_count": 0}
        ]
        # the follower learns the commit end from the next RECORDS frame, or a COMMIT
        # within COMMIT_DELAY: the publisher's OK may come first
        role = cluster.manager(follower).roles["s", 0]
        await cluster.until(lambda: role.files.committed == 3)
        followed = await stats(follower)
        assert (followed["role"], followed["connected"], followed["commit_count"]) == (
            "follower",
            True,
            2,
        )
        http_address = cluster.brokers[leader][0].http
        assert http_address is not None
        metrics = (await http.get(f"http://127.0.0.1:{http_address[1]}/metrics")).text
        assert 'nsq_partition_isr_size{partition="0",topic="s"} 2.0' in metrics
        assert 'nsq_partition_leader{partition="0",topic="s"} 1.0' in metrics
        assert (
            f'nsq_partition_follower_lag_messages{{follower="{follower}",partition="0",topic="s"}} 0.0'
            in metrics
        )
        assert (await http.get(f"http://127.0.0.1:{http_address[1]}/ping")).text == "OK"
    # the follower's admin snapshots: the idle topic's part is kept while nothing moves
    hub = SnapshotHub(cluster.brokers[follower][0].broker, started_at=0)
    hub.join(key := (100, None))
    before = await hub.snapshot(key, sent=-math.inf, fresh_after=0)
    kept = await hub.snapshot(key, sent=before.built_at, fresh_after=0)
    assert partition_replication(kept)["role"] == "follower"
    # the leader stops: the follower leads, and its admin stream says so
    cluster.brokers[leader][1].cancel()
    del cluster.brokers[leader]
    await cluster.until(lambda: cluster.leader_of("s", 0) == follower)
    # led there, not merely changed: the follower first notices its stream broke
    # ("connected" false) and only then takes the leadership etcd gives it
    await cluster.until(
        lambda: (cluster.manager(follower).partition_status("s", 0) or {}).get("role") == "leader"
    )
    after = await hub.snapshot(key, sent=kept.built_at, fresh_after=0)
    assert partition_replication(after) == cluster.manager(follower).partition_status("s", 0)
    assert partition_replication(after)["role"] == "leader"
    await cluster.until(lambda: any(e["type"] == "leader_changed" for e in events.queue))
    seen = events.take()
    changed = next(e for e in seen if e["type"] == "leader_changed")
    assert (changed["topic"], changed["partition"], changed["leader"], changed["previous"]) == (
        "s",
        0,
        follower,
        leader,
    )
    assert any(e["type"] == "replica_left_isr" and e["replica"] == leader for e in seen)
    await clients.close_all()
    cluster.stop()


async def test_a_wiped_follower_catches_up_and_rejoins_the_isr(
    etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    cluster = Cluster(etcd, cluster_id, nursery, tmp_path)
    ports = {name: free_port() for name in ("a", "b")}
    await cluster.with_topic("w", TopicMeta(1, 2), ports)
    leader = cluster.leader_of("w", 0)
    follower = next(b for b in cluster.brokers if b != leader)
    clients = Clients()
    producer = await clients.connect(cluster.brokers[leader][0].tcp)
    body = b"x" * 1000
    for _ in range(20):  # 4 MB
        await producer.send(Mpub("w", (body,) * 200, partition=0))
    for _ in range(20):
        assert ok(await next_frame(producer))
    leader_log = cluster.brokers[leader][0].broker.topics["w"].partitions[0].log
    # the follower stops, loses its disk, and comes back under the same identity
    cluster.brokers[follower][1].cancel()
    del cluster.brokers[follower]
    await cluster.until(lambda: cluster.coordinator.view.partitions["w", 0].isr == (leader,))
    name = next(n for n, p in ports.items() if f"127.0.0.1:{p}" == follower)
    shutil.rmtree(tmp_path / name)
    started = trio.current_time()
    await cluster.add_broker(name, ports[name])
    await cluster.until(lambda: follower in cluster.coordinator.view.partitions["w", 0].isr)
    seconds = trio.current_time() - started
    copied = cluster.brokers[follower][0].broker.topics["w"].partitions[0].log
    assert copied.next_id == leader_log.next_id == 4001
    assert [r.body for r in copied.read_cold(3990, 5)] == [body] * 5
    megabytes = leader_log.next_offset / 1e6
    print(f"catch-up: {megabytes:.1f} MB in {seconds:.2f} s")  # noqa: T201 - pytest -s shows it
    await clients.close_all()
    cluster.stop()


async def test_a_channel_resumes_on_the_new_leader_redelivering_only_what_was_in_flight(
    etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    cluster, clients, leader, follower, consumer, messages = await two_brokers_ten_in_flight(
        etcd, cluster_id, nursery, tmp_path
    )
    finished = [m for m in messages if int(m.body[1:]) % 3 != 2]  # 7 finished, 3 in flight
    await consumer.send(*(Fin(m.id) for m in finished))
    follower_broker = cluster.brokers[follower][0].broker

    def shipped() -> bool:
        channel = follower_broker.topics["q"].partitions[0].channels.get("c")
        if channel is None or not isinstance(channel.cursor, ChannelCursor):
            return False
        cursor = channel.cursor
        return all(cursor.is_finished(int.from_bytes(m.id[:8], "big")) for m in finished)

    await cluster.until(shipped)
    await leader_killed_then_only_in_flight_redelivered(cluster, clients, leader, follower)
    await clients.close_all()
    cluster.stop()


class TenInFlight(NamedTuple):
    """Two brokers replicating ``q``/0, and a consumer of channel ``c`` on its leader
    holding m0..m9 in flight, in id order."""

    cluster: Cluster
    clients: Clients
    leader: str
    follower: str
    consumer: ProtocolClient
    messages: list[Message]


async def two_brokers_ten_in_flight(
    etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp_path: Path
) -> TenInFlight:
    cluster = Cluster(etcd, cluster_id, nursery, tmp_path)
    await cluster.with_topic("q", TopicMeta(1, 2), ("a", "b"))
    leader = cluster.leader_of("q", 0)
    follower = next(b for b in cluster.brokers if b != leader)
    clients = Clients()
    producer = await clients.connect(cluster.brokers[leader][0].tcp)
    await producer.send(Mpub("q", tuple(b"m%d" % n for n in range(10)), partition=0))
    assert ok(await next_frame(producer))
    consumer = await clients.connect(cluster.brokers[leader][0].tcp)
    await consumer.send(Sub("q", "c", partition=0), Rdy(10))
    assert ok(await next_frame(consumer))
    messages = [await next_message(consumer) for _ in range(10)]
    messages.sort(key=lambda m: int.from_bytes(m.id[:8], "big"))
    return TenInFlight(cluster, clients, leader, follower, consumer, messages)


async def leader_killed_then_only_in_flight_redelivered(
    cluster: Cluster, clients: Clients, leader: str, follower: str
) -> None:
    """Stop the leader of ``q``/0; once ``follower`` leads, channel ``c`` must hand out
    m2, m5 and m8 (in flight when the leader went) and nothing else."""
    cluster.brokers[leader][1].cancel()
    del cluster.brokers[leader]
    await cluster.until(lambda: cluster.leader_of("q", 0) == follower)
    await cluster.until(
        lambda: isinstance(cluster.manager(follower).roles.get(("q", 0)), LeaderRole)
    )
    again = await clients.connect(cluster.brokers[follower][0].tcp)
    await again.send(Sub("q", "c", partition=0), Rdy(10))
    assert ok(await next_frame(again))
    redelivered = sorted(m.body for m in [await next_message(again) for _ in range(3)])
    assert redelivered == [b"m2", b"m5", b"m8"]
    assert await quiet(again, 0.5) == []


async def _raw_reply(address: tuple[str, int], command: bytes) -> bytes:
    """The first frame's bytes after the magic and ``command`` (what Go clients parse)."""
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        await stream.send_all(b"  V2" + command)
        data = b""
        with trio.fail_after(5):
            while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
                chunk = await stream.receive_some(1024)
                assert chunk, data
                data += chunk
        return data[: 4 + int.from_bytes(data[:4], "big")]


async def test_youzan_error_frames_byte_for_byte(
    etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    """What Youzan's go-nsq TopicProducerMgr reacts to: error frames (type 1) whose
    text is the code and a space, for PUB on a follower and below min_isr."""
    cluster = Cluster(etcd, cluster_id, nursery, tmp_path)
    await cluster.with_topic("y", TopicMeta(1, 2, min_isr=2), ("a", "b"))
    leader = cluster.leader_of("y", 0)
    follower = next(b for b in cluster.brokers if b != leader)
    pub = b"PUB y 0\n\x00\x00\x00\x01x"
    assert await _raw_reply(cluster.brokers[follower][0].tcp, pub) == (
        b"\x00\x00\x00\x1b\x00\x00\x00\x01E_FAILED_ON_NOT_LEADER "
    )
    assert (
        await _raw_reply(cluster.brokers[leader][0].tcp, pub)
        == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
    )
    # the follower goes: one in-sync replica left, min_isr 2: not writable
    cluster.brokers[follower][1].cancel()
    del cluster.brokers[follower]
    await cluster.until(lambda: cluster.coordinator.view.partitions["y", 0].isr == (leader,))
    await cluster.until(lambda: len(cluster.manager(leader).roles["y", 0].state.isr) == 1)
    assert await _raw_reply(cluster.brokers[leader][0].tcp, pub) == (
        b"\x00\x00\x00\x1d\x00\x00\x00\x01E_FAILED_ON_NOT_WRITABLE "
    )
    cluster.stop()


async def test_plain_clients_publish_and_consume_through_every_leading_broker(
    etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    """A plain NSQ client (no partition: pynsq, go-nsq) sent by lookupd to any
    producer of a replicated topic: PUB, HTTP /pub and SUB go to the lowest
    partition that broker leads, not to partition 0, which another broker leads."""
    cluster = Cluster(etcd, cluster_id, nursery, tmp_path)
    await cluster.with_topic("plain", TopicMeta(4, 2), ("a", "b"))
    clients = Clients()
    for broker_id, (addresses, _) in cluster.brokers.items():
        lowest = min(p for p in range(4) if cluster.leader_of("plain", p) == broker_id)
        log = addresses.broker.topics["plain"].partitions[lowest].log
        before = log.next_id
        producer = await clients.connect(addresses.tcp)
        await producer.send(Pub("plain", broker_id.encode()))
        assert ok(await next_frame(producer))  # unfixed: E_FAILED_ON_NOT_LEADER on one
        assert addresses.http is not None
        async with httpx.AsyncClient() as http:
            reply = await http.post(
                f"http://127.0.0.1:{addresses.http[1]}/pub?topic=plain", content=b"http"
            )
        assert reply.status_code == 200, reply.text
        assert log.next_id == before + 2
        consumer = await clients.connect(addresses.tcp)
        await consumer.send(Sub("plain", "c"), Rdy(10))
        assert ok(await next_frame(consumer))
        bodies = sorted([(await next_message(consumer)).body for _ in range(2)])
        assert bodies == sorted([broker_id.encode(), b"http"])
    await clients.close_all()
    cluster.stop()


async def test_http_pub_takes_the_short_way_with_every_rule_of_a_cluster(
    etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    """HTTP /pub goes TCP's short way in a cluster too, with its rules: refused with
    Youzan's E_FAILED_ON_NOT_LEADER off the leader and E_FAILED_ON_NOT_WRITABLE below
    min_isr, nothing stored either time, and answered by the leader only once every
    in-sync replica holds the message (committed); /mpub is refused off the leader
    alike."""
    cluster = Cluster(etcd, cluster_id, nursery, tmp_path)
    await cluster.with_topic("h", TopicMeta(1, 2, min_isr=2), ("a", "b"))
    leader = cluster.leader_of("h", 0)
    follower = next(b for b in cluster.brokers if b != leader)
    leader_log = cluster.brokers[leader][0].broker.topics["h"].partitions[0].log
    follower_log = cluster.brokers[follower][0].broker.topics["h"].partitions[0].log

    def url(broker_id: str, path: str) -> str:
        http_address = cluster.brokers[broker_id][0].http
        assert http_address is not None
        return f"http://127.0.0.1:{http_address[1]}{path}?topic=h"

    async with httpx.AsyncClient() as http:
        for path in ("/pub", "/mpub"):
            refused = await http.post(url(follower, path), content=b"no")
            assert (refused.status_code, refused.json()["message"]) == (
                400,
                "E_FAILED_ON_NOT_LEADER",
            )
        assert (leader_log.next_id, follower_log.next_id) == (1, 1)  # stored nowhere
        reply = await http.post(url(leader, "/pub"), content=b"yes")
        assert (reply.status_code, reply.text) == (200, "OK")
        assert follower_log.next_id == 2
        # the follower stops copying but stays in the ISR for replica_lag_time: the
        # next /pub is stored on the leader alone, so it is not answered meanwhile
        cluster.manager(follower).roles["h", 0].end()
        answers: list[httpx.Response] = []

        async def publish() -> None:
            answers.append(await http.post(url(leader, "/pub"), content=b"held"))

        nursery.start_soon(publish)
        await trio.sleep(0.5)
        assert (answers, leader_log.next_id) == ([], 3)  # unfixed: answered at its append
        await cluster.until(lambda: bool(answers))  # once the ISR shrank (or it caught up)
        assert answers[0].text == "OK"
        cluster.brokers[follower][1].cancel()  # one in-sync replica left: not writable
        del cluster.brokers[follower]
        await cluster.until(lambda: len(cluster.manager(leader).roles["h", 0].state.isr) == 1)
        refused = await http.post(url(leader, "/pub"), content=b"no")
        assert (refused.status_code, refused.json()["message"]) == (
            400,
            "E_FAILED_ON_NOT_WRITABLE",
        )
        assert leader_log.next_id == 3
    cluster.stop()


async def test_a_lone_leader_answers_at_the_append_and_keeps_every_rule(
    etcd: EtcdServer, cluster_id: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    """replicas=1: the leader has no follower to wait for, so a PUB is committed (and
    readable) at its append and answered at once; but a PUB to the broker that does
    not lead the partition gets E_FAILED_ON_NOT_LEADER, and one to the leader whose
    lease went unrenewed for a TTL (another leader may be elected: fencing) gets
    E_FAILED_ON_NOT_WRITABLE, neither of them stored."""
    cluster = Cluster(etcd, cluster_id, nursery, tmp_path)
    await cluster.with_topic("lone", TopicMeta(2, 1), ("a", "b"))
    leader = cluster.leader_of("lone", 0)
    other = next(b for b in cluster.brokers if b != leader)
    pub = b"PUB lone 0\n\x00\x00\x00\x01x"
    partition = cluster.brokers[leader][0].broker.topics["lone"].partitions[0]
    other_log = cluster.brokers[other][0].broker.topics["lone"].partitions[0].log
    assert await _raw_reply(cluster.brokers[other][0].tcp, pub) == (
        b"\x00\x00\x00\x1b\x00\x00\x00\x01E_FAILED_ON_NOT_LEADER "
    )
    assert other_log.next_id == 1  # not stored where it is not led
    clients = Clients()
    consumer = await clients.connect(cluster.brokers[leader][0].tcp)
    await consumer.send(Sub("lone", "c", partition=0), Rdy(10))
    assert ok(await next_frame(consumer))
    assert (
        await _raw_reply(cluster.brokers[leader][0].tcp, pub)
        == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
    )
    assert partition.commit_end == partition.log.next_id == 2  # committed at the append
    assert (await next_message(consumer)).body == b"x"
    stopped = [m.process for m in etcd.members if m.process is not None]
    for process in stopped:  # etcd unreachable: the lease cannot be renewed
        process.send_signal(signal.SIGSTOP)
    try:
        manager = cluster.manager(leader)
        await cluster.until(manager.registration.fenced)
        assert isinstance(manager.roles["lone", 0], LeaderRole)  # still leads, fenced
        assert await _raw_reply(cluster.brokers[leader][0].tcp, pub) == (
            b"\x00\x00\x00\x1d\x00\x00\x00\x01E_FAILED_ON_NOT_WRITABLE "
        )
        assert partition.log.next_id == 2
    finally:
        for process in stopped:
            process.send_signal(signal.SIGCONT)
    await clients.close_all()
    cluster.stop()
