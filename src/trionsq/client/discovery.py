"""Where a topic lives: nsqlookupd's answers read into targets, and the task that
keeps them fresh (seed 003 §2).

Reading the answers is pure (:func:`parse_lookup`, :func:`parse_listlookup`): both
Youzan's ``/lookup?...&metainfo=true`` shape (``partitions`` with one leader each,
``meta`` with the partition count) and upstream's (``producers`` only) are accepted,
with or without the ``{"status_code","data"}`` envelope. A :class:`Target` is where
one connection goes: an nsqd's TCP address and, for a partitioned topic, the
partition. Every producer is a target: a broker listed under no partition (an nsqd
that knows none, or one of several brokers holding a plain topic) is consumed and
published to without one, as NSQ clients and Youzan's go-nsq consumer do.

:class:`Discovery` asks every lookupd it knows (``/listlookup`` first, the
configured list when that fails), merges what they say, and looks again every
``interval`` seconds or at once when :meth:`Discovery.refresh` is called (an nsqd
said it is not the leader, not writable, has no such topic, or a connection was
lost).
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import TYPE_CHECKING, Final

import attrs
import orjson
import trio

from ..addresses import join_host_port
from ..http.client import HttpClientError, http_get
from .errors import NsqClientError, NsqConfigError, NsqDiscoveryError, renamed

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

__all__ = [
    "Discovery",
    "Placement",
    "Target",
    "parse_listlookup",
    "parse_lookup",
    "parse_nodes",
]

log = logging.getLogger("trionsq.client")
LOOKUP_INTERVAL: Final = 60.0
"""go-nsq's ``lookupd_poll_interval``."""
HTTP_TIMEOUT: Final = 5.0
REFRESH_FLOOR: Final = 1.0
"""Least seconds between two lookups asked for by errors, so a broker that keeps
refusing does not turn discovery into a flood."""


@attrs.frozen(order=True)
class Target:
    """One connection's destination: an nsqd and, for Youzan's partitions, which."""

    address: str
    partition: int | None = None


@attrs.frozen
class Placement:
    """What the lookupds said about a topic."""

    targets: tuple[Target, ...] = ()
    partition_count: int | None = None
    """``meta.partition_num`` (Youzan with ``metainfo``), else the highest partition
    listed plus one, else None (no partitions: upstream)."""
    ordered: bool = False
    extend_support: bool = False


def _data(body: bytes) -> dict[str, object]:
    document = orjson.loads(body)
    if not isinstance(document, dict):
        raise ValueError("a lookupd answer is a JSON object")
    inner = document.get("data", document) if "status_code" in document else document
    return inner if isinstance(inner, dict) else {}


def _peer_address(peer: object) -> str | None:
    if not isinstance(peer, dict):
        return None
    host, port = peer.get("broadcast_address"), peer.get("tcp_port")
    if not isinstance(host, str) or not isinstance(port, int) or not host:
        return None
    return join_host_port(host, port)


def parse_lookup(body: bytes) -> Placement:
    """A ``/lookup`` answer: one target per listed partition, and one without a
    partition per producer that leads none (every producer, upstream).

    Raises:
        ValueError: not JSON, or not an object.
    """
    data = _data(body)
    targets: list[Target] = []
    partitions = data.get("partitions")
    for key, peer in partitions.items() if isinstance(partitions, dict) else ():
        address = _peer_address(peer)
        if address is not None and str(key).lstrip("-").isdigit() and int(key) >= 0:
            targets.append(Target(address, int(key)))
    producers = data.get("producers")
    for peer in producers if isinstance(producers, list) else []:
        address = _peer_address(peer)
        if address is not None:
            targets.append(Target(address))
    meta = data.get("meta")
    meta = meta if isinstance(meta, dict) else {}
    count = meta.get("partition_num")
    return Placement(
        _without_shadowed(targets),
        count if isinstance(count, int) and count > 0 else _listed_count(targets),
        meta.get("ordered") is True,
        meta.get("extend_support") is True,
    )


def _without_shadowed(targets: Iterable[Target]) -> tuple[Target, ...]:
    """Sorted, once each, and without a partitionless target for an address that
    leads a partition (the broker is read through its partitions)."""
    unique = set(targets)
    leading = {target.address for target in unique if target.partition is not None}
    kept = (t for t in unique if t.partition is not None or t.address not in leading)
    return tuple(sorted(kept))


def _listed_count(targets: Sequence[Target]) -> int | None:
    """Without ``meta``: as many partitions as the highest one listed says."""
    listed = [target.partition for target in targets if target.partition is not None]
    return max(listed) + 1 if listed else None


def parse_listlookup(body: bytes) -> list[str]:
    """The HTTP addresses of the lookupds a ``/listlookup`` answer names (Youzan's
    capitalised keys, ports as strings); none for an empty or upstream answer."""
    try:
        data = _data(body)
    except (ValueError, orjson.JSONDecodeError):
        return []
    nodes = data.get("lookupdnodes")
    found: list[str] = []
    for node in nodes if isinstance(nodes, list) else []:
        if not isinstance(node, dict):
            continue
        host, port = node.get("NodeIP"), node.get("HttpPort")
        if isinstance(host, str) and host and isinstance(port, str) and port.isdigit():
            found.append(join_host_port(host, int(port)))
    return found


