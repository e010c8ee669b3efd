"""A broker's part in a replicated cluster: the hook the broker calls, and the roles.

Started by nursery_tree.py when ``--etcd-endpoints`` is given. It registers the
broker on an etcd lease, follows the cluster's keys, and for every partition of a
replicated topic that names this broker a replica it keeps one role: the leader's
(:class:`~.roles.LeaderRole`: the follower streams of ``leader_streams.py``, the
ISR upkeep here) or a follower's (``follower_stream.py``). A role lasts one epoch:
when etcd names another leader or epoch, the old role ends (its waiting publishers
get ``E_FAILED_ON_NOT_LEADER``) and the new one starts.

As the broker's :class:`~trionsq.broker.replication.ReplicationHook` it refuses
writes this broker may not take (not the leader; fewer in-sync replicas than the
topic's ``min_isr``; no lease renewal for a TTL, when another leader may already
have been elected), and makes publishers wait for their records' commit.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import TYPE_CHECKING, Final

import trio

from ..addresses import peer_address
from ..broker.replica_state import capture_consumer_state
from ..broker.replication import not_leader, not_writable
from ..persist import read_optional, write_atomic
from ..protocol.replication import Refuse, encode
from .epochs import EpochHistory
from .etcd import EtcdClient, EtcdUnavailable
from .follower_stream import LEADER_WITHOUT_ROOM, follow
from .keys import BrokerInfo, ClusterKeys, PartitionState
from .leader_streams import serve_follower
from .membership import Registration, propose_state
from .placement import PlacementError, with_isr
from .roles import FollowerRole, LeaderRole, PartitionFiles
from .view import ClusterView, follow_cluster

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..broker.broker import Broker
    from ..config import NsqdConfig
    from ..server.admission import ConnectionGate

__all__ = ["ReplicaManager"]

log = logging.getLogger("trionsq.cluster")

Role = LeaderRole | FollowerRole
STATE_INTERVAL: Final = 0.1
"""Seconds between captures of the consumer state a leader ships: after a failover a
channel redelivers what was in flight and what was finished in the last one."""
UPKEEP_SHARE: Final = 4
"""The ISR upkeep runs this many times per ``replica_lag_time``."""


class ReplicaManager:
    """Roles of this broker's replicas, kept in step with etcd."""

    def __init__(
        self, broker: Broker, config: NsqdConfig, info: BrokerInfo, gate: ConnectionGate
    ) -> None:
        """``gate``: the broker's descriptor budget, which holds the replication
        connections (claimed for the roles, admitted one by one)."""
        self.broker = broker
        self.gate = gate
        self.config = config
        self.me = info.id
        self.keys = ClusterKeys(config.cluster_id)
        self.client = EtcdClient(
            config.etcd_urls,
            timeout=min(2.0, config.cluster_lease_ttl / 2),
            access=config.etcd_access,
            probe_key=self.keys.root,
        )
        self.registration = Registration(self.client, self.keys, info, config.cluster_lease_ttl)
        self.view = ClusterView(self.keys)
        self.roles: dict[tuple[str, int], Role] = {}
        self.files: dict[tuple[str, int], PartitionFiles] = {}
        self._nursery: trio.Nursery | None = None
        self._upkeep_now = trio.Event()
        """Set when a follower caught up: the ISR upkeep need not wait for its period."""
        self._lowest_led: dict[str, int | None] = {}
        """:meth:`default_partition` of each topic asked, until the roles change."""

    # ------------------------------------------------------------------ the hook

    def replicated(self, topic: str) -> bool:
        return topic in self.view.topics

    def check_write(self, topic: str, partition: int) -> None:
        meta = self.view.topics.get(topic)
        if meta is None:
            return
        role = self.roles.get((topic, partition))
        if not isinstance(role, LeaderRole) or role.lost:
            raise not_leader(f"{topic}/{partition} is led by another broker")
        if self.registration.fenced():
            raise not_writable(
                "no etcd lease renewal within the TTL: another leader may be elected"
            )
        if len(role.progress.counted) + 1 < meta.min_isr:
            raise not_writable(
                f"{topic}/{partition} has fewer than {meta.min_isr} in-sync replicas"
            )

    def default_partition(self, topic: str) -> int | None:
        if topic not in self.view.topics:
            return None
        if topic in self._lowest_led:  # found again after each change of the roles
            return self._lowest_led[topic]
        led = self._lowest_led[topic] = min(
            (
                index
                for (name, index), role in self.roles.items()
                if name == topic and isinstance(role, LeaderRole) and not role.lost
            ),
            default=None,
        )
        return led

    def check_read(self, topic: str, partition: int) -> None:
        if topic not in self.view.topics:
            return
        role = self.roles.get((topic, partition))
        if not isinstance(role, LeaderRole) or role.lost:
            raise not_leader(f"consume {topic}/{partition} from its leader")

    def appended(self, topic: str, partition: int) -> None:
        role = self.roles.get((topic, partition))
        if isinstance(role, LeaderRole):
            role.appended()

    def reached(self, topic: str, partition: int, end: int) -> bool:
        role = self.roles.get((topic, partition))
        if not isinstance(role, LeaderRole) or role.lost:
            raise not_leader(f"{topic}/{partition}: leadership moved")
        return role.progress.committed >= end

    def on_commit(self, topic: str, partition: int, callback: Callable[[], None]) -> None:
        role = self.roles.get((topic, partition))
        if isinstance(role, LeaderRole) and not role.lost:
            role.callbacks.append(callback)
        else:
            callback()  # it learns of the refusal from reached()

    async def committed(self, topic: str, partition: int, end: int) -> None:
        role = self.roles.get((topic, partition))
        if not isinstance(role, LeaderRole):
            raise not_leader(f"{topic}/{partition}: leadership moved")
        await role.wait_committed(end)

    def partition_status(self, topic: str, partition: int) -> dict[str, object] | None:
        state = self.view.partitions.get((topic, partition))
        if state is None or topic not in self.view.topics:
            return None
        role = self.roles.get((topic, partition))
        status: dict[str, object] = {
            "role": role.kind if role is not None else "none",
            "epoch": state.epoch,
            "leader": state.leader,
            "isr": list(state.isr),
            "replicas": list(state.replicas),
            "min_isr": self.view.topics[topic].min_isr,
        }
        if isinstance(role, LeaderRole):
            progress = role.progress
            status["commit_count"] = progress.committed - 1
            status["commit_offset"] = role.partition.log.offset_of(progress.committed)
            status["followers"] = [
                {
                    "id": follower,
                    "in_sync": follower in progress.isr,
                    "acked_count": progress.acked.get(follower, 1) - 1,
                    "lag_count": progress.end - progress.acked.get(follower, 1),
                }
                for follower in state.followers
            ]
        elif isinstance(role, FollowerRole):
            status["connected"] = role.connected
            status["commit_count"] = max(role.files.committed - 1, 0)
            status["fetched_bytes"] = role.fetched
        return status

    def degraded(self) -> str | None:
        if not self.view.connected:
            return "etcd unreachable: serving with the leadership last known"
        if self.registration.fenced():
            return "etcd lease not renewed: leaderships may have moved"
        if self.client.refused:
            return f"etcd refuses this broker, serving with the leadership it has: {self.client.refused}"
        return self.gate.replication_waiting()

    # ------------------------------------------------------------------ tasks

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register, follow etcd, keep the roles, until cancelled (then the roles end
        and the lease is revoked, so the cluster moves leaderships at once, and the
        etcd client's kept connections close: this task owns them)."""
        async with self.client, trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                await nursery.start(self.registration.run)
                await nursery.start(follow_cluster, self.client, self.view, self._changed)
                nursery.start_soon(self._upkeep_forever)
                nursery.start_soon(self._ship_state_forever)
                task_status.started()
                await trio.sleep_forever()
            finally:
                for role in self.roles.values():
                    role.end()
                self.roles.clear()
                self._lowest_led.clear()
                self.gate.budget.claim_replication(0)

    async def serve_replication(self, stream: trio.SocketStream) -> None:
        """One follower's connection to this broker's replication listener, if the
        descriptor budget admits it; else refused at once (the follower tries again)."""
        if not self.gate.admit_replication(f"a follower from {peer_address(stream.socket)}"):
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await stream.send_all(encode(Refuse(LEADER_WITHOUT_ROOM)))
            await trio.aclose_forcefully(stream)
            return
        try:
            await serve_follower(
                stream, self._leader_role, heartbeat=self.config.cluster_lease_ttl / 3
            )
        finally:
            self.gate.replication_closed()

    def _leader_role(self, topic: str, partition: int) -> LeaderRole | None:
        role = self.roles.get((topic, partition))
        return role if isinstance(role, LeaderRole) else None

    def _changed(self) -> None:
        """The view changed: bring every role in step (no await: runs in the watch)."""
        self._lowest_led.clear()
        wanted = {
            where: state
            for where, state in self.view.partitions.items()
            if self.me in state.replicas and where[0] in self.view.topics
        }
        for where in list(self.roles):
            if where not in wanted:
                self._end_role(where)
        for where, state in sorted(wanted.items()):
            self._keep_role(where, state)
        self.gate.budget.claim_replication(
            sum(
                len(role.state.followers) if isinstance(role, LeaderRole) else 1
                for role in self.roles.values()
            )
        )

    def _keep_role(self, where: tuple[str, int], state: PartitionState) -> None:
        role = self.roles.get(where)
        kind = "leader" if state.leader == self.me else "follower" if state.leader else ""
        if kind == "leader" and self.view.revisions.get(where, 0) < self.registration.revision:
            # named leader before this broker (re)started: what it led in memory is gone,
            # and the coordinator, seeing the new lease, will elect again
            kind = ""
        previous = role.state if role is not None else None
        if previous is not None and previous.isr != state.isr:
            self._isr_events(where, previous.isr, state.isr)
        if previous is not None and previous.leader != state.leader:
            self.broker.events.emit(
                "partition",
                "leader_changed",
                where[0],
                partition=where[1],
                leader=state.leader,
                previous=previous.leader,
                epoch=state.epoch,
            )
        if role is not None and role.kind == kind and role.epoch == state.epoch:
            revision = self.view.revisions.get(where, 0)
            if isinstance(role, LeaderRole) and revision > role.revision:
                # a newer write confirms the ISR even when it is unchanged: a join it
                # lacks was not taken, and stops being counted
                role.revision = revision
                role.confirm(state)
            role.state = state
            return
        if role is not None:
            self._end_role(where)
        if not kind:
            return
        topic, index = where
        meta = self.view.topics[topic]
        local = self.broker.topic(
            topic, partitions=meta.partitions, ext=meta.ext, ordered=meta.ordered
        )
        if self.broker.storage is not None:
            self.broker.storage.changed()  # metadata.json holds the topic
        partition = local.partitions[index]
        files = self._files(where)
        assert self._nursery is not None  # noqa: S101 - roles start once running
        if kind == "leader":
            self.roles[where] = LeaderRole(
                self.me,
                partition,
                state,
                files,
                max_lag=self.config.replica_lag_time,
                wake_readers=functools.partial(self._wake_readers, topic, index),
                caught_up=self._catch_up_seen,
                revision=self.view.revisions.get(where, 0),
            )
            self._save(where)
            log.info(
                "%s/%d: leading in epoch %d (ISR %s)",
                topic,
                index,
                state.epoch,
                ",".join(state.isr),
            )
            return
        partition.set_commit_end(None)
        follower = FollowerRole(partition, state, files)
        self.roles[where] = follower
        self._nursery.start_soon(self._follow, follower, state.leader, where)

    def _end_role(self, where: tuple[str, int]) -> None:
        """Stop a role; a leadership's end also closes the partition's consumers (a
        follower delivers nothing: the leader's shipped state would rewind it)."""
        role = self.roles.pop(where)
        role.end()
        self._lowest_led.clear()
        if not isinstance(role, LeaderRole):
            return
        topic = self.broker.topics.get(where[0])
        if topic is None or where[1] >= len(topic.partitions):
            return
        for channel in topic.partitions[where[1]].channels.values():
            for consumer in list(channel.consumers.values()):
                if consumer.outbox is not None:
                    consumer.outbox.leadership_lost()

    def _isr_events(
        self, where: tuple[str, int], before: tuple[str, ...], after: tuple[str, ...]
    ) -> None:
        """Admin stream events: each replica that joined or left the ISR."""
        for replica in after:
            if replica not in before:
                self.broker.events.emit(
                    "partition", "replica_joined_isr", where[0], partition=where[1], replica=replica
                )
        for replica in before:
            if replica not in after:
                self.broker.events.emit(
                    "partition", "replica_left_isr", where[0], partition=where[1], replica=replica
                )

    async def _follow(self, role: FollowerRole, leader: str, where: tuple[str, int]) -> None:
        def leader_address() -> str | None:
            info = self.view.brokers.get(leader)
            return info.replication_address if info is not None else None

        with role.scope:
            await follow(
                self.broker,
                self.me,
                role,
                leader_address,
                functools.partial(self._save, where),
                self.gate,
            )

    def _catch_up_seen(self) -> None:
        self._upkeep_now.set()

    def _wake_readers(self, topic: str, index: int) -> None:
        partition = self.broker.topics[topic].partitions[index]
        for name, channel in partition.channels.items():
            if channel.consumers:
                runner = partition.drivers.get(name)
                if runner is not None:
                    runner.wake()

    # ------------------------------------------------------------------ epochs files

    def _epochs_path(self, where: tuple[str, int]) -> str | None:
        storage = self.broker.storage
        if storage is None or storage.directory is None:
            return None
        return str(storage.directory / f"{where[0]}-{where[1]}.epochs")

    def _files(self, where: tuple[str, int]) -> PartitionFiles:
        files = self.files.get(where)
        if files is None:
            path = self._epochs_path(where)
            data = read_optional(path) if path is not None else None
            files = self.files[where] = PartitionFiles(EpochHistory.loads(data or b"[]"))
        return files

    def _save(self, where: tuple[str, int]) -> None:
        path = self._epochs_path(where)
        if path is not None:
            write_atomic(path, self.files[where].history.dumps())

    # ------------------------------------------------------------------ consumer state

    async def _ship_state_forever(self) -> None:
        """Every :data:`STATE_INTERVAL`: each led partition's consumer state, which the
        follower streams send when it changed (broker/replica_state.py); not of one
        with no follower (replicas=1), where capturing it would cost the consumers
        for nothing (a follower added later gets it at the next capture)."""
        while True:
            await trio.sleep(STATE_INTERVAL)
            for (topic, index), role in list(self.roles.items()):
                if isinstance(role, LeaderRole) and not role.lost and role.state.followers:
                    role.ship_state(capture_consumer_state(self.broker, topic, index))

    # ------------------------------------------------------------------ ISR upkeep

    async def _upkeep_forever(self) -> None:
        """Every share of the lag time: each led partition's lagging followers leave
        its ISR, caught-up ones join it (through etcd, compared on the key's revision)."""
        while True:
            with trio.move_on_after(self.config.replica_lag_time / UPKEEP_SHARE):
                await self._upkeep_now.wait()
            self._upkeep_now = trio.Event()
            for where, role in list(self.roles.items()):
                if isinstance(role, LeaderRole) and not role.lost:
                    try:
                        await self._upkeep(where, role)
                    except EtcdUnavailable as error:
                        log.info("ISR upkeep skipped, etcd unreachable: %s", error)
                        break

    async def _upkeep(self, where: tuple[str, int], role: LeaderRole) -> None:
        progress = role.progress
        now = trio.current_time()
        lagging = set(progress.lagging(now))
        joining = progress.caught_up(role.state.replicas)
        # proposed before but not in etcd's ISR yet: proposed again (a write etcd took
        # is confirmed by the watch, which ends the asking)
        again = [r for r in progress.unconfirmed() if r not in lagging]
        if not lagging and not joining and not again:
            return
        isr = [r for r in role.state.isr if r not in lagging] + again + joining
        for follower in joining:
            progress.propose_join(follower)
        try:
            proposed = with_isr(role.state, isr)
        except PlacementError:
            return
        revision = self.view.revisions.get(where, 0)
        if await propose_state(self.client, self.keys, where, proposed, revision):
            log.info(
                "%s/%d: ISR %s -> %s", *where, ",".join(role.state.isr), ",".join(proposed.isr)
            )
