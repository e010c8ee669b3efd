"""Faults of every kind at once, on a seeded random schedule, under the failover
publishers and checker (tests/cluster/failover_run.py): a Jepsen-style chaos run.

A schedule is drawn from a seed: ``faults`` faults at random times (they may
overlap), each one of

- ``kill``: SIGKILL the leader or a follower of a partition, restart it after a while;
- ``pause``: SIGSTOP a broker for 0.5-4 s (shorter and longer than the 2 s lease), SIGCONT;
- ``revoke``: revoke one broker's etcd lease (its registration goes at once);
- ``revoke-all``: revoke every lease in etcd (the brokers' and the coordinator's);
- ``etcd-stop``: stop etcd for 1-5 s, start it again;
- ``move``: ``POST /topic/partition/move`` a replica to a broker that holds none;
- ``lookupd-kill``: SIGKILL the lookupd, restart it.

Which broker a fault hits is decided when it fires (the leader of partition 2
*then*), so the schedule is the same for a seed while the brokers it names depend
on timing; every fault as carried out goes into the run's event log. After the
schedule everything is healed (every process running, none stopped), the run waits
until every partition has a leader and a whole ISR in etcd, stops the publishers,
consumes every partition from its leader and holds the history to the checker.

Used by tests/cluster/test_chaos.py (one short seeded run) and benchmarks/chaos.py.
"""

from __future__ import annotations

import random
import signal
import time
from typing import TYPE_CHECKING, Final

import attrs
import trio

from tests.cluster.failover_run import TOPIC, History, Verdict, run_history
from trionsq.cluster.etcd import EtcdClient, EtcdUnavailable
from trionsq.cluster.etcd_json import EtcdReplyError
from trionsq.cluster.keys import ClusterKeys, JsonDecodeError, PartitionState, decode
from trionsq.cluster.local_cluster import LocalCluster
from trionsq.http.client import HttpClientError, http_request

if TYPE_CHECKING:
    from trionsq.cluster.local_cluster import BrokerProcess

    from .failover_run import Lookup

KINDS: Final = ("kill", "pause", "revoke", "revoke-all", "etcd-stop", "move", "lookupd-kill")
HEAL_WITHIN: Final = 60.0
"""Seconds the cluster has, once healed, to lead every partition with a whole ISR."""
STEADY: Final = 3.0
"""Seconds the healed state must hold (longer than the 2 s lease)."""


@attrs.frozen
class Fault:
    """One scheduled fault: its kind, when (seconds after the publishers start), whom."""

    kind: str
    at: float
    partition: int = 0
    role: str = "leader"
    """``leader`` or ``follower`` of ``partition``: the broker hit."""
    seconds: float = 0.0
    """How long the fault lasts (down, stopped, paused)."""

    def describe(self) -> str:
        whom = f" {self.role} of p{self.partition}" if self.kind in BROKER_FAULTS else ""
        if self.kind == "move":
            whom = f" p{self.partition} off its {self.role}"
        lasting = f" for {self.seconds:.2f}s" if self.seconds else ""
        return f"t+{self.at:5.2f}s {self.kind}{whom}{lasting}"


BROKER_FAULTS: Final = frozenset({"kill", "pause", "revoke"})


def schedule(
    seed: int, faults: int, partitions: int, kinds: tuple[str, ...] = KINDS
) -> list[Fault]:
    """``faults`` faults drawn from ``seed``: 0.2-2.5 s apart, so long ones overlap."""
    chance = random.Random(seed)
    at = 1.0
    drawn = []
    for _ in range(faults):
        kind = chance.choice(kinds)
        seconds = {
            "kill": chance.uniform(0.0, 2.0),
            "pause": chance.uniform(0.5, 4.0),
            "etcd-stop": chance.uniform(1.0, 5.0),
            "lookupd-kill": chance.uniform(0.0, 2.0),
        }.get(kind, 0.0)
        drawn.append(
            Fault(
                kind,
                round(at, 2),
                chance.randrange(partitions),
                chance.choice(("leader", "follower")),
                round(seconds, 2),
            )
        )
        at += chance.uniform(0.2, 2.5)
    return drawn