def merge(placements: Sequence[Placement]) -> Placement:
    """Several lookupds' answers as one: every target any of them names."""
    targets = _without_shadowed(target for placement in placements for target in placement.targets)
    counts = [p.partition_count for p in placements if p.partition_count is not None]
    return Placement(
        targets,
        max(counts) if counts else None,
        any(p.ordered for p in placements),
        any(p.extend_support for p in placements),
    )


class Discovery:
    """Keeps one topic's :class:`Placement` from the lookupds at ``lookupd_addresses``.

    ``access`` is ``"r"`` for consumers and ``"w"`` for producers (Youzan's
    lookupd leaves out what may not be written); upstream lookupds ignore it.
    """

    def __init__(
        self,
        lookupd_addresses: Sequence[str],
        topic: str,
        access: str,
        *,
        interval: float = LOOKUP_INTERVAL,
        on_change: Callable[[Placement], None] | None = None,
    ) -> None:
        if not lookupd_addresses:
            raise NsqConfigError("discovery needs at least one lookupd HTTP address")
        self.configured = list(lookupd_addresses)
        self.topic = topic
        self.access = access
        self.interval = interval
        self.placement = Placement()
        self.lookups = 0
        """Completed lookup rounds (for tests and stats)."""
        self.on_change = on_change
        """Called with the new placement when a lookup changes it."""
        self._failures: dict[str, int] = {}
        self._last_error: Exception | None = None
        """What the last lookupd that failed said (the cause of a failed round)."""
        self._wanted = trio.Event()
        self._looked = trio.Event()

    def refresh(self) -> None:
        """Look again soon (at most once a second), not at the next interval."""
        self._wanted.set()

    async def wait_lookup(self) -> Placement:
        """The placement after the next lookup round completes."""
        await self._looked.wait()
        return self.placement

    async def lookup(self) -> Placement:
        """One round: find the lookupds, ask each, merge, and remember the answer.

        Raises:
            NsqDiscoveryError: none of them answered (``__cause__``: the last error).
        """
        listed = await self._listed()
        answers = await self._ask(listed or self.configured)
        if not answers and listed:  # the names they gave may not resolve from here
            answers = await self._ask(self.configured)
        if not answers:
            raise NsqDiscoveryError(
                f"no lookupd answered about {self.topic!r}: {self.configured}"
            ) from self._last_error
        placement = merge(answers)
        changed = placement != self.placement
        self.placement = placement
        self.lookups += 1
        self._looked.set()
        self._looked = trio.Event()
        if changed and self.on_change is not None:
            self.on_change(placement)
        return placement

    async def _listed(self) -> list[str]:
        """Every lookupd the first answering ``/listlookup`` names (none upstream)."""
        for address in self.configured:
            try:
                reply = await http_get(
                    address,
                    "/listlookup",
                    connect_timeout=HTTP_TIMEOUT,
                    request_timeout=HTTP_TIMEOUT,
                )
            except HttpClientError:
                continue
            found = parse_listlookup(reply.body) if reply.status == 200 else []
            if found:
                return found
        return []

    async def _ask(self, lookupds: Sequence[str]) -> list[Placement]:
        """Each lookupd's answer (those that failed more often are asked last)."""
        answers: list[Placement] = []
        query = urllib.parse.urlencode({"topic": self.topic, "access": self.access})
        for address in sorted(lookupds, key=lambda address: self._failures.get(address, 0)):
            try:
                reply = await http_get(
                    address,
                    f"/lookup?{query}&metainfo=true",
                    connect_timeout=HTTP_TIMEOUT,
                    request_timeout=HTTP_TIMEOUT,
                )
                if reply.status == 404:  # upstream: the topic is not registered yet
                    answers.append(Placement())
                elif reply.status != 200:
                    raise HttpClientError(address, f"HTTP {reply.status}: {reply.body[:200]!r}")
                else:
                    answers.append(parse_lookup(reply.body))
                self._failures.pop(address, None)
            except (HttpClientError, ValueError) as error:
                self._failures[address] = self._failures.get(address, 0) + 1
                self._last_error = error
                log.warning("lookupd %s: %s", address, error)
        return answers

    async def nodes(self) -> list[Target]:
        """Every nsqd the first answering lookupd knows, topic or not."""
        for address in self.configured:
            try:
                reply = await http_get(
                    address, "/nodes", connect_timeout=HTTP_TIMEOUT, request_timeout=HTTP_TIMEOUT
                )
                if reply.status == 200:
                    return parse_nodes(reply.body)
            except (HttpClientError, ValueError) as error:
                log.warning("lookupd %s: %s", address, error)
        return []

    async def run(self) -> None:
        """Look again every ``interval`` seconds, or soon after :meth:`refresh`."""
        while True:
            with trio.move_on_after(self.interval):
                await self._wanted.wait()
            self._wanted = trio.Event()
            try:
                await self.lookup()
            except NsqDiscoveryError as error:
                log.warning("%s", error)
            await trio.sleep(REFRESH_FLOOR)


def parse_nodes(body: bytes) -> list[Target]:
    """Every nsqd a ``/nodes`` answer lists (where a new topic can be published
    upstream, since nsqd creates topics on the first PUB)."""
    data = _data(body)
    producers = data.get("producers")
    found = [_peer_address(peer) for peer in producers] if isinstance(producers, list) else []
    return sorted({Target(address) for address in found if address is not None})


def __getattr__(name: str) -> type[NsqClientError]:
    """``LookupError_``, the old name of :class:`NsqDiscoveryError` (deprecated)."""
    return renamed(__name__, name)
