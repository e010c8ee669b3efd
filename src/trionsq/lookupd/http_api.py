"""nsqlookupd's HTTP endpoints (spec http-api.md §4), answered as nsqlookupd does.

Routing is exact-path then method (404 ``NOT_FOUND``, 405 ``METHOD_NOT_ALLOWED``);
query checks run in nsqlookupd's order with its texts and codes. The read
endpoints (/info, /debug, /lookup, /topics, /channels, /nodes) answer in the
pre-1.0 ``status_code/status_txt/data`` envelope when the request's Accept header
asks for it (messages.py), as old nsqlookupd and Youzan's do; the POST endpoints
and /ping always answer as upstream 1.x.

Youzan's additions (http-api.md §5), standalone: ``/topic/create`` with
``partition_num``/``replicator`` records and places a partitioned topic and tells
the chosen brokers (topics.py, brokers.py); ``/lookup`` with ``access``,
``metainfo`` or ``partition`` (or for such a topic) answers Youzan's shape;
``/listlookup``, ``/topic/meta/update``, ``/topic/partition/expand``,
``/topics?metaInfo=true`` and ``/topic/delete?partition=**``. Requests without
Youzan's parameters on topics not created that way get nsqlookupd's answers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

import attrs
import orjson

from ..admin_page_files import ADMIN_PAGE as ADMIN_PAGE  # importable from here as before
from ..durations import parse_duration
from ..http.messages import JSON_CONTENT_TYPE, V1_HEADER, Request, Response
from ..http.static import static_routes
from ..protocol.lookupd import LookupdInfo
from ..protocol.names import is_valid_name
from ..version import NSQD_RELEASE, TRIONSQ_VERSION
from . import groups
from .broker_stats import broker_stats
from .brokers import BrokerSync
from .registry import TOPIC, RegistrationDB
from .replicated import ReplicatedTopics, ReplicationRefused
from .topics import (
    MAX_PARTITION_NUM,
    PLAIN_META,
    ArgError,
    PlacedBroker,
    PlacementError,
    TopicCatalog,
    parse_create_args,
    parse_update_args,
    youzan_lookup,
)

if TYPE_CHECKING:
    from .registry import Producer

__all__ = ["GO_ZERO_TIME_UNIX_NANO", "LEGACY_ENDPOINTS", "LookupdHttpApi"]

log = logging.getLogger("trionsq.lookupd")

BODY_LIMIT: Final = 64 * 1024
"""Body bytes read (and ignored) per request; nsqlookupd reads any size, unused."""

MOVE_TIMEOUT: Final = 60.0
"""How long ``/topic/partition/move`` waits for the new replica to catch up, unless
``timeout`` says otherwise."""
LEGACY_ENDPOINTS: Final = frozenset(
    {"/info", "/debug", "/lookup", "/topics", "/channels", "/nodes", "/listlookup"}
)
"""The endpoints nsqlookupd 0.3 (and Youzan's) answered in the old envelope."""
GO_ZERO_TIME_UNIX_NANO: Final = -6795364578871345152
"""What Go's ``time.Time{}.UnixNano()`` gives: ``/debug``'s ``tombstoned_at`` of a
producer never tombstoned."""


class HttpError(Exception):
    """A handler's refusal: status and nsqlookupd's text."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _arg(request: Request, name: str, missing: str) -> str:
    """A required query parameter (present, possibly empty), as nsqlookupd's ``Get``."""
    value = request.arg(name)
    if value is None:
        raise HttpError(400, missing)
    return value


def _parsed(request: Request) -> None:
    """nsqlookupd parses the query first: a query Go cannot parse is 400."""
    if not request.query_valid:
        raise HttpError(400, "INVALID_REQUEST")


def _topic_channel(request: Request) -> tuple[str, str]:
    """The ``topic`` and ``channel`` parameters, both required and valid names."""
    _parsed(request)
    topic = _arg(request, "topic", "MISSING_ARG_TOPIC")
    if not is_valid_name(topic.encode("utf-8", "surrogateescape")):
        raise HttpError(400, "INVALID_ARG_TOPIC")
    channel = _arg(request, "channel", "MISSING_ARG_CHANNEL")
    if not is_valid_name(channel.encode("utf-8", "surrogateescape")):
        raise HttpError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


def _own_brokers(api: LookupdHttpApi) -> BrokerSync:
    """The broker calls of an API given none: over its own catalog and registry."""
    return BrokerSync(api.catalog, api.registry, api.clock)


@attrs.define(eq=False)
class LookupdHttpApi:
    """Routes and handlers over one registry; ``clock`` is the registry's time base.

    ``catalog`` holds the topics created with partitions, ``brokers`` makes the calls
    to brokers, ``info`` (this lookupd's addresses) feeds ``/listlookup``.
    """

    registry: RegistrationDB
    clock: Callable[[], float]
    catalog: TopicCatalog = attrs.field(factory=TopicCatalog, kw_only=True)
    brokers: BrokerSync = attrs.field(
        default=attrs.Factory(_own_brokers, takes_self=True), kw_only=True
    )
    info: LookupdInfo | None = attrs.field(default=None, kw_only=True)
    replicated: ReplicatedTopics | None = attrs.field(default=None, kw_only=True)
    """The cluster's topics (``--etcd-endpoints``; None: none)."""
    min_isr: int = attrs.field(default=1, kw_only=True)
    routes: dict[str, dict[str, Callable[[Request], Awaitable[Response]]]] = attrs.field(init=False)

    @routes.default
    def _routes(self) -> dict[str, dict[str, Callable[[Request], Awaitable[Response]]]]:
        return {
            "/ping": {"GET": self._ping},
            "/info": {"GET": self._info},
            "/debug": {"GET": self._debug},
            "/lookup": {"GET": self._lookup},
            "/topics": {"GET": self._topics},
            "/channels": {"GET": self._channels},
            "/group": {"GET": self._group},
            "/nodes": {"GET": self._nodes},
            "/listlookup": {"GET": self._listlookup},
            "/topic/create": {"POST": self._topic_create, "PUT": self._topic_create},
            "/topic/delete": {"POST": self._topic_delete},
            "/topic/meta/update": {"POST": self._topic_meta_update},
            "/topic/partition/expand": {"POST": self._topic_partition_expand},
            "/topic/partition/move": {"POST": self._topic_partition_move},
            "/channel/create": {"POST": self._channel_create},
            "/channel/delete": {"POST": self._channel_delete},
            "/topic/tombstone": {"POST": self._topic_tombstone},
            "/admin/broker_stats": {"GET": self._broker_stats},
            **static_routes("trionsq", ADMIN_PAGE),
        }

    # ------------------------------------------------------------- connection hooks

    def body_limit(self, head: Request, length: int | None) -> Response | int:
        """Every route ignores its body: read a bounded amount of it."""
        return BODY_LIMIT

    async def dispatch(self, request: Request) -> Response:
        """Route by exact path, then method (httprouter: 404, then 405)."""
        methods = self.routes.get(request.path)
        if methods is None:
            return Response.error(404, "NOT_FOUND")
        handler = methods.get(request.method)
        if handler is None:
            return Response.error(405, "METHOD_NOT_ALLOWED")
        try:
            return await handler(request)
        except HttpError as error:
            if request.legacy and request.path in LEGACY_ENDPOINTS:
                return Response.legacy_error(error.message)
            return Response.error(error.status, error.message)

    @staticmethod
    def _ok(request: Request, value: object) -> Response:
        """A read endpoint's object, in the envelope the request asked for."""
        if request.legacy:
            return Response.legacy_ok(value)
        return Response.json(value)

    # ------------------------------------------------------------- read endpoints

    async def _ping(self, request: Request) -> Response:
        return Response.plain("OK")

    async def _info(self, request: Request) -> Response:
        return self._ok(request, {"version": NSQD_RELEASE, "trionsq_version": TRIONSQ_VERSION})

    async def _topics(self, request: Request) -> Response:
        topics = self.registry.topics()
        if not request.arg("metaInfo"):
            return self._ok(request, {"topics": topics})
        meta_info = []
        for name in topics:
            managed = self.catalog.get(name)
            meta = managed.meta if managed is not None else PLAIN_META
            meta_info.append(
                {
                    "topic_name": name,
                    "extend_support": meta.extend_support,
                    "ordered": meta.ordered,
                    "multi_part": meta.multi_part,
                    "disable_channel_auto_create": meta.disable_channel_auto_create,
                }
            )
        return self._ok(request, {"topics": topics, "meta_info": meta_info})

    async def _listlookup(self, request: Request) -> Response:
        """Standalone: this lookupd is the only node, and the leader (Youzan's shape)."""
        info = self.info
        node = {
            "ID": f"{info.broadcast_address}:{info.http_port}" if info is not None else "",
            "NodeIP": info.broadcast_address if info is not None else "",
            "TcpPort": str(info.tcp_port) if info is not None else "",
            "HttpPort": str(info.http_port) if info is not None else "",
            "RpcPort": "",
            "Epoch": 0,
        }
        return self._ok(request, {"lookupdnodes": [node], "lookupdleader": node})

    async def _channels(self, request: Request) -> Response:
        _parsed(request)
        topic = _arg(request, "topic", "MISSING_ARG_TOPIC")
        return self._ok(request, {"channels": self.registry.channels(topic)})

    async def _group(self, request: Request) -> Response:
        """trionsq's consumer groups: the channel's group as all the topic's brokers
        deal it (lookupd/groups.py)."""
        topic, channel = _topic_channel(request)
        found = self.registry.lookup(topic, self.clock())
        if found is None:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        addresses = sorted(
            {(p.peer.info.broadcast_address, p.peer.info.http_port) for p in found[1]}
        )
        parts = await groups.gather(addresses, topic, channel)
        return self._ok(request, groups.group_document(topic, channel, parts))

    async def _lookup(self, request: Request) -> Response:
        _parsed(request)
        topic = _arg(request, "topic", "MISSING_ARG_TOPIC")
        access = request.arg("access")
        metainfo = request.arg("metainfo")
        partition = request.arg("partition")
        replicated = self._replicated_lookup(topic, access, partition, metainfo)
        if replicated is not None:
            if access not in (None, "", "r", "w"):
                raise HttpError(400, "INVALID_ACCESS_MODE")
            return self._ok(request, replicated)
        if (
            access is not None
            or metainfo is not None
            or partition is not None
            or (topic in self.catalog)
        ):
            if access not in (None, "", "r", "w"):
                raise HttpError(400, "INVALID_ACCESS_MODE")
            document = youzan_lookup(
                self.registry,
                self.catalog,
                topic,
                self.clock(),
                write=access == "w",
                partition=partition or "*",
                metainfo=bool(metainfo),
            )
            return self._ok(request, document)
        found = self.registry.lookup(topic, self.clock())
        if found is None:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        channels, producers = found
        document = {
            "channels": channels,
            "producers": [producer.peer.as_json() for producer in producers],
        }
        if request.legacy:
            return Response.legacy_ok(document)
        # the hot path: serialize once, no intermediate Response.json dict juggling
        return Response(
            200, orjson.dumps(document), ((b"Content-Type", JSON_CONTENT_TYPE), V1_HEADER)
        )

    def _replicated_lookup(
        self, topic: str, access: str | None, partition: str | None, metainfo: str | None
    ) -> dict[str, object] | None:
        """A replicated topic's Youzan document: each partition's leader, from etcd."""
        if self.replicated is None:
            return None
        document = self.replicated.lookup(
            topic, write=access == "w", partition=partition or "*", metainfo=bool(metainfo)
        )
        if document is not None:
            document = {"channels": self.registry.channels(topic), **document}
        return document

    async def _nodes(self, request: Request) -> Response:
        nodes = [
            {
                **node.peer.as_json(),
                "tombstones": node.tombstones,
                "topics": node.topics,
            }
            for node in self.registry.nodes(self.clock())
        ]
        return self._ok(request, {"producers": nodes})

    async def _broker_stats(self, request: Request) -> Response:
        """A listed broker's /stats, for the admin page (broker_stats.py)."""
        return await broker_stats(request, self.registry.nodes(self.clock()))

    async def _debug(self, request: Request) -> Response:
        """Every registration with producers: ``"category:key:subkey"`` -> producers.

        Keys come sorted, as Go marshals maps; times are Unix nanoseconds.
        """
        now = self.clock()
        wall_ns = time.time_ns()

        def unix_ns(at: float) -> int:
            return wall_ns - round((now - at) * 1_000_000_000)

        # not Producer._address_fields (registry.py): Go's sorted map keys, other fields
        def entry(producer: Producer) -> dict[str, object]:
            peer = producer.peer
            info = peer.info
            at = producer.tombstoned_at
            return {
                "broadcast_address": info.broadcast_address,
                "hostname": info.hostname,
                "http_port": info.http_port,
                "id": peer.id,
                "last_update": unix_ns(peer.last_update),
                "tcp_port": info.tcp_port,
                "tombstoned": producer.tombstoned,
                "tombstoned_at": GO_ZERO_TIME_UNIX_NANO if at is None else unix_ns(at),
                "topology_region": info.topology_region,
                "topology_zone": info.topology_zone,
                "version": info.version,
            }

        data = {
            f"{key.category}:{key.key}:{key.subkey}": [entry(producer) for producer in producers]
            for key, producers in self.registry.items()
            if producers
        }
        return self._ok(request, dict(sorted(data.items())))

    # ------------------------------------------------------------- write endpoints (V1 only)

    def _candidates(self, topic: str) -> list[PlacedBroker]:
        """Brokers a partition of ``topic`` may go to: active, not tombstoned for it."""
        now = self.clock()
        lifetime = self.registry.tombstone_lifetime
        memberships = {p.peer.id: p for p in self.registry.find_producers(TOPIC, topic, "")}
        candidates = []
        for peer in self.registry.active_peers(now):
            membership = memberships.get(peer.id)
            if membership is None or not membership.is_tombstoned(now, lifetime):
                candidates.append(PlacedBroker.from_peer(peer))
        return candidates

    async def _topic_create(self, request: Request) -> Response:
        _parsed(request)
        if (
            request.method == "PUT"
            or request.arg("partition_num") is not None
            or request.arg("replicator") is not None
        ):
            return await self._topic_create_partitioned(request)
        topic = _arg(request, "topic", "MISSING_ARG_TOPIC")
        if not is_valid_name(topic.encode("utf-8", "surrogateescape")):
            raise HttpError(400, "INVALID_ARG_TOPIC")
        log.info("DB: adding topic(%s)", topic)
        self.registry.create_topic(topic)
        return Response.empty()

    async def _topic_create_partitioned(self, request: Request) -> Response:
        """Youzan's create: record, place on registered brokers, tell them; then 200.
        In a replicated cluster the coordinator places it (``min_isr``: trionsq's own)."""
        if self.replicated is not None:
            try:
                topic, meta = parse_create_args(request.arg)
                min_isr = self.min_isr
                raw = request.arg("min_isr")
                if raw:
                    if not raw.isdigit() or not 1 <= int(raw) <= meta.replica:
                        raise HttpError(400, "INVALID_ARG_MIN_ISR")
                    min_isr = int(raw)
                await self.replicated.create(topic, meta, min_isr)
            except ArgError as error:
                raise HttpError(400, error.message) from None
            except ReplicationRefused as error:
                raise HttpError(400, error.message) from None
            self.registry.create_topic(topic)
            return Response.empty()
        try:
            topic, meta = parse_create_args(request.arg)
            managed, created = self.catalog.create(topic, meta, self._candidates(topic))
        except (ArgError, PlacementError) as error:
            raise HttpError(400, error.message) from None
        if created:
            log.info(
                "DB: adding topic(%s) with %d partitions on %s",
                topic,
                meta.partition_num,
                ", ".join(broker.node for broker in managed.placement),
            )
        self.registry.create_topic(topic)
        await self.brokers.sync_topic(managed)
        return Response.empty()

    async def _topic_meta_update(self, request: Request) -> Response:
        _parsed(request)
        try:
            topic, changes = parse_update_args(request.arg)
            managed = self.catalog.update(topic, **changes)  # type: ignore[arg-type]
        except (ArgError, PlacementError) as error:
            raise HttpError(400, error.message) from None
        await self.brokers.sync_topic(managed)
        return Response.empty()

    async def _topic_partition_expand(self, request: Request) -> Response:
        _parsed(request)
        topic = _arg(request, "topic", "MISSING_ARG_TOPIC")
        raw = request.arg("partition_num")
        if not raw:
            raise HttpError(400, "MISSING_ARG_TOPIC_PARTITION_NUM")
        if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_PARTITION_NUM):
            raise HttpError(400, "INVALID_ARG_TOPIC_PARTITION_NUM")
        try:
            managed = self.catalog.expand(topic, int(raw), self._candidates(topic))
        except PlacementError as error:
            raise HttpError(400, error.message) from None
        await self.brokers.sync_topic(managed)
        return Response.empty()

    async def _topic_partition_move(self, request: Request) -> Response:
        """A replica of a replicated topic's partition to another broker: answered once
        the new one is in sync and the old one has left (docs/replication.md)."""
        _parsed(request)
        if self.replicated is None:
            raise HttpError(400, "NOT_REPLICATED: this lookupd runs without --etcd-endpoints")
        topic = _arg(request, "topic", "MISSING_ARG_TOPIC")
        raw = _arg(request, "partition", "MISSING_ARG_PARTITION")
        if not (raw.isascii() and raw.isdigit() and int(raw) < MAX_PARTITION_NUM):
            raise HttpError(400, "INVALID_ARG_PARTITION")
        source = _arg(request, "from", "MISSING_ARG_FROM")
        target = _arg(request, "to", "MISSING_ARG_TO")
        within = MOVE_TIMEOUT
        if request.arg("timeout"):
            try:
                within = parse_duration(request.arg("timeout") or "")
            except ValueError:
                raise HttpError(400, "INVALID_ARG_TIMEOUT") from None
        try:
            moved = await self.replicated.move(topic, int(raw), source, target, within)
        except ReplicationRefused as error:
            raise HttpError(400, error.message) from None
        return Response.json(moved)

    async def _topic_delete(self, request: Request) -> Response:
        _parsed(request)
        topic = _arg(request, "topic", "MISSING_ARG_TOPIC")
        partition = request.arg("partition")
        managed = self.catalog.get(topic)
        if partition is not None or managed is not None:
            if partition is None or partition == "":
                raise HttpError(400, "MISSING_ARG_TOPIC_PARTITION")
            if partition != "**":
                raise HttpError(400, "REMOVE_SINGLE_PARTITION_NOT_ALLOWED")
            # every broker holding it: the placed ones and any that registered it
            nodes = {
                (p.peer.info.broadcast_address, p.peer.info.http_port)
                for p in self.registry.find_producers(TOPIC, topic, "")
            }
            if managed is not None:
                nodes.update((b.broadcast_address, b.http_port) for b in managed.placement)
            self.catalog.delete(topic)
            failed = await self.brokers.delete_on(topic, sorted(nodes))
            self._forget_topic(topic)
            if failed:
                raise HttpError(500, f"DELETE_TOPIC_FAILED on {', '.join(failed)}")
            return Response.empty()
        self._forget_topic(topic)
        return Response.empty()

    def _forget_topic(self, topic: str) -> None:
        for key in self.registry.delete_topic(topic):
            if key.subkey:
                log.info("DB: removing channel(%s) from topic(%s)", key.subkey, key.key)
            else:
                log.info("DB: removing topic(%s)", key.key)

    async def _channel_create(self, request: Request) -> Response:
        topic, channel = _topic_channel(request)
        log.info("DB: adding channel(%s) in topic(%s)", channel, topic)
        self.registry.create_channel(topic, channel)
        return Response.empty()

    async def _channel_delete(self, request: Request) -> Response:
        topic, channel = _topic_channel(request)
        if not self.registry.delete_channel(topic, channel):
            raise HttpError(404, "CHANNEL_NOT_FOUND")
        log.info("DB: removing channel(%s) from topic(%s)", channel, topic)
        return Response.empty()

    async def _topic_tombstone(self, request: Request) -> Response:
        _parsed(request)
        topic = _arg(request, "topic", "MISSING_ARG_TOPIC")
        node = _arg(request, "node", "MISSING_ARG_NODE")
        log.info("DB: setting tombstone for producer@%s of topic(%s)", node, topic)
        self.registry.tombstone(topic, node, self.clock())
        return Response.empty()
