"""nsqlookupd's registration DB, sans-IO: who registered which topic and channel.

A *registration* is ``(category, key, subkey)``: ``("client", "", "")`` for every
identified nsqd, ``("topic", <topic>, "")`` and ``("channel", <topic>, <channel>)``.
Each holds *producers* by peer id; a producer is one peer's membership in one
registration and carries that membership's tombstone (so a tombstone marks one
peer for one topic). Keys outlive their producers, as in nsqlookupd: that is why
``/lookup`` can answer 200 with no producers.

Nothing here reads a clock or does I/O: every time is a float of the caller's
clock (``now``), so tests drive inactivity and tombstones with plain numbers and
the server passes ``trio.current_time()``. Lookups go through indexes by
``(category, key)``, by category and by peer, so ``/lookup`` costs O(its channels
+ producers) and a disconnect O(that peer's registrations), never a scan of
everything. Insertion order stands in for Go's random map order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import attrs

from ..protocol.lookupd import PeerInfo
from ..protocol.names import is_ephemeral

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

__all__ = [
    "CHANNEL",
    "CLIENT",
    "CLIENT_REGISTRATION",
    "TOPIC",
    "WILDCARD",
    "Node",
    "Peer",
    "Producer",
    "Registration",
    "RegistrationDB",
    "filter_by_active",
]

CLIENT: Final = "client"
TOPIC: Final = "topic"
CHANNEL: Final = "channel"
WILDCARD: Final = "*"
"""Matches any key or subkey in the find functions (never a valid name)."""


@attrs.frozen
class Registration:
    """One key of the DB; a topic's subkey is ``""``, a client's key and subkey too."""

    category: str
    key: str
    subkey: str = ""

    def matches(self, category: str, key: str, subkey: str) -> bool:
        """nsqlookupd's match: same category; key and subkey equal or ``*``."""
        return (
            self.category == category
            and (key == WILDCARD or self.key == key)
            and (subkey == WILDCARD or self.subkey == subkey)
        )


CLIENT_REGISTRATION: Final = Registration(CLIENT, "", "")


@attrs.define(eq=False)
class Peer:
    """One identified nsqd connection, shared by all its producers.

    ``last_update`` moves on IDENTIFY and PING only (REGISTER does not refresh it
    upstream), so a silent nsqd drops out of ``/lookup`` after the inactivity timeout.
    """

    id: str
    """The connection's remote ``ip:port``: unique while it is connected."""
    info: PeerInfo
    last_update: float
    _json: dict[str, str | int] | None = attrs.field(default=None, init=False, repr=False)

    @property
    def remote_address(self) -> str:
        """nsqlookupd sets ``remote_address`` to the id, the connection's address."""
        return self.id

    @property
    def node(self) -> str:
        """``<broadcast_address>:<http_port>``, the ``node`` of ``/topic/tombstone``."""
        return f"{self.info.broadcast_address}:{self.info.http_port}"

    def as_json(self) -> dict[str, str | int]:
        """The producer object of ``/lookup`` (keys in nsqlookupd's order); built once."""
        if self._json is None:
            info = self.info
            self._json = {
                **self._address_fields(),
                "topology_zone": info.topology_zone,
                "topology_region": info.topology_region,
            }
        return self._json

    def as_youzan_json(self) -> dict[str, str | int]:
        """Youzan's PeerY (``/lookup``'s ``partitions`` values): ``id`` first, no topology."""
        return {
            "id": self.id,
            **self._address_fields(),
            "distributed_id": self.info.distributed_id,
        }

    # not shared with /debug's entry (http_api.py): that one has Go's sorted map keys
    def _address_fields(self) -> dict[str, str | int]:
        """Where and what the producer is, in the order both answers give it."""
        info = self.info
        return {
            "remote_address": self.id,
            "hostname": info.hostname,
            "broadcast_address": info.broadcast_address,
            "tcp_port": info.tcp_port,
            "http_port": info.http_port,
            "version": info.version,
        }


