"""Consumer groups over real sockets (issue 20): members named in IDENTIFY
``group_member`` subscribe to every partition of a topic; the broker gives each
partition to one member (an even deal), and when a member goes, its partitions and
its unfinished messages go to the others within the rebalance delay.
docs/extensions.md, "Consumer groups".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import httpx
import orjson
import pytest
import trio
import trio.testing

from trionsq import NsqdConfig
from trionsq.client import ConsumerSettings, open_consumer, open_producer
from trionsq.config import ConfigError
from trionsq.protocol import Fin, IdentifyRequest, Pub, Rdy, Sub
from trionsq.protocol.client import MessageFrame, Response, encode_identify
from trionsq.testing import even_group, group_member

from .raw import LOCAL, next_error, next_frame, ok, publish, start, stats_channel
from .test_admin_stream import events_until, open_stream

if TYPE_CHECKING:
    from trionsq.lookupd.server import LookupdAddresses
    from trionsq.nursery_tree import BoundAddresses
    from trionsq.protocol.message import Message
    from trionsq.testing import NsqCluster, ProtocolClient

    from .raw import Clients

DELAY = 1.0
PARTITIONS = 6
PER_PARTITION = 4


async def started(
    nursery: trio.Nursery, clock: trio.testing.MockClock, delay: float = DELAY
) -> BoundAddresses:
    """A broker on the mock clock with a topic of six partitions."""
    clock.autojump_threshold = 0.1
    addresses = await start(nursery, attrs.evolve(LOCAL, group_rebalance_delay=delay))
    addresses.broker.topic("g", partitions=PARTITIONS)
    return addresses


class Member:
    """One group member: a connection per partition, and what each received."""

    def __init__(self, name: str, links: dict[int, ProtocolClient]) -> None:
        self.name = name
        self.links = links
        self.received: dict[int, list[Message]] = {p: [] for p in links}

    async def collect(self, seconds: float) -> None:
        """Read every link until it has been quiet for ``seconds``."""
        async with trio.open_nursery() as nursery:
            for partition, link in self.links.items():
                nursery.start_soon(self._collect, partition, link, seconds)

    async def _collect(self, partition: int, link: ProtocolClient, seconds: float) -> None:
        for frame in await link.drain(quiet=seconds):
            if isinstance(frame, MessageFrame):
                self.received[partition].append(frame.message)

    def partitions(self) -> list[int]:
        return sorted(p for p, messages in self.received.items() if messages)

    async def finish_all(self) -> None:
        for partition, messages in self.received.items():
            if messages:
                await self.links[partition].send(*(Fin(m.id) for m in messages))


SESSION = 60_000
"""The members' session timeout (ms): these raw members do not answer heartbeats
while they read, so a minute, as nsqd's two default heartbeat intervals."""


async def join(
    clients: Clients,
    addresses: BoundAddresses,
    name: str,
    rdy: int = 10,
    *,
    identify: IdentifyRequest | None = None,
) -> Member:
    """``name`` subscribed to every partition, one connection each (``identify``: its
    IDENTIFY, by default the name and a minute's session)."""
    if identify is None:
        identify = IdentifyRequest(group_member=name, group_session_timeout=SESSION)
    links: dict[int, ProtocolClient] = {}
    for partition in range(PARTITIONS):
        link = await clients.connect(addresses.tcp)
        await link.stream.send_all(encode_identify(identify))
        assert ok(await next_frame(link))
        await link.send(Sub("g", "c", partition))
        assert ok(await next_frame(link))
        await link.send(Rdy(rdy))
        links[partition] = link
    return Member(name, links)


async def fill(clients: Clients, addresses: BoundAddresses, count: int = PER_PARTITION) -> None:
    producer = await clients.connect(addresses.tcp)
    await publish(
        producer,
        *(Pub("g", b"p%d-%d" % (p, i), p) for p in range(PARTITIONS) for i in range(count)),
    )


async def group_stats(addresses: BoundAddresses) -> dict[str, object]:
    group = (await stats_channel(addresses, "g"))["group"]
    assert isinstance(group, dict)
    return group