@attrs.frozen
class ChaosVerdict:
    """The checker's verdict, and whether the cluster healed."""

    verdict: Verdict
    healed: bool
    heal_seconds: float
    unhealed: str = ""
    """The partitions' state in etcd when it did not heal."""

    @property
    def passed(self) -> bool:
        v = self.verdict
        return self.healed and not (v.lost or v.phantom or v.duplicated)


@attrs.define
class Chaos:
    """Carries out a schedule on a cluster, logging what each fault did."""

    cluster: LocalCluster
    partitions: int
    events: list[str] = attrs.Factory(list)
    started: float = 0.0
    states: dict[int, PartitionState] = attrs.Factory(dict)
    """Each partition's last state read from etcd (for when etcd is down)."""
    _broker_locks: dict[str, trio.Lock] = attrs.Factory(dict)
    _etcd_lock: trio.Lock = attrs.Factory(trio.Lock)
    _lookupd_lock: trio.Lock = attrs.Factory(trio.Lock)

    def log(self, text: str) -> None:
        self.events.append(f"t+{time.monotonic() - self.started:6.2f}s {text}")

    def open_etcd(self) -> EtcdClient:
        """A new client, for ``async with`` (it closes its kept connection)."""
        return EtcdClient(tuple(self.cluster.etcd.endpoints))

    @property
    def keys(self) -> ClusterKeys:
        return ClusterKeys(self.cluster.cluster_id)

    def lock(self, broker: BrokerProcess) -> trio.Lock:
        """One start or kill at a time per broker (a restart waits for its /ping)."""
        return self._broker_locks.setdefault(broker.name, trio.Lock())

    async def read_states(self) -> dict[int, PartitionState]:
        """Every partition's state in etcd (the last known where etcd does not answer)."""
        with trio.move_on_after(2):
            try:
                async with self.open_etcd() as etcd:
                    kvs, _ = await etcd.get_prefix(
                        self.keys.topics + f"{TOPIC}/partitions/".encode()
                    )
            except (EtcdUnavailable, EtcdReplyError):
                return self.states
            for kv in kvs:
                parsed = self.keys.parse_topic_key(kv.key)
                if parsed is not None and parsed[1] is not None:
                    try:
                        self.states[parsed[1]] = decode(kv.value, PartitionState)
                    except JsonDecodeError:
                        continue
        return self.states

    async def target(self, fault: Fault) -> BrokerProcess | None:
        """The broker that is ``fault.role`` of its partition now."""
        state = (await self.read_states()).get(fault.partition)
        if state is None:
            return None
        if fault.role == "leader":
            chosen = state.leader
        else:
            followers = sorted(state.followers)
            chosen = followers[int(fault.at * 100) % len(followers)] if followers else ""
        if not chosen:
            return None
        return self.cluster.by_id(chosen)

    async def run(self, faults: list[Fault]) -> None:
        """Fire every fault at its time; return when the last has ended."""
        self.started = time.monotonic()
        zero = trio.current_time()  # trio's clock, not time.monotonic()'s
        async with trio.open_nursery() as nursery:
            for fault in faults:
                await trio.sleep_until(zero + fault.at)
                nursery.start_soon(self.fire, fault)

    async def fire(self, fault: Fault) -> None:
        handlers = {
            "kill": self.kill,
            "pause": self.pause,
            "revoke": self.revoke,
            "revoke-all": self.revoke_all,
            "etcd-stop": self.stop_etcd,
            "move": self.move,
            "lookupd-kill": self.kill_lookupd,
        }
        await handlers[fault.kind](fault)

    async def kill(self, fault: Fault) -> None:
        broker = await self.target(fault)
        if broker is None:
            self.log(f"kill {fault.role} of p{fault.partition}: none")
            return
        async with self.lock(broker):
            self.log(f"kill -9 {broker.name} ({fault.role} of p{fault.partition})")
            await trio.to_thread.run_sync(broker.kill)
            await trio.sleep(fault.seconds)
            await trio.to_thread.run_sync(broker.start)
            self.log(f"{broker.name} restarted")

    async def pause(self, fault: Fault) -> None:
        broker = await self.target(fault)
        process = broker.process if broker is not None else None
        if broker is None or process is None:
            self.log(f"pause {fault.role} of p{fault.partition}: none running")
            return
        self.log(f"SIGSTOP {broker.name} ({fault.role} of p{fault.partition})")
        process.send_signal(signal.SIGSTOP)  # a no-op once reaped (a kill meanwhile)
        await trio.sleep(fault.seconds)
        process.send_signal(signal.SIGCONT)
        self.log(f"SIGCONT {broker.name}")

    async def revoke(self, fault: Fault) -> None:
        broker = await self.target(fault)
        if broker is None:
            self.log(f"revoke {fault.role} of p{fault.partition}: none")
            return
        try:
            with trio.fail_after(3):
                async with self.open_etcd() as etcd:
                    registered = await etcd.get(self.keys.broker(broker.broker_id))
                    if registered is None or not registered.lease:
                        self.log(f"revoke {broker.name}: not registered")
                        return
                    await etcd.revoke(registered.lease)
        except (EtcdUnavailable, EtcdReplyError, trio.TooSlowError) as error:
            self.log(f"revoke {broker.name}: etcd: {type(error).__name__}")
            return
        self.log(f"revoked {broker.name}'s lease ({fault.role} of p{fault.partition})")

    async def revoke_all(self, fault: Fault) -> None:
        del fault
        try:
            with trio.fail_after(3):
                async with self.open_etcd() as etcd:
                    reply = await etcd.call("/v3/lease/leases", {})
                    leases = reply.get("leases") if isinstance(reply, dict) else None
                    for lease in leases if isinstance(leases, list) else []:
                        if isinstance(lease, dict):
                            await etcd.revoke(int(str(lease["ID"])))
        except (EtcdUnavailable, EtcdReplyError, trio.TooSlowError) as error:
            self.log(f"revoke every lease: etcd: {type(error).__name__}")
            return
        self.log(f"revoked every lease ({len(leases) if isinstance(leases, list) else 0})")

    async def stop_etcd(self, fault: Fault) -> None:
        async with self._etcd_lock:
            self.log("etcd stopped")
            await trio.to_thread.run_sync(self.cluster.etcd.stop)
            await trio.sleep(fault.seconds)
            await self.start_etcd()

    async def start_etcd(self) -> None:
        await trio.to_thread.run_sync(self.cluster.etcd.start)
        self.log("etcd started")

    async def move(self, fault: Fault) -> None:
        state = (await self.read_states()).get(fault.partition)
        source = await self.target(fault)
        spare = [
            b.broker_id
            for b in self.cluster.brokers
            if state is not None and b.broker_id not in state.replicas
        ]
        if source is None or not spare:
            self.log(f"move p{fault.partition} off its {fault.role}: no source or no spare broker")
            return
        query = (
            f"/topic/partition/move?topic={TOPIC}&partition={fault.partition}"
            f"&from={source.broker_id}&to={spare[0]}&timeout=5s"
        )
        address = f"{self.cluster.lookupd_host}:{self.cluster.lookupd_http}"
        self.log(f"move p{fault.partition} {source.name} -> {self.cluster.by_id(spare[0]).name}")
        try:
            reply = await http_request(
                "POST", address, query, connect_timeout=2, request_timeout=10
            )
        except HttpClientError as error:
            self.log(f"move p{fault.partition}: {error.reason}")
            return
        self.log(f"move p{fault.partition}: {reply.status} {reply.body[:120]!r}")

    async def kill_lookupd(self, fault: Fault) -> None:
        async with self._lookupd_lock:
            self.log("kill -9 lookupd")
            await trio.to_thread.run_sync(self.cluster.kill_lookupd)
            await trio.sleep(fault.seconds)
            await trio.to_thread.run_sync(self.cluster.start_lookupd)
            self.log("lookupd restarted")

    async def heal(self) -> None:
        """Every process running and none stopped."""
        if any(member.process is None for member in self.cluster.etcd.members):
            async with self._etcd_lock:
                await self.start_etcd()
        for broker in self.cluster.brokers:
            async with self.lock(broker):
                if broker.process is None:
                    await trio.to_thread.run_sync(broker.start)
                else:
                    broker.process.send_signal(signal.SIGCONT)
        if self.cluster.lookupd is None:
            async with self._lookupd_lock:
                await trio.to_thread.run_sync(self.cluster.start_lookupd)
        self.log("healed: every process running")

    async def whole(self) -> bool:
        """Every broker registered, every partition led with every replica in its ISR."""
        self.states.clear()
        await self.read_states()
        try:
            with trio.fail_after(2):
                async with self.open_etcd() as etcd:
                    registered, _ = await etcd.get_prefix(self.keys.brokers)
        except (EtcdUnavailable, EtcdReplyError, trio.TooSlowError):
            return False
        return (
            len(registered) == len(self.cluster.brokers)
            and len(self.states) == self.partitions
            and all(s.leader and sorted(s.isr) == sorted(s.replicas) for s in self.states.values())
        )

    async def until_whole(self) -> float:
        """Seconds until :meth:`whole`, and still whole ``STEADY`` seconds on (leases
        that lapsed in the faults have run out by then).

        Raises:
            trio.TooSlowError: not within ``HEAL_WITHIN``.
        """
        since = time.monotonic()
        whole_since: float | None = None
        with trio.fail_after(HEAL_WITHIN):
            while True:
                if not await self.whole():
                    whole_since = None
                elif whole_since is None:
                    whole_since = time.monotonic()
                elif time.monotonic() - whole_since >= STEADY:
                    self.log("every partition led, every ISR whole")
                    return whole_since - since
                await trio.sleep(0.2)