@attrs.define(eq=False)
class Producer:
    """A peer's membership in one registration, with that membership's tombstone."""

    peer: Peer
    tombstoned: bool = False
    tombstoned_at: float | None = None
    """The caller's clock when tombstoned; None while never tombstoned."""

    def tombstone(self, now: float) -> None:
        """Mark (or mark again, restarting the lifetime)."""
        self.tombstoned = True
        self.tombstoned_at = now

    def is_tombstoned(self, now: float, lifetime: float) -> bool:
        """Tombstoned less than ``lifetime`` ago (never, with a lifetime of 0)."""
        at = self.tombstoned_at
        return self.tombstoned and at is not None and now - at < lifetime


def filter_by_active(
    producers: Iterable[Producer], now: float, inactivity_timeout: float, tombstone_lifetime: float
) -> list[Producer]:
    """Producers heard from within the timeout and not tombstoned within the lifetime."""
    return [
        producer
        for producer in producers
        if now - producer.peer.last_update <= inactivity_timeout
        and not producer.is_tombstoned(now, tombstone_lifetime)
    ]


@attrs.frozen
class Node:
    """One entry of ``/nodes``: an active peer, its topics and their tombstones."""

    peer: Peer
    topics: list[str]
    tombstones: list[bool]


class RegistrationDB:
    """Registrations -> producers, with nsqlookupd's operations and their rules.

    The low-level operations (``add_registration``, ``add_producer``,
    ``remove_producer``, ``remove_registration``, ``find_*``) are nsqlookupd's;
    the rest are the effects of the TCP commands and HTTP endpoints, kept here so
    both servers apply the same rules.
    """

    def __init__(
        self, *, inactive_producer_timeout: float = 300.0, tombstone_lifetime: float = 45.0
    ) -> None:
        self.inactive_producer_timeout = inactive_producer_timeout
        self.tombstone_lifetime = tombstone_lifetime
        self._producers: dict[Registration, dict[str, Producer]] = {}
        self._by_key: dict[tuple[str, str], dict[Registration, None]] = {}
        self._by_category: dict[str, dict[Registration, None]] = {}
        self._by_peer: dict[str, dict[Registration, None]] = {}
        self._partitions: dict[str, dict[int, dict[str, None]]] = {}
        """topic -> partition -> peer ids that registered it (Youzan's per-partition
        registrations; upstream's form counts as partition 0)."""
        self._peer_partitions: dict[str, dict[tuple[str, int], None]] = {}
        self._channel_partitions: dict[str, dict[tuple[str, str], dict[int, None]]] = {}
        """peer id -> (topic, channel) -> partitions it registered the channel for
        (Youzan's nsqd registers a channel per partition; upstream's form is 0): the
        peer leaves the channel's key when its last one goes."""
        self._watchers: list[Callable[[], None]] = []

    def watch(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every change of registrations or producers, so that
        code waiting for a registration (test fixtures) waits on an event, not a poll."""
        self._watchers.append(callback)

    def _changed(self) -> None:
        for callback in self._watchers:
            callback()

    def __len__(self) -> int:
        return len(self._producers)

    def __contains__(self, registration: object) -> bool:
        return registration in self._producers

    def items(self) -> Iterator[tuple[Registration, list[Producer]]]:
        """Every registration with its producers, in insertion order (``/debug``)."""
        for registration, producers in self._producers.items():
            yield registration, list(producers.values())

    # ------------------------------------------------------------ nsqlookupd's primitives

    def add_registration(self, registration: Registration) -> bool:
        """Create the key (with no producers); False when it existed."""
        if registration in self._producers:
            return False
        self._producers[registration] = {}
        self._by_key.setdefault((registration.category, registration.key), {})[registration] = None
        self._by_category.setdefault(registration.category, {})[registration] = None
        self._changed()
        return True

    def add_producer(self, registration: Registration, producer: Producer) -> bool:
        """Add a peer to a registration (creating the key); False when it was there.

        An existing membership is kept as is, tombstone included, as nsqlookupd does.
        """
        self.add_registration(registration)
        producers = self._producers[registration]
        peer_id = producer.peer.id
        if peer_id in producers:
            return False
        producers[peer_id] = producer
        self._by_peer.setdefault(peer_id, {})[registration] = None
        self._changed()
        return True

    def remove_producer(self, registration: Registration, peer_id: str) -> tuple[bool, int]:
        """Take a peer out of a registration; the key stays, even empty.

        Returns (whether it was there, producers left).
        """
        producers = self._producers.get(registration)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        if removed:
            self._unindex_peer(peer_id, registration)
            self._changed()
        return removed, len(producers)

    def remove_registration(self, registration: Registration) -> bool:
        """Delete a key and its producers; False when there was none."""
        producers = self._producers.pop(registration, None)
        if producers is None:
            return False
        for peer_id in producers:
            self._unindex_peer(peer_id, registration)
        by_key = (registration.category, registration.key)
        siblings = self._by_key[by_key]
        del siblings[registration]
        if not siblings:
            del self._by_key[by_key]
        del self._by_category[registration.category][registration]
        self._changed()
        return True

    def _unindex_peer(self, peer_id: str, registration: Registration) -> None:
        held = self._by_peer[peer_id]
        del held[registration]
        if not held:
            del self._by_peer[peer_id]

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        """Keys matching, ``*`` standing for any key or subkey."""
        if key != WILDCARD and subkey != WILDCARD:
            exact = Registration(category, key, subkey)
            return [exact] if exact in self._producers else []
        if key != WILDCARD:
            return list(self._by_key.get((category, key), ()))
        return [
            registration
            for registration in self._by_category.get(category, ())
            if subkey == WILDCARD or registration.subkey == subkey
        ]

    def find_producers(self, category: str, key: str, subkey: str) -> list[Producer]:
        """Producers of the matching keys, one per peer (the first membership found)."""
        if key != WILDCARD and subkey != WILDCARD:
            return list(self._producers.get(Registration(category, key, subkey), {}).values())
        found: dict[str, Producer] = {}
        for registration in self.find_registrations(category, key, subkey):
            for peer_id, producer in self._producers[registration].items():
                found.setdefault(peer_id, producer)
        return list(found.values())

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        """Every key that peer is a producer of."""
        return list(self._by_peer.get(peer_id, ()))

    def producer(self, registration: Registration, peer_id: str) -> Producer | None:
        """That peer's membership in that registration, if any."""
        return self._producers.get(registration, {}).get(peer_id)

    # ------------------------------------------------------------ TCP commands

    def identify(self, peer: Peer) -> bool:
        """IDENTIFY: the peer joins the ``client`` registration (``/nodes``)."""
        return self.add_producer(CLIENT_REGISTRATION, Producer(peer))

    def ping(self, peer: Peer, now: float) -> None:
        """PING from an identified peer: it is active again."""
        peer.last_update = now

    def register(
        self, peer: Peer, topic: str, channel: str | None, partition: int | None = None
    ) -> list[Registration]:
        """REGISTER: the channel (if any) and always the topic; the keys newly joined.

        The partition (Youzan's form; None, upstream's, is partition 0) is recorded
        for ``/lookup``'s ``partitions``; Youzan's old-version marker -11 is not.
        """
        keys = [Registration(TOPIC, topic)]
        pid = 0 if partition is None else partition
        if channel:
            keys.insert(0, Registration(CHANNEL, topic, channel))
            held = self._channel_partitions.setdefault(peer.id, {})
            held.setdefault((topic, channel), {})[pid] = None
        if pid >= 0:
            self._partitions.setdefault(topic, {}).setdefault(pid, {})[peer.id] = None
            self._peer_partitions.setdefault(peer.id, {})[(topic, pid)] = None
        return [key for key in keys if self.add_producer(key, Producer(peer))]

    def _drop_partition(self, peer_id: str, topic: str, pid: int) -> None:
        by_pid = self._partitions.get(topic, {})
        peers = by_pid.get(pid)
        if peers is not None:
            peers.pop(peer_id, None)
            if not peers:
                del by_pid[pid]
                if not by_pid:
                    del self._partitions[topic]
        held = self._peer_partitions.get(peer_id)
        if held is not None:
            held.pop((topic, pid), None)
            if not held:
                del self._peer_partitions[peer_id]

    def partitions(self, topic: str) -> dict[int, list[str]]:
        """Partition -> peer ids that registered it, partitions in ascending order."""
        by_pid = self._partitions.get(topic, {})
        return {pid: list(by_pid[pid]) for pid in sorted(by_pid)}

    def active_peers(self, now: float) -> list[Peer]:
        """Identified peers heard from within the inactivity timeout."""
        return [
            producer.peer
            for producer in filter_by_active(
                self.find_producers(CLIENT, "", ""), now, self.inactive_producer_timeout, 0.0
            )
        ]

    def unregister(
        self, peer_id: str, topic: str, channel: str | None, partition: int | None = None
    ) -> list[Registration]:
        """UNREGISTER; the keys the peer left.

        With a channel: leave that channel. Without: leave every channel of the
        topic, then the topic. An ``#ephemeral`` key left with no producers is deleted.
        Youzan's form leaves that partition only: the channel while the peer has it
        in another partition, else the channel; the partition and its channels while
        the peer holds another partition of the topic, else the topic.
        """
        left: list[Registration] = []
        if channel:
            if not self._drop_channel_partition(peer_id, topic, channel, partition):
                self._leave(Registration(CHANNEL, topic, channel), channel, peer_id, left)
            return left
        self._drop_partition(peer_id, topic, 0 if partition is None else partition)
        if partition is not None and any(
            key[0] == topic for key in self._peer_partitions.get(peer_id, ())
        ):
            for name in self._peer_channels(peer_id, topic):
                if not self._drop_channel_partition(peer_id, topic, name, partition):
                    self._leave(Registration(CHANNEL, topic, name), name, peer_id, left)
            return left
        for name in self._peer_channels(peer_id, topic):
            self._drop_channel_partition(peer_id, topic, name, None)
        left.extend(
            key
            for key in self.find_registrations(CHANNEL, topic, WILDCARD)
            if self.remove_producer(key, peer_id)[0]
        )
        self._leave(Registration(TOPIC, topic), topic, peer_id, left)
        return left

    def _peer_channels(self, peer_id: str, topic: str) -> list[str]:
        """The channels of ``topic`` the peer registered (for some partition)."""
        held = self._channel_partitions.get(peer_id, {})
        return [name for (key, name) in held if key == topic]

    def _drop_channel_partition(
        self, peer_id: str, topic: str, channel: str, partition: int | None
    ) -> bool:
        """The peer no longer has the channel in ``partition`` (None: in any); whether
        it still has it in another one."""
        held = self._channel_partitions.get(peer_id)
        pids = held.get((topic, channel)) if held is not None else None
        if held is None or pids is None:
            return False
        if partition is not None:
            pids.pop(partition, None)
            if pids:
                return True
        del held[(topic, channel)]
        if not held:
            del self._channel_partitions[peer_id]
        return False

    def _leave(self, key: Registration, name: str, peer_id: str, left: list[Registration]) -> None:
        """The peer leaves ``key`` (noted in ``left``); an ``#ephemeral`` ``name`` with no
        producer left goes with it."""
        removed, remaining = self.remove_producer(key, peer_id)
        if removed:
            left.append(key)
        if remaining == 0 and is_ephemeral(name):
            self.remove_registration(key)

    def remove_peer(self, peer_id: str) -> list[Registration]:
        """The peer's connection ended: it leaves every key (keys stay, even ephemeral)."""
        held = self.lookup_registrations(peer_id)
        self._channel_partitions.pop(peer_id, None)
        for topic, pid in list(self._peer_partitions.get(peer_id, ())):
            self._drop_partition(peer_id, topic, pid)
        for registration in held:
            self.remove_producer(registration, peer_id)
        return held

    # ------------------------------------------------------------ HTTP endpoints

    def create_topic(self, topic: str) -> bool:
        """``/topic/create``: the topic key, with no producers."""
        return self.add_registration(Registration(TOPIC, topic))

    def create_channel(self, topic: str, channel: str) -> None:
        """``/channel/create``: the channel key and the topic key."""
        self.add_registration(Registration(CHANNEL, topic, channel))
        self.add_registration(Registration(TOPIC, topic))

    def delete_topic(self, topic: str) -> list[Registration]:
        """``/topic/delete``: the topic's channel keys, then the topic key; those deleted."""
        deleted = self.find_registrations(CHANNEL, topic, WILDCARD)
        deleted += self.find_registrations(TOPIC, topic, "")
        for pid, peer_ids in self.partitions(topic).items():
            for peer_id in peer_ids:
                self._drop_partition(peer_id, topic, pid)
        for peer_id in list(self._channel_partitions):
            for name in self._peer_channels(peer_id, topic):
                self._drop_channel_partition(peer_id, topic, name, None)
        for registration in deleted:
            self.remove_registration(registration)
        return deleted

    def delete_channel(self, topic: str, channel: str) -> bool:
        """``/channel/delete``: False when there is no such channel key."""
        for peer_id in list(self._channel_partitions):
            self._drop_channel_partition(peer_id, topic, channel, None)
        return self.remove_registration(Registration(CHANNEL, topic, channel))

    def tombstone(self, topic: str, node: str, now: float) -> int:
        """``/topic/tombstone``: mark the topic's producers whose ``node`` matches;
        how many were marked (0 is no error)."""
        marked = 0
        for producer in self.find_producers(TOPIC, topic, ""):
            if producer.peer.node == node:
                producer.tombstone(now)
                marked += 1
        return marked

    def topics(self) -> list[str]:
        """``/topics``: every topic key, with or without producers."""
        return [registration.key for registration in self.find_registrations(TOPIC, WILDCARD, "")]

    def channels(self, topic: str) -> list[str]:
        """``/channels``: the channel keys of a topic (``[]`` for an unknown one)."""
        return [
            registration.subkey
            for registration in self.find_registrations(CHANNEL, topic, WILDCARD)
        ]

    def lookup(self, topic: str, now: float) -> tuple[list[str], list[Producer]] | None:
        """``/lookup``: (channels, active untombstoned producers); None without a topic key."""
        if not self.find_registrations(TOPIC, topic, ""):
            return None
        producers = filter_by_active(
            self.find_producers(TOPIC, topic, ""),
            now,
            self.inactive_producer_timeout,
            self.tombstone_lifetime,
        )
        return self.channels(topic), producers

    def nodes(self, now: float) -> list[Node]:
        """``/nodes``: active peers (tombstoned ones too), each topic with its tombstone."""
        nodes: list[Node] = []
        peers = filter_by_active(
            self.find_producers(CLIENT, "", ""), now, self.inactive_producer_timeout, 0.0
        )
        for client in peers:
            peer = client.peer
            topics: list[str] = []
            tombstones: list[bool] = []
            for registration in self._by_peer.get(peer.id, ()):
                if registration.category != TOPIC:
                    continue
                topics.append(registration.key)
                membership = self._producers[registration][peer.id]
                tombstones.append(membership.is_tombstoned(now, self.tombstone_lifetime))
            nodes.append(Node(peer, topics, tombstones))
        return nodes