async def three_members_served(
    clients: Clients, nursery: trio.Nursery, clock: trio.testing.MockClock
) -> tuple[BoundAddresses, list[Member]]:
    """Three members joined, messages in every partition, each member's received."""
    addresses = await started(nursery, clock)
    members = [await join(clients, addresses, f"m{i}") for i in range(3)]
    await fill(clients, addresses)
    for member in members:
        await member.collect(DELAY + 1)
    return addresses, members


async def test_three_members_over_six_partitions_get_two_each(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses, members = await three_members_served(clients, nursery, autojump_clock)
    owned = [member.partitions() for member in members]
    assert sorted(p for parts in owned for p in parts) == list(range(PARTITIONS))
    assert [len(parts) for parts in owned] == [2, 2, 2]
    for member in members:  # every message of an owned partition, once, in order
        for partition in member.partitions():
            bodies = [m.body for m in member.received[partition]]
            assert bodies == [b"p%d-%d" % (partition, i) for i in range(PER_PARTITION)]
    group = await group_stats(addresses)
    assert group["assignment"] == {m.name: parts for m, parts in zip(members, owned, strict=True)}
    assert isinstance(group["generation"], int)
    assert group["generation"] >= 1


async def test_a_killed_member_s_partitions_and_unfinished_messages_move_within_the_delay(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses, members = await three_members_served(clients, nursery, autojump_clock)
    survivors, victim = members[:2], members[2]
    for member in survivors:
        await member.finish_all()
    unfinished = {(p, m.body) for p, ms in victim.received.items() for m in ms}
    assert len(unfinished) == 2 * PER_PARTITION
    for member in survivors:
        member.received = {p: [] for p in member.links}
    killed_at = trio.current_time()
    for link in victim.links.values():  # the process dies: its sockets close
        await trio.aclose_forcefully(link.stream)
    arrived: list[float] = []

    async def watch(member: Member, partition: int, link: ProtocolClient) -> None:
        while True:
            with trio.move_on_after(DELAY + 1):
                frames = await link.read(1)
                assert frames
                if isinstance(frames[0], MessageFrame):
                    member.received[partition].append(frames[0].message)
                    arrived.append(trio.current_time())
                continue
            return

    async with trio.open_nursery() as watchers:
        for member in survivors:
            for partition, link in member.links.items():
                watchers.start_soon(watch, member, partition, link)
    handed = {(p, m.body) for member in survivors for p, ms in member.received.items() for m in ms}
    assert handed == unfinished  # all of them, to the new owners, nothing else
    for member in survivors:
        for messages in member.received.values():
            assert all(m.attempts == 2 for m in messages)
    # within the rebalance delay, plus the output buffer's flush timeout (a consumer
    # whose RDY is not reached gets its batch when the timeout flushes it, as in nsqd)
    assert max(arrived) - killed_at <= DELAY + LOCAL.output_buffer_timeout + 0.01
    assert sorted(len(member.partitions()) for member in survivors) == [1, 1]
    group = await group_stats(addresses)
    assignment = group["assignment"]
    assert isinstance(assignment, dict)
    assert sorted(assignment) == ["m0", "m1"]
    assert sorted(len(parts) for parts in assignment.values()) == [3, 3]


async def test_the_old_owner_releases_before_the_new_one_starts(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """A member joining takes partitions only once their previous owner holds none of
    their messages: the old owner may still FIN what it has, nothing goes out twice."""
    addresses = await started(nursery, autojump_clock)
    first = await join(clients, addresses, "a", rdy=1)
    await fill(clients, addresses, count=2)
    await first.collect(DELAY + 1)
    assert first.partitions() == list(range(PARTITIONS))  # alone: every partition
    second = await join(clients, addresses, "b", rdy=1)
    await second.collect(DELAY + 1)
    assert second.partitions() == []  # "a" still holds a message of every partition
    assert (await group_stats(addresses))["assignment"] == {"a": [0, 1, 2], "b": [3, 4, 5]}
    held = {p: ms[0] for p, ms in first.received.items()}
    for partition in (3, 4, 5):  # "a" finishes what it held of the partitions it lost
        await first.links[partition].send(Fin(held[partition].id))
    await second.collect(DELAY)
    assert second.partitions() == [3, 4, 5]
    assert {p: [m.body for m in ms] for p, ms in second.received.items() if ms} == {
        p: [b"p%d-1" % p] for p in (3, 4, 5)
    }


async def test_group_member_in_identify_is_checked_and_echoed(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses = await started(nursery, autojump_clock)
    client = await clients.connect(addresses.tcp)
    asked = IdentifyRequest(feature_negotiation=True, group_member="worker-1.a")
    await client.stream.send_all(encode_identify(asked))
    reply = await next_frame(client)
    assert isinstance(reply, Response)
    assert orjson.loads(reply.data)["group_member"] == "worker-1.a"
    plain = await clients.connect(addresses.tcp)
    await plain.stream.send_all(encode_identify(IdentifyRequest(feature_negotiation=True)))
    reply = await next_frame(plain)
    assert isinstance(reply, Response)
    assert "group_member" not in orjson.loads(reply.data)
    for bad in ("has space", "x" * 65, "w#ephemeral"):
        refused = await clients.connect(addresses.tcp)
        await refused.stream.send_all(encode_identify(IdentifyRequest(group_member=bad)))
        error = await next_error(refused)
        assert error.error.text == f"E_BAD_BODY IDENTIFY group member ({bad!r}) is invalid"


async def test_ordinary_consumers_of_a_grouped_channel_are_not_held_back(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses = await started(nursery, autojump_clock)
    await fill(clients, addresses, count=1)
    plain = await clients.connect(addresses.tcp)
    await plain.send(Sub("g", "c", 0), Rdy(5))
    assert ok(await next_frame(plain))
    frame = await next_frame(plain)
    assert isinstance(frame, MessageFrame)
    assert frame.message.body == b"p0-0"


async def test_trionsq_client_members_split_the_partitions(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses = await started(nursery, autojump_clock, delay=0.0)
    host, port = addresses.tcp
    received: dict[str, set[int]] = {"one": set(), "two": set()}
    producer_done = trio.Event()

    async def consume(name: str, task_status: trio.TaskStatus[None]) -> None:
        settings = ConsumerSettings(group_member=name, max_in_flight=60)
        async with open_consumer(
            "g", "c", f"{host}:{port}", partitions=range(PARTITIONS), settings=settings
        ) as consumer:
            task_status.started()
            with trio.move_on_after(5):
                async for message in consumer:
                    received[name].add(int(message.body.split(b"-")[0][1:]))
                    message.finish()
            await producer_done.wait()

    async with trio.open_nursery() as consumers:
        await consumers.start(consume, "one")
        await consumers.start(consume, "two")
        async with httpx.AsyncClient() as http:
            assert addresses.http is not None
            base = f"http://{addresses.http[0]}:{addresses.http[1]}"
            for partition in range(PARTITIONS):
                for i in range(5):
                    reply = await http.post(
                        f"{base}/pub?topic=g&partition={partition}",
                        content=b"p%d-%d" % (partition, i),
                    )
                    assert reply.status_code == 200, reply.text
        producer_done.set()
    assert received == {"one": {0, 1, 2}, "two": {3, 4, 5}}  # "one" keeps its lowest


@pytest.fixture
def nsqd_config() -> NsqdConfig:
    """The cluster's brokers: a short rebalance delay (real time)."""
    return NsqdConfig.loopback(group_rebalance_delay=0.2)


@pytest.mark.nsq_cluster(brokers=3, lookupds=1)
async def test_members_split_a_topic_placed_over_three_brokers(nsq_cluster: NsqCluster) -> None:
    """Six partitions placed by lookupd over three brokers, three members: each
    broker deals its own partitions, and together every member gets two; lookupd's
    ``/group`` shows the whole assignment."""
    (lookupd,) = nsq_cluster.lookupd_http_addresses
    async with httpx.AsyncClient(base_url=f"http://{lookupd}") as http:
        created = await http.post("/topic/create?topic=orders&partition_num=6&replicator=1")
        assert created.status_code == 200, created.text
    got: dict[str, dict[bytes, int | None]] = {f"m{i}": {} for i in range(3)}
    all_in = trio.Event()

    async def consume(name: str, task_status: trio.TaskStatus[None]) -> None:
        settings = ConsumerSettings(group_member=name, lookup_interval=0.5)
        async with open_consumer("orders", "c", lookupd=lookupd, settings=settings) as consumer:
            assert consumer.connections == PARTITIONS
            task_status.started()
            async for message in consumer:
                got[name][message.body] = message.partition
                message.finish()
                if sum(len(seen) for seen in got.values()) == 600:
                    all_in.set()

    with trio.fail_after(30):
        async with trio.open_nursery() as consumers:
            for name in got:
                await consumers.start(consume, name)
            await trio.sleep(0.5)  # the last join settles (0.2 s delay)
            async with open_producer(lookupd=lookupd) as producer:
                for i in range(600):
                    await producer.publish("orders", b"k%d" % i, key=f"k{i}")
            await all_in.wait()
            async with httpx.AsyncClient(base_url=f"http://{lookupd}") as http:
                answer = await http.get("/group?topic=orders&channel=c")
            consumers.cancel_scope.cancel()
    owned = {
        name: sorted({p for p in seen.values() if p is not None}) for name, seen in got.items()
    }
    assert sorted(p for parts in owned.values() for p in parts) == list(range(PARTITIONS))
    assert [len(parts) for parts in owned.values()] == [2, 2, 2]
    assert answer.status_code == 200, answer.text
    document = answer.json()
    assert document["assignment"] == owned
    assert document["members"] == ["m0", "m1", "m2"]  # connected to any broker
    assert len(document["brokers"]) == 3
    assert all(b["generation"] >= 1 and "error" not in b for b in document["brokers"])
    assert sorted(p for b in document["brokers"] for p in b["partitions"]) == list(range(6))


@pytest.mark.nsq_cluster(brokers=3, lookupds=1)
@pytest.mark.parametrize("partitions", [8, 6])
async def test_the_deal_is_sticky_over_three_brokers(
    nsq_cluster: NsqCluster, partitions: int
) -> None:
    """Partitions placed by lookupd over three brokers, each dealing its own: when one
    of three members leaves, only its partitions move; when a fourth joins three, it
    takes the fewest that even the counts out, from the others (issue 30, item 7)."""
    (lookupd,) = nsq_cluster.lookupd_http_addresses
    topic = f"sticky{partitions}"
    async with httpx.AsyncClient(base_url=f"http://{lookupd}") as http:
        created = await http.post(
            f"/topic/create?topic={topic}&partition_num={partitions}&replicator=1"
        )
        assert created.status_code == 200, created.text
        scopes: dict[str, trio.CancelScope] = {}
        with trio.fail_after(60):
            async with trio.open_nursery() as members:
                for name in ("m0", "m1", "m2"):
                    scopes[name] = await members.start(group_member, lookupd, topic, "c", name)
                three = await even_group(lookupd, topic, "c", {"m0", "m1", "m2"}, partitions)
                scopes["m2"].cancel()  # m2 leaves: its connections to every broker close
                two = await even_group(lookupd, topic, "c", {"m0", "m1"}, partitions)
                moved = {p for p in two if two[p] != three[p]}
                assert moved == {p for p, owner in three.items() if owner == "m2"}
                await members.start(group_member, lookupd, topic, "c", "m3")
                three = await even_group(lookupd, topic, "c", {"m0", "m1", "m3"}, partitions)
                await members.start(group_member, lookupd, topic, "c", "m4")  # a fourth
                four = await even_group(lookupd, topic, "c", {"m0", "m1", "m3", "m4"}, partitions)
                moved = {p for p in four if four[p] != three[p]}
                assert len(moved) == partitions // 4
                assert all(four[p] == "m4" for p in moved)
                members.cancel_scope.cancel()


def broker_holding(cluster: NsqCluster, partition: int, group: httpx.Response) -> int:
    """The index of the broker that ``/group`` shows holding ``partition``."""
    (address,) = [b["address"] for b in group.json()["brokers"] if partition in b["partitions"]]
    (index,) = [
        i
        for i, broker in enumerate(cluster.brokers)
        if broker.http is not None and f"{broker.http[0]}:{broker.http[1]}" == address
    ]
    return index


@pytest.mark.nsq_cluster(brokers=3, lookupds=1)
async def test_a_restarted_broker_learns_the_deal_from_lookupd(nsq_cluster: NsqCluster) -> None:
    """A broker that restarts has forgotten its deal; its members come back one by
    one. Dealing from what lookupd's ``/group`` shows of the other brokers, it gives
    each member back as many partitions as it had: the whole stays even."""
    (lookupd,) = nsq_cluster.lookupd_http_addresses
    async with httpx.AsyncClient(base_url=f"http://{lookupd}") as http:
        created = await http.post("/topic/create?topic=restart&partition_num=6&replicator=1")
        assert created.status_code == 200, created.text
        names = {"m0", "m1", "m2"}
        with trio.fail_after(60):
            async with trio.open_nursery() as members:
                joined: set[str] = set()
                for name in ("m0", "m1", "m2"):  # one after another
                    await members.start(group_member, lookupd, "restart", "c", name)
                    joined.add(name)
                    before = await even_group(lookupd, "restart", "c", joined, 6)
                # m0 alone had all six, m1 took 3-5, m2 took 2 from m0 and 5 from m1: a
                # deal from scratch would give 2 to m1, so restart the broker with it
                assert (before[2], before[5]) == ("m2", "m2")
                await nsq_cluster.restart_broker(
                    broker_holding(nsq_cluster, 2, await http.get("/group?topic=restart&channel=c"))
                )
                after = await even_group(lookupd, "restart", "c", names, 6)
                brokers = (await http.get("/group?topic=restart&channel=c")).json()["brokers"]
                members.cancel_scope.cancel()
    counts = {name: list(after.values()).count(name) for name in names}
    assert counts == {name: list(before.values()).count(name) for name in names}
    assert len(brokers) == 3
    moved = {p for p in after if after[p] != before[p]}
    assert any(moved <= set(b["partitions"]) for b in brokers)  # only the restarted one's


async def test_lookupd_group_needs_a_known_topic_and_valid_names(lookupd: LookupdAddresses) -> None:
    host, port = lookupd.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        assert (await http.get("/group?topic=none&channel=c")).status_code == 404
        missing = await http.get("/group?topic=t")
        assert (missing.status_code, missing.json()) == (400, {"message": "MISSING_ARG_CHANNEL"})
        bad = await http.get("/group?topic=t&channel=b%20d")
        assert (bad.status_code, bad.json()) == (400, {"message": "INVALID_ARG_CHANNEL"})


def test_a_negative_rebalance_delay_is_refused() -> None:
    with pytest.raises(ConfigError, match="--group-rebalance-delay must be 0 or more, got -1"):
        NsqdConfig(group_rebalance_delay=-1.0).validate()


async def test_rebalances_are_on_the_admin_stream(clients: Clients, nursery: trio.Nursery) -> None:
    addresses = await start(nursery, attrs.evolve(LOCAL, group_rebalance_delay=0.0))
    addresses.broker.topic("g", partitions=PARTITIONS)
    async with open_stream(addresses) as ws:
        await join(clients, addresses, "solo")
        events = await events_until(ws, "group_rebalanced")
        assert events[-1]["assignment"] == {"solo": [0]}  # its first connection
        for connected in range(2, PARTITIONS + 1):
            event = (await events_until(ws, "group_rebalanced"))[-1]
            assert event["assignment"] == {"solo": list(range(connected))}
        assert event["topic"] == "g"
        assert event["channel"] == "c"
        assert event["generation"] == PARTITIONS


async def test_two_connections_of_one_member_on_a_partition_share_it(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """The owner's connections are one member: each gets messages while the other
    holds some (only other members' messages hold the new owner back)."""
    addresses = await started(nursery, autojump_clock, delay=0.0)
    links = []
    for _ in range(2):
        link = await clients.connect(addresses.tcp)
        await link.stream.send_all(encode_identify(IdentifyRequest(group_member="a")))
        assert ok(await next_frame(link))
        await link.send(Sub("g", "c", 0), Rdy(1))
        assert ok(await next_frame(link))
        links.append(link)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("g", b"one", 0), Pub("g", b"two", 0))
    firsts = [await next_frame(link) for link in links]
    assert all(isinstance(frame, MessageFrame) for frame in firsts)
    assert sorted(f.message.body for f in firsts if isinstance(f, MessageFrame)) == [b"one", b"two"]


async def test_a_deleted_topic_leaves_no_group_behind(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses = await started(nursery, autojump_clock, delay=0.0)
    member = await join(clients, addresses, "a")
    assert ("g", "c") in addresses.broker.groups
    assert addresses.broker.delete_topic("g")
    for link in member.links.values():
        await trio.aclose_forcefully(link.stream)
    await trio.sleep(1)
    assert addresses.broker.groups == {}
