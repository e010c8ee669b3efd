"""What the TubeMQ master and broker services share: who is registered, who holds
which partition, and the one timer that ends what stopped being renewed.

One trionsq process plays both of TubeMQ's roles, so the master's view (producers,
consumers, their rebalance events) and the broker's (each partition's holder, its
pack, its pull waiting) live in one :class:`TubeNode`. Its deadlines are TubeMQ's:
a producer or consumer the master has not heard from for :data:`LEASE` seconds is
gone (a consumer's seats leave its group, and their partitions are dealt again), and
so is a consumer's hold on a partition it did not renew at the broker (its pack goes
back). One :class:`~trionsq.dispatch.expiry.ExpiryTimer` task sleeps until the
earliest of them, and until the deadline of a pull waiting for the router.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Final

import attrs
import trio

from ..broker.statistics import ClientStatistics, PubCount
from ..dispatch.expiry import ExpiryTimer
from ..protocol.tubemq_formats import PartitionRef, broker_info
from .auth import TubeAuth
from .groups import GroupAdapter, Seat
from .leases import LeaseTable
from .pulls import rollback

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ..broker.broker import Broker
    from ..config import NsqdConfig

__all__ = [
    "LEASE",
    "PULL_WAIT",
    "ConsumerSession",
    "Hold",
    "Identity",
    "ProducerSession",
    "TubeNode",
    "hold_lease",
]

log = logging.getLogger("trionsq.tubemq")

LEASE: Final = 30.0
"""Seconds without a heartbeat after which TubeMQ drops a producer or consumer
(master) or a consumer's hold on a partition (broker): its defaults, 30 s each."""
PULL_WAIT: Final = 1.0
"""Longest a pull waits for the router when the partition has messages for it (a
disk read under way); then it is answered NOT_FOUND and the client pulls again."""


@attrs.frozen
class Identity:
    """This broker as TubeMQ clients address it."""

    broker_id: int
    host: str
    port: int
    """The broker service's port."""
    checksum: int
    """``brokerCheckSum``: changes only when the broker list does (never while running)."""
    visit_token: int
    """``visitAuthorizedToken``: handed out by the master, expected at the broker."""

    @property
    def info(self) -> str:
        return broker_info(self.broker_id, self.host, self.port)

    def partition(self, topic: str, partition: int) -> PartitionRef:
        return PartitionRef(self.broker_id, self.host, self.port, topic, partition)


@attrs.define(eq=False)
class ProducerSession:
    """A registered TubeMQ producer, listed in /stats as a publishing client."""

    client_id: int
    producer_id: str
    host: str
    remote_address: str
    topics: set[str] = attrs.field(init=False, factory=set)
    pub_counts: dict[str, int] = attrs.field(init=False, factory=dict)
    connected_at: int = attrs.field(init=False, factory=lambda: int(time.time()))

    def statistics(self) -> ClientStatistics:
        return ClientStatistics(
            client_id=str(self.client_id),
            hostname=self.host,
            version="tubemq",
            remote_address=self.remote_address,
            state=0,
            connect_ts=self.connected_at,
            user_agent=f"tubemq producer {self.producer_id}",
            pub_counts=tuple(PubCount(t, n) for t, n in sorted(self.pub_counts.items())),
        )


@attrs.define(eq=False)
class RebalanceEvent:
    """A CONNECT or DISCONNECT sent in a heartbeat reply, until the consumer reports it."""

    rebalance_id: int
    op: int
    partitions: list[tuple[str, int]]


@attrs.define(eq=False)
class ConsumerSession:
    """A TubeMQ consumer registered with the master: its seats in its group (one per
    partition of each topic), what it reported holding, the event it has to do."""

    consumer_id: str
    group: str
    host: str
    remote_address: str
    topics: tuple[str, ...] = attrs.field(init=False, default=())
    seats: dict[tuple[str, int], Seat] = attrs.field(init=False, factory=dict)
    held: set[tuple[str, int]] = attrs.field(init=False, factory=set)
    """The partitions the consumer last reported it consumes (subscribeInfo)."""
    event: RebalanceEvent | None = attrs.field(init=False, default=None)


@attrs.define(eq=False)
class Hold:
    """A consumer's registration on a partition at the broker (exclusive in its group)."""

    consumer: ConsumerSession
    seat: Seat


HoldKey = tuple[str, str, int]
"""(group, topic, partition)."""


def hold_lease(key: HoldKey) -> tuple[str, ...]:
    """The lease key of a hold."""
    return ("hold", key[0], key[1], str(key[2]))


