"""Youzan's topic metadata and partition placement on the lookupd, sans-IO.

Youzan's nsqlookupd keeps topic metadata (partition count, replicas, ext,
ordered ...) in etcd through its cluster coordinator. trionsq keeps it in memory
in a :class:`TopicCatalog`, one per lookupd, and places each partition on one
registered broker (its *leader*): the broker leading the fewest partitions so
far, ties broken by a stable order, so partitions spread evenly by count. There
is no replication: ``replica`` is recorded and reported, never enforced.

A broker is known here by its *node*, ``<broadcast_address>:<http_port>`` (as
``/topic/tombstone`` names it): a peer's id (the connection's remote address)
changes on every reconnect, the node does not, and the lookupd's creation calls
go to that HTTP address. Nothing here does I/O or imports trio; what to tell the
brokers is returned as data (``pending``), the server makes the calls.
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

import attrs

from ..protocol.names import MAX_PARTITION_NUM, is_valid_name
from .registry import TOPIC

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from .registry import Peer, RegistrationDB

__all__ = [
    "MAX_LOAD_FACTOR",
    "MAX_PARTITION_NUM",
    "MAX_REPLICATOR",
    "ArgError",
    "ManagedTopic",
    "PlacedBroker",
    "PlacementError",
    "TopicCatalog",
    "TopicMeta",
    "parse_create_args",
    "parse_update_args",
    "place",
    "youzan_lookup",
]

MAX_REPLICATOR: Final = 5
MAX_LOAD_FACTOR: Final = 10000


class ArgError(Exception):
    """A refused query parameter: the HTTP 400 text (Youzan's)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class PlacementError(Exception):
    """A create or update that cannot be done: the HTTP 400 text, a readable reason."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@attrs.frozen
class TopicMeta:
    """What ``/topic/create`` records; the first six fields are ``/lookup``'s ``meta``."""

    partition_num: int
    replica: int = 1
    extend_support: bool = False
    ordered: bool = False
    multi_part: bool = False
    disable_channel_auto_create: bool = False
    sync_disk: int = 0
    retention_days: int = 0
    suggest_load: int = 0

    def as_json(self) -> dict[str, int | bool]:
        """``/lookup``'s ``meta`` object (Youzan's key order)."""
        return {
            "partition_num": self.partition_num,
            "replica": self.replica,
            "extend_support": self.extend_support,
            "ordered": self.ordered,
            "multi_part": self.multi_part,
            "disable_channel_auto_create": self.disable_channel_auto_create,
        }

    def differences(self, other: TopicMeta) -> list[str]:
        """``name=ours (asked theirs)`` for each ``meta`` field that differs."""
        ours, theirs = self.as_json(), other.as_json()
        return [
            f"{name}={ours[name]} (asked {theirs[name]})"
            for name in ours
            if ours[name] != theirs[name]
        ]


PLAIN_META: Final = TopicMeta(partition_num=1)
"""The ``meta`` of a topic brokers registered on their own (one partition, nsqd's)."""


@attrs.frozen
class PlacedBroker:
    """The broker a partition was placed on, as it was when placed.

    ``node`` is the identity; ``id`` (the peer id then) and the ports are kept so
    the placement can be shown and called even while the broker is away.
    """

    node: str
    id: str
    broadcast_address: str
    tcp_port: int
    http_port: int

    @classmethod
    def from_peer(cls, peer: Peer) -> PlacedBroker:
        info = peer.info
        return cls(peer.node, peer.id, info.broadcast_address, info.tcp_port, info.http_port)

    @property
    def rank(self) -> tuple[str, int, int]:
        """The stable tie-break order: address, then HTTP port, then TCP port."""
        return (self.broadcast_address, self.http_port, self.tcp_port)


def place(
    count: int, candidates: Iterable[PlacedBroker], load: Mapping[str, int]
) -> tuple[PlacedBroker, ...]:
    """Leaders for partitions ``0..count-1``: each goes to the least-loaded candidate.

    ``load`` is each node's current number of led partitions (missing = 0); every
    choice counts at once, so one create spreads by count too. Ties go to the lowest
    :attr:`PlacedBroker.rank`, so the same state always gives the same placement.
    Candidates with the same node count once (the first kept).

    Raises:
        PlacementError: no candidate.
    """
    unique: dict[str, PlacedBroker] = {}
    for broker in candidates:
        unique.setdefault(broker.node, broker)
    if not unique:
        raise PlacementError("no broker registered with this lookupd to place partitions on")
    brokers = sorted(unique.values(), key=lambda broker: broker.rank)
    heap = [(load.get(broker.node, 0), index) for index, broker in enumerate(brokers)]
    heapq.heapify(heap)
    chosen: list[PlacedBroker] = []
    for _ in range(count):
        led, index = heapq.heappop(heap)
        chosen.append(brokers[index])
        heapq.heappush(heap, (led + 1, index))
    return tuple(chosen)


@attrs.define
class ManagedTopic:
    """A topic created through the lookupd: its meta, placement and broker sync state."""

    name: str
    meta: TopicMeta
    placement: tuple[PlacedBroker, ...]
    """Leader of each partition, by partition id."""
    synced: set[str] = attrs.field(factory=set)
    """Nodes that confirmed the current meta (answered our ``/topic/create``)."""

    def nodes(self) -> list[str]:
        """The distinct nodes of the placement, in partition order."""
        return list(dict.fromkeys(broker.node for broker in self.placement))

    def broker(self, node: str) -> PlacedBroker:
        """That node's placement entry (the first partition it leads)."""
        return next(broker for broker in self.placement if broker.node == node)

    def creation_target(self) -> str:
        """The broker call making it local: all partitions, ext and ordered as recorded."""
        meta = self.meta
        return (
            f"/topic/create?topic={quote(self.name, safe='')}&partition_num={meta.partition_num}"
            f"&ext={_go_bool(meta.extend_support)}&ordered={_go_bool(meta.ordered)}"
        )


def _go_bool(value: bool) -> str:
    return "true" if value else "false"


class TopicCatalog:
    """Managed topics by name, with the placement rule and the brokers left to tell."""

    def __init__(self) -> None:
        self.topics: dict[str, ManagedTopic] = {}

    def __contains__(self, name: object) -> bool:
        return name in self.topics

    def get(self, name: str) -> ManagedTopic | None:
        return self.topics.get(name)

    def leader_counts(self) -> Counter[str]:
        """Partitions led per node, over every managed topic."""
        counts: Counter[str] = Counter()
        for topic in self.topics.values():
            counts.update(broker.node for broker in topic.placement)
        return counts

    def create(
        self, name: str, meta: TopicMeta, candidates: Sequence[PlacedBroker]
    ) -> tuple[ManagedTopic, bool]:
        """Record and place a topic; (the topic, whether it is new).

        The same meta again is idempotent (the placement is kept); a different one
        is refused: partitions are added with ``/topic/partition/expand``, the rest
        changed with ``/topic/meta/update``.

        Raises:
            PlacementError: a different meta, or no candidate broker.
        """
        existing = self.topics.get(name)
        if existing is not None:
            differences = existing.meta.differences(meta)
            if differences:
                raise PlacementError(
                    f"topic {name} already exists with {', '.join(differences)}; "
                    "use /topic/partition/expand or /topic/meta/update to change it"
                )
            return existing, False
        placement = place(meta.partition_num, candidates, self.leader_counts())
        topic = self.topics[name] = ManagedTopic(name, meta, placement)
        return topic, True

    def expand(
        self, name: str, partition_num: int, candidates: Sequence[PlacedBroker]
    ) -> ManagedTopic:
        """Add partitions up to ``partition_num``, placed by the same rule.

        Raises:
            PlacementError: unknown topic, fewer partitions than now, or no candidate.
        """
        topic = self._existing(name)
        current = topic.meta.partition_num
        if partition_num < current:
            raise PlacementError(
                f"topic {name} has {current} partitions; partitions cannot be removed"
            )
        if partition_num > current:
            added = place(partition_num - current, candidates, self.leader_counts())
            topic.placement += added
            topic.meta = attrs.evolve(topic.meta, partition_num=partition_num)
            topic.synced.clear()
        return topic

    def update(
        self,
        name: str,
        *,
        replica: int | None = None,
        sync_disk: int | None = None,
        retention_days: int | None = None,
        upgrade_ext: bool = False,
        disable_channel_auto_create: bool | None = None,
    ) -> ManagedTopic:
        """``/topic/meta/update``: None leaves a field; ext only goes false → true.

        An ext upgrade makes every placed broker pending again (it must be told).

        Raises:
            PlacementError: unknown topic.
        """
        topic = self._existing(name)
        changes: dict[str, object] = {}
        if replica is not None:
            changes["replica"] = replica
        if sync_disk is not None:
            changes["sync_disk"] = sync_disk
        if retention_days is not None:
            changes["retention_days"] = retention_days
        if disable_channel_auto_create is not None:
            changes["disable_channel_auto_create"] = disable_channel_auto_create
        if upgrade_ext and not topic.meta.extend_support:
            changes["extend_support"] = True
            topic.synced.clear()
        topic.meta = attrs.evolve(topic.meta, **changes)  # type: ignore[arg-type]
        return topic

    def delete(self, name: str) -> ManagedTopic | None:
        return self.topics.pop(name, None)

    def topics_on(self, node: str) -> list[ManagedTopic]:
        """Managed topics with a partition placed on that node."""
        return [t for t in self.topics.values() if any(b.node == node for b in t.placement)]

    def forget_synced(self, node: str) -> None:
        """That broker (re)connected: it may have lost its topics, tell it again."""
        for topic in self.topics.values():
            topic.synced.discard(node)

    def pending(self, node: str) -> list[ManagedTopic]:
        """Managed topics placed on that node it has not confirmed yet."""
        return [topic for topic in self.topics_on(node) if node not in topic.synced]

    def _existing(self, name: str) -> ManagedTopic:
        topic = self.topics.get(name)
        if topic is None:
            raise PlacementError(f"topic {name} was not created through this lookupd")
        return topic


# ---------------------------------------------------------------------- query parsing


def _int_arg(raw: str, low: int, high: int, error: str) -> int:
    """Go's ``strconv.Atoi`` then a range check; anything else is ``error``."""
    body = raw[1:] if raw[:1] in ("+", "-") else raw
    if not (body.isascii() and body.isdigit()):
        raise ArgError(error)
    value = int(raw)
    if not low <= value <= high:
        raise ArgError(error)
    return value


def parse_create_args(arg: Callable[[str], str | None]) -> tuple[str, TopicMeta]:
    """``/topic/create``'s Youzan parameters, checked in Youzan's order (§5.3).

    ``arg`` returns a query parameter's first value or None. Flags are enabled
    only by the exact string ``true``; ``ordered``/``ext`` (the broker's spellings)
    are read too.

    Raises:
        ArgError: the first refused parameter, with Youzan's text.
    """
    topic = arg("topic")
    if topic is None or topic == "":
        raise ArgError("MISSING_ARG_TOPIC")
    if not is_valid_name(topic.encode("utf-8", "surrogateescape")):
        raise ArgError("INVALID_ARG_TOPIC")
    raw = arg("partition_num")
    if raw is None or raw == "":
        raise ArgError("MISSING_ARG_TOPIC_PARTITION_NUM")
    partition_num = _int_arg(raw, 1, MAX_PARTITION_NUM, "INVALID_ARG_TOPIC_PARTITION_NUM")
    raw = arg("replicator")
    if raw is None or raw == "":
        raise ArgError("MISSING_ARG_TOPIC_REPLICATOR")
    replica = _int_arg(raw, 1, MAX_REPLICATOR, "INVALID_ARG_TOPIC_REPLICATOR")
    suggest_load = _optional_int(arg("suggestload"), 0, MAX_LOAD_FACTOR, "LOAD_FACTOR")
    sync_disk = _optional_int(arg("syncdisk"), -(2**63), 2**63 - 1, "SYNC_DISK")
    retention = _optional_int(arg("retention"), -(2**63), 2**63 - 1, "RETENTION")

    def flag(*names: str) -> bool:
        return any(arg(name) == "true" for name in names)

    meta = TopicMeta(
        partition_num=partition_num,
        replica=replica,
        extend_support=flag("extend", "ext"),
        ordered=flag("orderedmulti", "ordered"),
        multi_part=flag("multipart"),
        disable_channel_auto_create=flag("disable_channel_auto_create"),
        sync_disk=sync_disk,
        retention_days=retention,
        suggest_load=suggest_load,
    )
    return topic, meta


def _optional_int(raw: str | None, low: int, high: int, what: str) -> int:
    if raw is None or raw == "":
        return 0
    return _int_arg(raw, low, high, f"INVALID_ARG_TOPIC_{what}")


def parse_update_args(
    arg: Callable[[str], str | None],
) -> tuple[str, dict[str, int | bool | None]]:
    """``/topic/meta/update``'s parameters: (topic, keyword changes for ``update``).

    Raises:
        ArgError: the first refused parameter.
    """
    topic = arg("topic")
    if topic is None or topic == "":
        raise ArgError("MISSING_ARG_TOPIC")
    changes: dict[str, int | bool | None] = {}
    raw = arg("replicator")
    if raw:
        changes["replica"] = _int_arg(raw, 1, MAX_REPLICATOR, "INVALID_ARG_TOPIC_REPLICATOR")
    raw = arg("syncdisk")
    if raw:
        changes["sync_disk"] = _int_arg(raw, -(2**63), 2**63 - 1, "INVALID_ARG_TOPIC_SYNC_DISK")
    raw = arg("retention")
    if raw:
        changes["retention_days"] = _int_arg(
            raw, -(2**63), 2**63 - 1, "INVALID_ARG_TOPIC_RETENTION"
        )
    changes["upgrade_ext"] = arg("upgradeext") == "true"
    raw = arg("disable_channel_auto_create")
    if raw in ("true", "false"):
        changes["disable_channel_auto_create"] = raw == "true"
    return topic, changes


# ---------------------------------------------------------------------- Youzan's /lookup


def youzan_lookup(
    registry: RegistrationDB,
    catalog: TopicCatalog,
    topic: str,
    now: float,
    *,
    write: bool,
    partition: str = "*",
    metainfo: bool = False,
) -> dict[str, object]:
    """``/lookup`` in Youzan's shape: channels, producers, partitions (and meta).

    A managed topic's partitions come from its placement: a partition is listed
    while its broker is connected and active and holds the topic (it confirmed our
    creation call or registered the topic). Other topics' come from registrations
    (upstream's form is partition 0). ``write`` (``access=w``) leaves out brokers
    tombstoned for the topic; reads keep them, so consumers can drain them.
    ``producers`` are the listed partitions' brokers, once each; for a topic not
    managed and every partition asked, every active registered broker. An unknown
    topic gives empty lists and no ``meta``.

    A topic not managed whose only partition, 0, several brokers registered is a
    plain topic on each, not a partition with a leader: none is listed, as Youzan's
    lookupd lists nsqds without partitions only as producers, so Youzan's clients
    read and write every producer plainly (issue 31).
    """
    channels = registry.channels(topic)
    live = registry.active_peers(now)
    by_node = {peer.node: peer for peer in live}
    by_id = {peer.id: peer for peer in live}
    memberships = {p.peer.id: p for p in registry.find_producers(TOPIC, topic, "")}

    def writable(peer: Peer) -> bool:
        membership = memberships.get(peer.id)
        return not (
            write
            and membership is not None
            and membership.is_tombstoned(now, registry.tombstone_lifetime)
        )

    partitions: dict[str, Peer] = {}
    managed = catalog.get(topic)
    meta: TopicMeta | None = None
    producers: list[Peer] | None = None
    if managed is not None:
        meta = managed.meta
        for pid, broker in enumerate(managed.placement):
            peer = by_node.get(broker.node)
            if peer is None or not writable(peer):
                continue
            if broker.node in managed.synced or peer.id in memberships:
                partitions[str(pid)] = peer
    else:
        registered = registry.partitions(topic)
        if registry.find_registrations(TOPIC, topic, ""):
            highest = max(registered, default=0)
            meta = attrs.evolve(PLAIN_META, partition_num=highest + 1)
        for pid, peer_ids in registered.items():
            holders = [by_id[i] for i in peer_ids if i in by_id and writable(by_id[i])]
            if len(holders) > 1 and list(registered) == [0]:
                break  # a plain topic on several brokers: no partition to name
            if holders:
                partitions[str(pid)] = holders[0]
        if partition == "*":
            producers = [by_id[i] for i in memberships if i in by_id and writable(by_id[i])]
    if partition != "*":
        partitions = {pid: peer for pid, peer in partitions.items() if pid == partition}
    if producers is None:
        producers = list({peer.node: peer for peer in partitions.values()}.values())
    document: dict[str, object] = {
        "channels": channels,
        "producers": [peer.as_youzan_json() for peer in producers],
        "partitions": {pid: peer.as_youzan_json() for pid, peer in partitions.items()},
    }
    if metainfo and meta is not None:
        document["meta"] = meta.as_json()
    return document
