"""The lookupd's calls to brokers: making managed topics exist where they are placed.

The catalog (topics.py) says which placed broker has not confirmed a topic's
current meta; this module makes the HTTP call (``POST /topic/create`` with every
partition, ``ext`` and ``ordered``; ``POST /topic/delete``) and records the answer.
A call that fails leaves the broker pending: it is retried when that broker next
registers or pings (IDENTIFY makes all its topics pending again, since a restarted
broker may have lost them). A broker's own HTTP API is idempotent for these calls.

The HTTP client is deliberately tiny (one request per connection, h11), enough
for these calls and owned by the lookupd.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

import attrs
import trio

from ..addresses import join_host_port
from ..http.client import HttpClientError, http_request
from .registry import RegistrationDB
from .topics import TopicCatalog

if TYPE_CHECKING:
    from .registry import Peer
    from .topics import ManagedTopic

__all__ = ["BrokerCallError", "BrokerSync", "http_get", "http_post"]

log = logging.getLogger("trionsq.lookupd")

CALL_TIMEOUT: Final = 5.0
"""Longest a broker call may take (connect, send, answer) before it counts as failed."""
REPLY_LIMIT: Final = 64 * 1024
"""Reply body bytes kept; a broker's answers to these calls are tiny."""


class BrokerCallError(Exception):
    """A broker call that did not get an HTTP answer (refused, timed out, garbled)."""


async def http_post(
    host: str, port: int, target: str, *, seconds: float = CALL_TIMEOUT
) -> tuple[int, bytes]:
    """POST ``target`` with an empty body; (status, body up to REPLY_LIMIT).

    Raises:
        BrokerCallError: no complete answer within ``seconds``.
    """
    return await _call("POST", host, port, target, seconds)


async def http_get(
    host: str, port: int, target: str, *, seconds: float = CALL_TIMEOUT
) -> tuple[int, bytes]:
    """GET ``target``; (status, body up to REPLY_LIMIT). Raises BrokerCallError."""
    return await _call("GET", host, port, target, seconds)


async def _call(
    method: str, host: str, port: int, target: str, seconds: float
) -> tuple[int, bytes]:
    try:
        reply = await http_request(
            method,
            join_host_port(host, port),
            target,
            connect_timeout=seconds,
            request_timeout=seconds,
            max_reply_bytes=REPLY_LIMIT,
        )
    except HttpClientError as error:
        raise BrokerCallError(error.reason) from error
    return reply.status, reply.body


@attrs.define(eq=False)
class BrokerSync:
    """Tells placed brokers about their managed topics; the server gives it a nursery."""

    catalog: TopicCatalog
    registry: RegistrationDB
    clock: Callable[[], float]
    timeout: float = attrs.field(default=CALL_TIMEOUT, kw_only=True)
    nursery: trio.Nursery | None = attrs.field(init=False, default=None)
    """Where retries run (``serve_lookupd`` sets it); None: no background retries."""
    _in_flight: set[str] = attrs.field(init=False, factory=set)

    def _live_nodes(self) -> set[str]:
        return {peer.node for peer in self.registry.active_peers(self.clock())}

    async def sync_topic(self, topic: ManagedTopic) -> None:
        """Tell every connected placed broker that has not confirmed the topic, at once."""
        live = self._live_nodes()
        nodes = [node for node in topic.nodes() if node in live and node not in topic.synced]
        async with trio.open_nursery() as nursery:
            for node in nodes:
                nursery.start_soon(self._create_on, topic, node)

    async def _create_on(self, topic: ManagedTopic, node: str) -> bool:
        broker = topic.broker(node)
        target = topic.creation_target()
        try:
            status, body = await http_post(
                broker.broadcast_address, broker.http_port, target, seconds=self.timeout
            )
        except BrokerCallError as error:
            log.warning("broker %s: %s failed, retried when it registers: %s", node, target, error)
            return False
        if status != 200:
            log.warning(
                "broker %s: %s answered %d %r, retried when it registers",
                node,
                target,
                status,
                body[:200],
            )
            return False
        # only if nothing changed meanwhile (an ext upgrade, a delete)
        if self.catalog.get(topic.name) is topic and topic.creation_target() == target:
            topic.synced.add(node)
        log.info("broker %s: %s OK", node, target)
        return True

    def broker_identified(self, peer: Peer) -> None:
        """A broker (re)connected: it may have restarted empty, tell it everything again."""
        if not self.catalog.topics_on(peer.node):
            return
        self.catalog.forget_synced(peer.node)
        self._spawn(peer.node)

    def broker_registered(self, peer: Peer) -> None:
        """A REGISTER or PING: retry what that broker has not confirmed, unless at it.

        PING too, so a broker whose HTTP port was not up at IDENTIFY gets its topics
        within one ping interval even if it registers nothing new.
        """
        if peer.node not in self._in_flight and self.catalog.pending(peer.node):
            self._spawn(peer.node)

    def _spawn(self, node: str) -> None:
        if self.nursery is None or node in self._in_flight:
            return
        self._in_flight.add(node)
        self.nursery.start_soon(self._sync_node, node, name=f"lookupd broker call {node}")

    async def _sync_node(self, node: str) -> None:
        """Create every pending topic on that node, one after another; stop at a failure."""
        try:
            for topic in self.catalog.pending(node):
                if self.catalog.get(topic.name) is not topic:
                    continue  # deleted meanwhile: do not create it again
                if not await self._create_on(topic, node):
                    return
        finally:
            self._in_flight.discard(node)

    async def delete_on(self, topic: str, nodes: list[tuple[str, int]]) -> list[str]:
        """``POST /topic/delete`` on each (address, http port); the ones that failed.

        A broker without the topic (404) counts as done. Not retried: the lookupd
        forgets the topic, a broker that missed it keeps its copy until deleted there.
        """
        failed: list[str] = []

        async def one(host: str, port: int) -> None:
            try:
                status, body = await http_post(
                    host, port, f"/topic/delete?topic={quote(topic, safe='')}", seconds=self.timeout
                )
            except BrokerCallError as error:
                log.warning("broker %s:%d: deleting %s failed: %s", host, port, topic, error)
                failed.append(f"{host}:{port}")
                return
            if status not in (200, 404):
                log.warning(
                    "broker %s:%d: deleting %s answered %d %r", host, port, topic, status, body
                )
                failed.append(f"{host}:{port}")

        async with trio.open_nursery() as nursery:
            for host, port in nodes:
                nursery.start_soon(one, host, port)
        return failed