class TubeNode:
    """The TubeMQ face's state, shared by the master and broker services."""

    def __init__(
        self,
        broker: Broker,
        config: NsqdConfig,
        identity: Identity,
        client_ids: Iterator[int],
        *,
        lease: float = LEASE,
    ) -> None:
        self.broker = broker
        self.config = config
        self.identity = identity
        self.groups = GroupAdapter(broker)
        self.auth = TubeAuth(config, identity.visit_token)
        self.lease = lease
        self._client_ids = client_ids
        self.producers: dict[str, ProducerSession] = {}
        self.consumers: dict[tuple[str, str], ConsumerSession] = {}
        """(group, consumer id) -> the consumer."""
        self.holds: dict[HoldKey, Hold] = {}
        self.fresh: set[HoldKey] = set()
        """Partitions of groups that had no channel on the topic before their first
        consumer came: the first hold places the group there by its ``readStatus``
        (the oldest or the latest message) instead of where the channel began."""
        self.leases: LeaseTable[tuple[str, ...]] = LeaseTable()
        """("producer", id), ("consumer", group, id), ("hold", group, topic, partition)."""
        self.pulls: LeaseTable[Seat] = LeaseTable()
        """Seats whose pull waits for the router, until when."""
        self.answer_late: Callable[[Seat], None] = lambda seat: None
        """How a pull that waited past its deadline is answered (the broker service's)."""
        self.timer = ExpiryTimer()
        self._rebalance_ids = iter(range(int(time.time() * 1000), 2**62))

    def next_client_id(self) -> int:
        """A client id from the broker's own sequence, so /stats never shows two alike."""
        return next(self._client_ids)

    def next_rebalance_id(self) -> int:
        return next(self._rebalance_ids)

    def renew(self, key: tuple[str, ...]) -> None:
        """``key`` was heard from: it lives another :attr:`lease` seconds."""
        deadline = trio.current_time() + self.lease
        self.leases.set(key, deadline)
        self.timer.schedule(deadline)

    def wait_pull(self, seat: Seat, deadline: float) -> None:
        self.pulls.set(seat, deadline)
        self.timer.schedule(deadline)

    # ---------------------------------------------------------------- producers

    def producer(self, producer_id: str, host: str, remote_address: str) -> ProducerSession:
        """The producer's session, made (and listed in /stats) on first sight."""
        session = self.producers.get(producer_id)
        if session is None:
            session = ProducerSession(self.next_client_id(), producer_id, host, remote_address)
            self.producers[producer_id] = session
            self.broker.register_client(session.client_id, session, remote_address)
        self.renew(("producer", producer_id))
        return session

    def drop_producer(self, producer_id: str) -> None:
        session = self.producers.pop(producer_id, None)
        self.leases.drop(("producer", producer_id))
        if session is not None:
            self.broker.unregister_client(session.client_id)

    # ---------------------------------------------------------------- consumers

    async def seat_consumer(self, session: ConsumerSession, topics: tuple[str, ...]) -> None:
        """Give the consumer a seat on every partition of its topics (new topics and
        partitions added since included): each a standby member of the group."""
        session.topics = topics
        for topic in topics:
            count = self.groups.topic_partitions(topic) or 0
            if not self.groups.group_exists(topic, session.group):
                self.fresh.update((session.group, topic, p) for p in range(count))
            for partition in range(count):
                if (topic, partition) in session.seats:
                    continue
                seat = Seat(
                    self.next_client_id(),
                    session.consumer_id,
                    session.group,
                    topic,
                    partition,
                    host=session.host,
                    remote_address=session.remote_address,
                )
                session.seats[(topic, partition)] = seat
                await self.groups.join(seat, self.config.max_msg_timeout)
                self.broker.register_client(seat.client_id, seat, session.remote_address)

    def drop_consumer(self, session: ConsumerSession) -> None:
        """The consumer closed or went silent: its holds end (packs go back) and its
        seats leave the group, whose partitions are dealt again."""
        key = (session.group, session.consumer_id)
        if self.consumers.get(key) is not session:
            return
        del self.consumers[key]
        self.leases.drop(("consumer", *key))
        for (topic, partition), seat in session.seats.items():
            hold_key = (session.group, topic, partition)
            hold = self.holds.get(hold_key)
            if hold is not None and hold.consumer is session:
                self.release(hold_key)
            rollback(seat)
            self.answer_late(seat)
            if seat.subscription is not None:
                seat.subscription.leave()
            self.broker.unregister_client(seat.client_id)
        session.seats.clear()

    def release(self, key: HoldKey) -> Hold | None:
        """End a hold: its unconfirmed pack goes back to the channel."""
        hold = self.holds.pop(key, None)
        self.leases.drop(hold_lease(key))
        if hold is not None:
            rollback(hold.seat)
            self.answer_late(hold.seat)  # a pull waiting on it gets its answer now
        return hold

    # ---------------------------------------------------------------- the timer

    def next_deadline(self) -> float | None:
        deadlines = [d for d in (self.leases.next_deadline(), self.pulls.next_deadline()) if d]
        return min(deadlines) if deadlines else None

    def fire(self, now: float) -> None:
        """End what was not renewed by ``now``; answer pulls that waited long enough."""
        for seat in self.pulls.pop_expired(now):
            self.answer_late(seat)
        for key in self.leases.pop_expired(now):
            kind, *rest = key
            if kind == "producer":
                log.info("TubeMQ producer %s: no heartbeat for %gs, removed", rest[0], self.lease)
                self.drop_producer(rest[0])
            elif kind == "consumer":
                session = self.consumers.get((rest[0], rest[1]))
                if session is not None:
                    log.info(
                        "TubeMQ consumer %s of group %s: no heartbeat for %gs, removed",
                        rest[1],
                        rest[0],
                        self.lease,
                    )
                    self.drop_consumer(session)
            else:
                hold = self.release((rest[0], rest[1], int(rest[2])))
                if hold is not None:
                    log.info(
                        "TubeMQ consumer %s: hold on %s/%s partition %s expired, pack put back",
                        hold.consumer.consumer_id,
                        rest[1],
                        rest[0],
                        rest[2],
                    )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The timer task (nursery_tree: "tubemq timer"); runs until cancelled."""
        await self.timer.run(self.next_deadline, self.fire, task_status=task_status)
