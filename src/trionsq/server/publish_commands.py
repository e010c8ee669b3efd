"""The publish commands of a TCP connection (spec §4.3-§4.5, §8.2-§8.4): PUB, MPUB,
DPUB and Youzan's PUB_EXT, MPUB_EXT, PUB_TRACE, MPUB_TRACE.

Where each goes (:func:`~trionsq.broker.rules.publish_target`: a named partition must
exist, an ordered topic needs one), what an ext topic takes, the topic's publish
limit on this connection, and the answers: ``OK``, Youzan's traced reply, or the
error. A mixin of :class:`~.commands.CommandLayer`, which owns the connection's
state, :meth:`_reply` and :meth:`_fail`.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import TYPE_CHECKING, Final

import trio

from ..broker.rate_limits import PublishMode, RateLimit, batch_size
from ..broker.replication import ReplicaRefusal
from ..broker.rules import EXT_TOO_LONG_REASON, Refusal, ext_refusal, publish_target
from ..protocol import broker_errors
from ..protocol.frames import OK_FRAME, error_frame, traced_reply_frame
from ..protocol.message import EXT_VERSION_JSON

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..broker.broker import Broker
    from ..broker.rate_limits import PublishLimit
    from ..broker.topic import Topic
    from ..protocol.commands import (
        Dpub,
        ExtMessage,
        Mpub,
        MpubExt,
        MpubTrace,
        Pub,
        PubExt,
        PubTrace,
    )
    from ..protocol.errors import ProtocolError
    from .outbound import OutboundBuffer

__all__ = ["MAX_HELD", "PublishCommands"]

MAX_HELD: Final = 64
"""Replicated publishes a connection may have unanswered before its reader waits."""


class PublishCommands:
    """The publish commands' handlers and the publishing state of one connection."""

    __slots__ = ("_commit_watched", "held_replies", "pub_counts", "publish_limits")

    if TYPE_CHECKING:  # what the command layer provides
        broker: Broker
        remote_address: str
        outbound: OutboundBuffer

        def _reply(self, frame_bytes: bytes) -> None: ...

        def _wake(self) -> None: ...

        def _write_now(self) -> None: ...

        def _fail(self, error: ProtocolError) -> None: ...

    def __init__(self) -> None:
        self.pub_counts: dict[str, int] | None = None
        """Messages published on this connection, per topic (nsqd's pubCounts); made
        at the first publish, as most connections only consume."""
        self.publish_limits: dict[str, RateLimit] | None = None
        """This connection's buckets for topics with a publish limit, made at its first
        publish to each (a topic's new limit replaces its bucket)."""
        self.held_replies: deque[tuple[bytes, tuple[str, int, int] | None]] = deque()
        """Answers from the first unanswered replicated publish on, in order, each with
        the (topic, partition, log end) it waits for (None: none): each goes out once
        its records are committed (:meth:`release_replies`), while the reader reads
        on (up to :data:`MAX_HELD`), so the leader appends the next batches while the
        followers copy the last ones."""
        self._commit_watched = False

    def _answer(self, frame_bytes: bytes, topic: str, index: int) -> None:
        """A stored publish's answer: now, or once committed on a replicated topic."""
        replication = self.broker.replication
        if replication is None or not replication.replicated(topic):
            self._reply(frame_bytes)
            return
        end = self.broker.topics[topic].partitions[index].log.next_id
        held = self.held_replies
        if not held and replication.reached(topic, index, end):
            self._reply(frame_bytes)  # committed at its append: no follower counts
            return
        held.append((frame_bytes, (topic, index, end)))

    def release_replies(self, *, write: bool = False) -> None:
        """Answer, in order, every held reply whose records are committed (a lost
        leadership answers Youzan's error: the client retries, with an idempotency
        key to store once); the first still waiting asks to be called back.
        ``write``: outside the reader's turn (a commit moved), written at once if
        the socket takes them, not in one more pass by the pump."""
        replication = self.broker.replication
        assert replication is not None  # noqa: S101 - only replicated answers are held
        held = self.held_replies
        add = self.outbound.add_response
        released = False
        while held:
            frame_bytes, waits = held[0]
            if waits is not None:
                topic, index, end = waits
                try:
                    if not replication.reached(topic, index, end):
                        if not self._commit_watched:
                            self._commit_watched = True
                            replication.on_commit(topic, index, self._commit_moved)
                        break
                except ReplicaRefusal as refusal:
                    frame_bytes = error_frame(refusal.error(fatal=False))
            held.popleft()
            add(frame_bytes)
            released = True
        if released:
            if write:
                self._write_now()
            else:
                self._wake()

    def _commit_moved(self) -> None:
        self._commit_watched = False
        self.release_replies(write=True)

    async def _settle_replies(self) -> None:
        """Too many answers held: wait until the oldest is committed (or refused)."""
        replication = self.broker.replication
        assert replication is not None  # noqa: S101 - only replicated answers are held
        while len(self.held_replies) > MAX_HELD:
            _, waits = self.held_replies[0]
            if waits is not None:
                with contextlib.suppress(ReplicaRefusal):  # release_replies answers it
                    await replication.committed(*waits)
            self.release_replies()

    def _count(self, topic: str, published: int) -> None:
        counts = self.pub_counts
        if counts is None:
            counts = self.pub_counts = {}
        counts[topic] = counts.get(topic, 0) + published

    def _target(self, topic_name: str, partition: int | None, *, create: bool = True) -> int:
        """The partition a publish goes to, or -1 after answering the fatal error.

        No partition: the default one, the lowest (spec §9), except on an ordered
        topic (§8.3 step 6); of a replicated topic, the lowest this broker leads
        (:meth:`~trionsq.broker.broker.Broker.default_partition`). ``create``: a
        plain topic may be created by it (PUB, MPUB, DPUB as nsqd), Youzan's
        publishes never create one. A named partition must exist (the parser's gate
        checked it before the body; the topic may have been deleted since).
        """
        target = publish_target(self.broker.topics, topic_name, partition, create=create)
        if type(target) is int:
            if partition is None and self.broker.replication is not None:
                return self.broker.default_partition(topic_name, target)
            return target
        if target is Refusal.BAD_PARTITION:
            self._fail(broker_errors.bad_partition_for_ordered())
        else:
            self._fail(broker_errors.topic_not_exist())
        return -1

    def _publish_limit(self, topic_name: str) -> PublishLimit | None:
        topic = self.broker.topics.get(topic_name)
        return topic.publish_limit if topic is not None else None

    def _publish_bucket(self, topic_name: str, limit: PublishLimit) -> RateLimit:
        """This connection's bucket for the topic's limit (a new limit: a new bucket)."""
        buckets = self.publish_limits
        if buckets is None:
            buckets = self.publish_limits = {}
        bucket = buckets.get(topic_name)
        if bucket is None or bucket.rates is not limit.rates:
            bucket = buckets[topic_name] = RateLimit(limit.rates, trio.current_time())
        return bucket

    def _throttled_until(self, topic_name: str, limit: PublishLimit) -> float | None:
        """When a publish to the topic may go on this connection, if its throttling
        limit holds it back now (None: it goes now). The reader waits until then,
        reading nothing more, so the client's later commands wait in the socket (the
        OKs of what went before are written first): Kafka's quotas mute the channel
        the same way. The wait is for the bucket's step (a hundredth of a second of
        the rate, at least one message), as a router's: at most one wake-up per
        message and 100 a second, and a late one loses none of the rate."""
        if limit.mode is not PublishMode.THROTTLE:
            return None
        now = trio.current_time()
        bucket = self._publish_bucket(topic_name, limit)
        if bucket.is_open(now):
            return None
        limit.throttled += 1
        return bucket.ready_at(now)

    def _over_limit(
        self, topic_name: str, verb: str, bodies: Sequence[bytes], *, youzan: bool = False
    ) -> bool:
        """Charge this publish to the connection's bucket for the topic's publish limit,
        or answer the non-fatal refusal if a refusing limit holds it back (nothing is
        stored; the client may publish again). A throttling limit never refuses: the
        reader held the publish until the bucket had a token (:meth:`_throttled_until`),
        and it goes, on debt if it is larger than what the bucket holds.

        Upstream's E_PUB_FAILED is fatal for a store failure; this one keeps the
        connection open, as Youzan's publish errors do (docs/extensions.md).
        """
        limit = self._publish_limit(topic_name)
        if limit is None:
            return False
        bucket = self._publish_bucket(topic_name, limit)
        if limit.mode is PublishMode.THROTTLE:
            bucket.charge(len(bodies), batch_size(bodies))
            return False
        if bucket.admit(trio.current_time(), len(bodies), batch_size(bodies)):
            return False
        limit.refused += 1
        self._reply(error_frame(broker_errors.pub_rate_limited(verb, youzan=youzan)))
        return True

    def _plain_topic(self, event: Pub) -> Topic | None:
        """The topic of a PUB that takes the short way (issue 37), else None: its
        topic exists, is not ordered and has no publish limit, so :meth:`_over_limit`
        would have nothing to do, and any partition it names is one the topic has, so
        :meth:`_target` would only return it (a Youzan client, trionsq.client among
        them, names one in every PUB). With replication, the connection also holds
        fewer than :data:`MAX_HELD` answers, so no wait for a commit is due in this
        turn (:meth:`_pub_led`)."""
        broker = self.broker
        topic = broker.topics.get(event.topic)
        if topic is None or topic.publish_limit is not None or topic.ordered:
            return None
        partition = event.partition
        if partition is not None and partition >= len(topic.partitions):
            return None
        if broker.replication is not None and len(self.held_replies) >= MAX_HELD:
            return None
        return topic

    def _pub_plain(self, topic: Topic, event: Pub) -> None:
        """A PUB :meth:`_plain_topic` let through: stored, counted, answered."""
        broker = self.broker
        if broker.replication is not None:
            self._pub_led(topic, event)
            return
        broker.publish_plain(topic, event.body, broker.wall_clock(), event.partition or 0)
        self._count(event.topic, 1)
        self._reply(OK_FRAME)

    def _pub_led(self, topic: Topic, event: Pub) -> None:
        """The short way of a broker in a cluster: every rule of the long one (the
        hook refuses a write to a partition this broker does not lead, or may not
        commit now: Youzan's non-fatal errors), answered at once where the append
        committed it (no follower counts), else once committed (:meth:`_answer`)."""
        broker = self.broker
        index = event.partition
        if index is None:
            index = broker.default_partition(topic.name, 0)
        try:
            broker.publish_plain(topic, event.body, broker.wall_clock(), index)
        except ReplicaRefusal as refusal:
            self._reply(error_frame(refusal.error(fatal=False)))
            return
        self._count(topic.name, 1)
        self._answer(OK_FRAME, topic.name, index)  # it leads: reached() cannot refuse now
        if self.held_replies:
            self.release_replies()

    def _pub(self, event: Pub) -> None:
        topic = self._plain_topic(event)
        if topic is not None:
            self._pub_plain(topic, event)
            return
        index = self._target(event.topic, event.partition)
        youzan = event.partition is not None
        if index < 0 or self._over_limit(event.topic, "PUB", (event.body,), youzan=youzan):
            return
        self.broker.publish(
            event.topic, [event.body], self.broker.wall_clock(), partition_index=index
        )
        self._count(event.topic, 1)
        self._answer(OK_FRAME, event.topic, index)

    def _pub_together(self, topic: str, pubs: list[Pub]) -> None:
        """PUBs to one topic without a publish limit, in one read: one append per run
        naming the same partition (under a limit each PUB goes on its own)."""
        start, count = 0, len(pubs)
        while start < count:
            partition = pubs[start].partition
            end = start + 1
            while end < count and pubs[end].partition == partition:
                end += 1
            index = self._target(topic, partition)
            if index < 0:
                return
            bodies = [pub.body for pub in pubs[start:end]]
            self.broker.publish(topic, bodies, self.broker.wall_clock(), partition_index=index)
            self._count(topic, len(bodies))
            if self.broker.replication is None:  # single-broker mode: as it always was
                for _ in bodies:
                    self._reply(OK_FRAME)
            else:
                for _ in bodies:
                    self._answer(OK_FRAME, topic, index)
            start = end

    def _mpub(self, event: Mpub) -> None:
        index = self._target(event.topic, event.partition)
        youzan = event.partition is not None
        if index < 0 or self._over_limit(event.topic, "MPUB", event.bodies, youzan=youzan):
            return
        self.broker.publish(
            event.topic, event.bodies, self.broker.wall_clock(), partition_index=index
        )
        self._count(event.topic, len(event.bodies))
        self._answer(OK_FRAME, event.topic, index)

    def _dpub(self, event: Dpub) -> None:
        if self._target(event.topic, None) < 0 or self._over_limit(
            event.topic, "DPUB", (event.body,)
        ):
            return
        now = self.broker.wall_clock()
        defer_ns = event.defer_ms * 1_000_000
        # DPUB 0 is a plain publish in nsqd: no deferral, no place in the deferred queue
        self.broker.publish(
            event.topic, [event.body], now, deliver_at=now + defer_ns if defer_ns else 0
        )
        self._count(event.topic, 1)
        self._answer(OK_FRAME, event.topic, 0)

    def _ext_refusal(self, topic_name: str, headers: Sequence[bytes]) -> bool:
        """Answer the error if these headers cannot be stored in the topic (non-fatal).

        A plain topic takes no header: without Youzan's ``allow-ext-compatible``
        (not an option here, so off) that is E_EXT_NOT_SUPPORT.
        """
        refusal = ext_refusal(self.broker.topics.get(topic_name), headers)
        if refusal is None:
            return False
        if refusal is Refusal.TOPIC_NOT_EXIST:  # deleted since the gate let it through
            self._fail(broker_errors.topic_not_exist())
        elif refusal is Refusal.EXT_NOT_SUPPORTED:
            self._reply(error_frame(broker_errors.ext_not_supported(topic_name)))
        else:
            error = broker_errors.pub_failed("PUB", EXT_TOO_LONG_REASON, youzan=True)
            self._reply(error_frame(error))
        return True

    def _pub_ext(self, event: PubExt) -> None:
        message = event.message
        index = self._target(event.topic, event.partition, create=False)
        if index < 0 or self._ext_refusal(event.topic, (message.header,)):
            return
        if self._over_limit(event.topic, "PUB", (message.body,), youzan=True):
            return
        if message.idempotency_key is not None:
            self._pub_ext_once(event.topic, index, message)
            return
        self._publish_one(event.topic, index, message.body, message.trace_id, message.header)

    def _publish_one(
        self, topic: str, index: int, body: bytes, trace_id: int | None, header: bytes | None
    ) -> None:
        """PUB_EXT's and PUB_TRACE's store, with the JSON header if any; answered OK
        when not traced or when an ephemeral topic dropped it (nothing to point at),
        else with the 30-byte reply naming its record (§8.4)."""
        records = self.broker.publish_single(
            topic, index, body, trace_id, header, source=self.remote_address
        )
        self._count(topic, 1)
        if trace_id is None or not records:
            self._answer(OK_FRAME, topic, index)
            return
        record = records[0]
        self._answer(
            traced_reply_frame(record.internal_id, trace_id, record.offset, record.raw_size),
            topic,
            index,
        )

    def _pub_ext_once(self, topic: str, index: int, message: ExtMessage) -> None:
        """PUB_EXT with ``##idempotency_key``: stored unless the partition holds the
        key; a traced one is answered with the record that holds it."""
        stored = self.broker.publish_once(
            topic,
            [message.body],
            [message.idempotency_key],
            self.broker.wall_clock(),
            partition_index=index,
            trace_ids=[message.trace_id or 0],
            exts=[message.header],
            source=self.remote_address,
        )
        self._count(topic, 1)
        if message.trace_id is None or stored is None:
            self._answer(OK_FRAME, topic, index)
            return
        self._answer(
            traced_reply_frame(stored.internal_id, stored.trace_id, stored.offset, stored.raw_size),
            topic,
            index,
        )

    def _mpub_ext(self, event: MpubExt) -> None:
        messages = event.messages
        index = self._target(event.topic, event.partition, create=False)
        exts = [m.header for m in messages]
        if index < 0 or self._ext_refusal(event.topic, exts):
            return
        bodies = [m.body for m in messages]
        if self._over_limit(event.topic, "MPUB", bodies, youzan=True):
            return
        trace_ids = [m.trace_id or 0 for m in messages]
        keys = [m.idempotency_key for m in messages]
        now = self.broker.wall_clock()
        if keys.count(None) < len(keys):  # some message has ##idempotency_key
            self.broker.publish_once(
                event.topic,
                bodies,
                keys,
                now,
                partition_index=index,
                trace_ids=trace_ids,
                exts=exts,
                source=self.remote_address,
            )
        else:
            self.broker.publish(
                event.topic,
                bodies,
                now,
                partition_index=index,
                trace_ids=trace_ids,
                ext_version=EXT_VERSION_JSON,
                exts=exts,
                source=self.remote_address,
            )
        self._count(event.topic, len(messages))
        self._answer(OK_FRAME, event.topic, index)

    def _pub_trace(self, event: PubTrace) -> None:
        """PUB_TRACE: stored with its trace id, answered with the 30-byte reply (§8.4)."""
        index = self._target(event.topic, event.partition, create=False)
        if index < 0 or self._over_limit(event.topic, "PUB", (event.body,), youzan=True):
            return
        self._publish_one(event.topic, index, event.body, event.trace_id, None)

    def _mpub_trace(self, event: MpubTrace) -> None:
        """MPUB_TRACE: the traced reply names the batch: first id and offset, trace id
        0, the raw size of all its records (§8.4)."""
        index = self._target(event.topic, event.partition, create=False)
        messages = event.messages
        if index < 0 or self._over_limit(
            event.topic, "MPUB", [m.body for m in messages], youzan=True
        ):
            return
        records = self.broker.publish(
            event.topic,
            [m.body for m in messages],
            self.broker.wall_clock(),
            partition_index=index,
            trace_ids=[m.trace_id for m in messages],
            source=self.remote_address,
        )
        self._count(event.topic, len(messages))
        if not records:
            self._answer(OK_FRAME, event.topic, index)
            return
        first = records[0]
        raw_size = sum(record.raw_size for record in records)
        self._answer(
            traced_reply_frame(first.internal_id, 0, first.offset, raw_size), event.topic, index
        )
