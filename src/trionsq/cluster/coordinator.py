"""The cluster's one coordinator: a lookupd elected through an etcd lease.

Every lookupd started with ``--etcd-endpoints`` campaigns: it creates the
``coordinator`` key on its own lease only if the key is absent (a transaction), and
the one that succeeds coordinates until its lease goes; the others watch the key
and campaign again when it disappears. The coordinator

- creates replicated topics (placement: ``placement.place_topic``);
- moves a replica from one broker to another (``move_replica``: add, catch up, drop);
- after every change of the live brokers, applies ``placement.reconcile``: a lost
  broker (its lease gone, or a leader registered again since: a restart) leaves
  every ISR, a partition it led gets a new leader from its ISR (the epoch grows),
  an offline partition gets its leader back when an ISR member returns.

Each write compares the partition key's ``mod_revision`` and the coordinator
key's ``create_revision`` (the coordinator epoch), so neither a stale view nor a
deposed coordinator overwrites anything.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

import trio

from .etcd import EtcdUnavailable, LeaseExpired
from .etcd_json import Compare, EtcdReplyError, Op
from .keys import ClusterKeys, CoordinatorInfo, PartitionState, TopicMeta, decode, encode
from .membership import propose_state
from .placement import PlacementError, place_topic, reconcile, with_replica, without_replica
from .view import ClusterView, follow_cluster

if TYPE_CHECKING:
    from collections.abc import Callable

    from .etcd import EtcdClient

__all__ = ["Coordinator", "NotCoordinator"]

log = logging.getLogger("trionsq.cluster")
TXN_OPS: Final = 128
"""etcd's default ``--max-txn-ops``: operations in one transaction's branch."""


class NotCoordinator(Exception):
    """This lookupd does not coordinate now (the coordinator's info, if known)."""

    def __init__(self, coordinator: CoordinatorInfo | None) -> None:
        super().__init__("not the coordinator")
        self.coordinator = coordinator


def _same_counts(topic: str, existing: TopicMeta, wanted: TopicMeta) -> None:
    """An existing topic answers a create with the same counts, and refuses others.

    Raises:
        PlacementError: other partition or replica counts.
    """
    if (existing.partitions, existing.replicas) != (wanted.partitions, wanted.replicas):
        raise PlacementError(
            f"topic {topic} exists with {existing.partitions} partitions and"
            f" {existing.replicas} replicas"
        )


class Coordinator:
    """One lookupd's part in the election, and the coordinator's work once elected."""

    def __init__(
        self, client: EtcdClient, keys: ClusterKeys, me: CoordinatorInfo, ttl: float
    ) -> None:
        self.client = client
        self.keys = keys
        self.me = me
        self.ttl = ttl
        self.view = ClusterView(keys)
        self.epoch = 0
        """The coordinator key's create revision while this lookupd coordinates; 0 when not."""
        self._changed = trio.Event()
        self.elections = 0
        """Leader changes this coordinator wrote (for /stats and tests)."""

    @property
    def leading(self) -> bool:
        """Whether this lookupd coordinates now."""
        return self.epoch != 0 and self.view.coordinator_revision == self.epoch

    def _on_change(self) -> None:
        """Wake every waiter (each waits on the event current when it started)."""
        self._changed.set()
        self._changed = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Follow the cluster and campaign until cancelled; then close the etcd
        client's kept connections (this task owns the client)."""
        async with self.client, trio.open_nursery() as nursery:
            await nursery.start(follow_cluster, self.client, self.view, self._on_change)
            task_status.started()
            while True:
                await self._campaign()

    async def wait_change(self) -> None:
        """Until the view changes next."""
        await self._changed.wait()

    async def _campaign(self) -> None:
        """One attempt: win and coordinate until the lease is lost, or wait for the
        coordinator key to go."""
        try:
            lease = await self.client.grant(self.ttl)
            key = self.keys.coordinator
            reply = await self.client.txn(
                [Compare(key, "CREATE", "EQUAL", 0)], [Op("put", key, encode(self.me), lease=lease)]
            )
        except (EtcdUnavailable, EtcdReplyError) as error:
            log.warning("coordinator campaign failed: %s", error)
            await trio.sleep(self.ttl / 10)
            return
        if not reply.succeeded:
            try:
                await self.client.revoke(lease)
            except (EtcdUnavailable, EtcdReplyError) as error:  # it expires by itself
                log.info("coordinator campaign: lease %x not revoked: %s", lease, error)
            while self.view.coordinator is not None or not self.view.connected:
                await self.wait_change()
            return
        self.epoch = reply.revision
        self._on_change()  # `leading` may hold now (if the watch brought the key first)
        log.info("%s coordinates cluster %s (epoch %d)", self.me.id, self.keys.cluster, self.epoch)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._reconcile_forever)
                # caught here, in the nursery's body: raised out of it, the error
                # would come wrapped in an ExceptionGroup and end the lookupd
                try:
                    await self.client.keep_alive(lease, self.ttl, lambda: None)
                except LeaseExpired:
                    log.warning("%s lost the coordinator lease", self.me.id)
                nursery.cancel_scope.cancel()
        finally:
            self.epoch = 0
            self._on_change()

    async def _reconcile_forever(self) -> None:
        while True:
            # the event current *before* reconciling: a change that comes while the
            # writes await has set it, and is reconciled at once (waiting for the next
            # event would miss it, and nothing may change again)
            changed = self._changed
            if self.leading:
                await self.reconcile_once()
            await changed.wait()

    async def reconcile_once(self) -> None:
        """Write every partition change the live brokers call for."""
        view = self.view
        changes = reconcile(view.partitions, view.revisions, view.registered)
        for where, state in sorted(changes.items()):
            old = view.partitions[where]
            try:
                written = await propose_state(
                    self.client,
                    self.keys,
                    where,
                    state,
                    view.revisions[where],
                    coordinator_revision=self.epoch,
                )
            except EtcdUnavailable as error:
                log.warning("etcd unreachable while moving %s/%d: %s", *where, error)
                return  # the next change (or reconnection) tries again
            if written and state.leader != old.leader:
                self.elections += 1
                log.info(
                    "partition %s/%d: leader %s -> %s (epoch %d, ISR %s)",
                    *where,
                    old.leader or "-",
                    state.leader or "-",
                    state.epoch,
                    ",".join(state.isr),
                )
            if not written:
                return  # someone changed it meanwhile: the watch brings it, then again

    async def create_topic(self, topic: str, meta: TopicMeta) -> list[PartitionState]:
        """Place and record a replicated topic; returns its partitions.

        An existing topic with the same counts is answered as it is.

        Raises:
            NotCoordinator: another lookupd coordinates.
            PlacementError: too few live brokers, or the topic exists with other counts.
            EtcdUnavailable: etcd did not answer.
        """
        if not self.leading:
            raise NotCoordinator(self.view.coordinator)
        existing = self.view.topics.get(topic)
        if existing is not None:
            _same_counts(topic, existing, meta)
            return [state for _, state in self.view.topic_partitions(topic)]
        placed = place_topic(
            meta.partitions, meta.replicas, self.view.brokers, self.view.partitions.values()
        )
        meta_key = self.keys.topic_meta(topic)
        puts = [Op("put", self.keys.partition(topic, n), encode(s)) for n, s in enumerate(placed)]
        compare = [
            Compare(meta_key, "CREATE", "EQUAL", 0),
            Compare(self.keys.coordinator, "CREATE", "EQUAL", self.epoch),
        ]
        # etcd takes at most TXN_OPS operations a transaction: the partitions go ahead
        # in parts, and the meta key, which makes the topic exist, comes last
        while len(puts) >= TXN_OPS:
            ahead, puts = puts[:TXN_OPS], puts[TXN_OPS:]
            if not (await self.client.txn(compare, ahead)).succeeded:
                break  # created meanwhile, or deposed: the last transaction tells
        partitions_prefix = self.keys.partition(topic, 0)[:-1]
        reply = await self.client.txn(
            compare,
            [Op("put", meta_key, encode(meta)), *puts],
            [Op("range", meta_key), Op("range", partitions_prefix, prefix=True)],
        )
        if not reply.succeeded:
            found, states = reply.ranges
            if not found:
                raise NotCoordinator(self.view.coordinator)  # deposed meanwhile
            _same_counts(topic, decode(found[0].value, TopicMeta), meta)
            by_index = {self.keys.parse_topic_key(kv.key): kv for kv in states}
            return [
                decode(by_index[topic, n].value, PartitionState)
                for n in range(meta.partitions)
                if (topic, n) in by_index
            ]
        log.info("created replicated topic %s: %s", topic, meta)
        return placed

    async def move_replica(
        self, topic: str, index: int, source: str, target: str, *, within: float
    ) -> PartitionState:
        """Move partition ``index`` of ``topic`` from broker ``source`` to ``target``:
        ``target`` becomes a replica, copies the partition from its leader and joins
        the ISR; then ``source`` leaves (its leadership too, to the next in-sync
        replica). Returns the partition's state once moved.

        Raises:
            NotCoordinator: another lookupd coordinates.
            PlacementError: no such partition, ``source`` holds none, ``target`` is not
                live or holds one, or ``target`` did not catch up ``within`` seconds
                (it stays a replica then, outside the ISR: move it away again, or wait).
            EtcdUnavailable: etcd did not answer.
        """
        where = (topic, index)
        await self._write_step(where, lambda state: self._added(topic, state, source, target))
        with trio.move_on_after(within):
            while target not in self._state(where).isr:
                await self.wait_change()
        if target not in self._state(where).isr:
            raise PlacementError(
                f"broker {target} did not catch up within {within:g}s; it stays a replica"
                " outside the ISR"
            )
        return await self._write_step(where, lambda state: without_replica(state, source))

    def _state(self, where: tuple[str, int]) -> PartitionState:
        if not self.leading:
            raise NotCoordinator(self.view.coordinator)
        state = self.view.partitions.get(where)
        if state is None:
            raise PlacementError(f"no replicated partition {where[0]}/{where[1]}")
        return state

    def _added(self, topic: str, state: PartitionState, source: str, target: str) -> PartitionState:
        if source not in state.replicas:
            raise PlacementError(f"broker {source} holds no replica")
        meta = self.view.topics.get(topic)
        moving = meta is not None and len(state.replicas) > meta.replicas
        if moving and target in state.replicas:
            return state  # this move asked again after its first step: go on from there
        return with_replica(state, target, self.view.registered)

    async def _write_step(
        self, where: tuple[str, int], step: Callable[[PartitionState], PartitionState]
    ) -> PartitionState:
        """Write ``step`` of the partition's state as the view has it now, again
        whenever another write came first (the watch brings it)."""
        while True:
            state = self._state(where)
            wanted = step(state)
            if wanted == state:
                return state
            revision = self.view.revisions[where]
            if await propose_state(
                self.client, self.keys, where, wanted, revision, coordinator_revision=self.epoch
            ):
                while self.view.revisions.get(where, 0) <= revision:
                    await self.wait_change()  # answered from the view, as /lookup is
                log.info("partition %s/%d: replicas %s", *where, ",".join(wanted.replicas))
                return wanted
            await self.wait_change()