class SetupFailed(Exception):
    """The cluster did not come up whole: not a finding about trionsq (on a shared
    machine, another process can take a port between its choice and its use)."""


async def until_registered(chaos: Chaos) -> None:
    """Until every broker is registered in etcd.

    Raises:
        SetupFailed: a broker exited, or none registered within 20 s.
    """
    with trio.move_on_after(20):
        while True:
            dead = [
                b.name
                for b in chaos.cluster.brokers
                if b.process is None or b.process.poll() is not None
            ]
            if dead:
                raise SetupFailed(f"{dead} exited at start (see broker.log: a port taken?)")
            async with chaos.open_etcd() as etcd:
                registered, _ = await etcd.get_prefix(chaos.keys.brokers)
            if len(registered) == len(chaos.cluster.brokers):
                return
            await trio.sleep(0.1)
    raise SetupFailed("not every broker registered in etcd within 20 s")


async def run_chaos(
    cluster: LocalCluster, faults: list[Fault], *, partitions: int, replicas: int
) -> tuple[History, ChaosVerdict, list[str]]:
    """Publish through ``faults``, heal, wait for whole ISRs, consume, check."""
    chaos = Chaos(cluster, partitions)
    await until_registered(chaos)
    healed = True
    heal_seconds = 0.0

    async def disrupt(lookup: Lookup, history: History) -> None:
        nonlocal healed, heal_seconds
        del history
        await chaos.run(faults)
        await chaos.heal()
        try:
            heal_seconds = await chaos.until_whole()
        except trio.TooSlowError:
            healed = False
            chaos.log(f"NOT healed within {HEAL_WITHIN}s: {chaos.states}")
        await lookup.refresh()

    history, verdict = await run_history(
        cluster, partitions=partitions, replicas=replicas, disrupt=disrupt
    )
    unhealed = "" if healed else repr(chaos.states)
    return history, ChaosVerdict(verdict, healed, heal_seconds, unhealed), chaos.events
