"""A broker's place in the cluster: its registration on a lease, and ISR proposals.

A broker registers ``brokers/<id>`` on a lease it renews every third of the TTL;
if it dies the key goes within the TTL and the coordinator moves its leaderships.
``renewed_at`` tells how fresh the broker's hold is: a leader whose last renewal
is older than the TTL may already be replaced, so it stops acknowledging
(``fenced``) until it renews again.
"""

from __future__ import annotations

import logging

import attrs
import trio

from .etcd import EtcdClient, EtcdUnavailable, LeaseExpired
from .etcd_json import Compare, EtcdReplyError, Op
from .keys import BrokerInfo, ClusterKeys, PartitionState, encode

__all__ = ["Registration", "propose_state"]

log = logging.getLogger("trionsq.cluster")


@attrs.define(eq=False)
class Registration:
    """The broker's key on its lease, renewed until the task is cancelled."""

    client: EtcdClient
    keys: ClusterKeys
    info: BrokerInfo
    ttl: float
    lease: int = attrs.field(default=0, init=False)
    revision: int = attrs.field(default=0, init=False)
    """The etcd revision of the latest registration: a partition state older than
    it was decided before the coordinator knew of this (re)start."""
    renewed_at: float = attrs.field(default=-float("inf"), init=False)
    """Trio time of the last grant or renewal etcd confirmed."""

    def fenced(self) -> bool:
        """Whether the lease may have expired in etcd (no renewal for a TTL)."""
        return trio.current_time() - self.renewed_at >= self.ttl

    def _renewed(self) -> None:
        self.renewed_at = trio.current_time()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register, keep the lease alive, register again if etcd dropped it; revoke
        the lease on the way out so the cluster need not wait for it to expire."""
        started = False
        try:
            while True:
                try:
                    granted_at = trio.current_time()
                    self.lease = await self.client.grant(self.ttl)
                    key = self.keys.broker(self.info.id)
                    self.revision = await self.client.put(key, encode(self.info), lease=self.lease)
                    self.renewed_at = granted_at
                except (EtcdUnavailable, EtcdReplyError) as error:
                    log.warning("cannot register broker %s in etcd: %s", self.info.id, error)
                    await trio.sleep(self.ttl / 10)
                    continue
                if not started:
                    task_status.started()
                    started = True
                try:
                    await self.client.keep_alive(self.lease, self.ttl, self._renewed)
                except LeaseExpired:
                    log.warning("broker %s lost its etcd lease: registering again", self.info.id)
        finally:
            await self._revoke()

    async def _revoke(self) -> None:
        if not self.lease:
            return
        with trio.move_on_after(1.0) as scope:
            scope.shield = True
            try:
                await self.client.revoke(self.lease)
            except (EtcdUnavailable, EtcdReplyError) as error:
                log.info("could not revoke lease at exit (it expires by itself): %s", error)


async def propose_state(
    client: EtcdClient,
    keys: ClusterKeys,
    where: tuple[str, int],
    state: PartitionState,
    revision: int,
    *,
    coordinator_revision: int = 0,
) -> bool:
    """Write ``state`` if the partition key is still at ``revision`` (and, for the
    coordinator, if the coordinator key still has the create revision
    ``coordinator_revision``); whether it was written.

    Raises:
        EtcdUnavailable: no etcd member answered.
    """
    key = keys.partition(*where)
    compare = [Compare(key, "MOD", "EQUAL", revision)]
    if coordinator_revision:
        compare.append(Compare(keys.coordinator, "CREATE", "EQUAL", coordinator_revision))
    try:
        reply = await client.txn(compare, [Op("put", key, encode(state))])
    except EtcdReplyError as error:
        log.warning("partition %s/%d: etcd refused the change: %s", *where, error)
        return False
    return reply.succeeded
