"""nsqlookupd's HTTP endpoints (spec http-api.md §4), answered as nsqlookupd does.

Routing is exact-path then method (404 ``NOT_FOUND``, 405 ``METHOD_NOT_ALLOWED``);
query checks run in nsqlookupd's order with its texts and codes. The read
endpoints (/info, /debug, /lookup, /topics, /channels, /nodes) answer in the
pre-1.0 ``status_code/status_txt/data`` envelope when the request's Accept header
asks for it (messages.py), as old nsqlookupd and Youzan's do; the POST endpoints
and /ping always answer as upstream 1.x.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Final

import orjson

from .. import __version__
from ..http.messages import JSON_CONTENT_TYPE, V1_HEADER, Response
from ..protocol.names import is_valid_name

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..http.messages import Request
    from .registry import Producer, RegistrationDB

__all__ = ["GO_ZERO_TIME_UNIX_NANO", "LEGACY_ENDPOINTS", "LookupdHttpApi"]

log = logging.getLogger("trionsq.lookupd")

BODY_LIMIT: Final = 64 * 1024
"""Body bytes read (and ignored) per request; nsqlookupd reads any size, unused."""
LEGACY_ENDPOINTS: Final = frozenset(
    {"/info", "/debug", "/lookup", "/topics", "/channels", "/nodes"}
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


class LookupdHttpApi:
    """Routes and handlers over one registry; ``clock`` is the registry's time base."""

    def __init__(self, registry: RegistrationDB, clock: Callable[[], float]) -> None:
        self.registry = registry
        self.clock = clock
        self.routes: dict[str, dict[str, Callable[[Request], Awaitable[Response]]]] = {
            "/ping": {"GET": self._ping},
            "/info": {"GET": self._info},
            "/debug": {"GET": self._debug},
            "/lookup": {"GET": self._lookup},
            "/topics": {"GET": self._topics},
            "/channels": {"GET": self._channels},
            "/nodes": {"GET": self._nodes},
            "/topic/create": {"POST": self._topic_create},
            "/topic/delete": {"POST": self._topic_delete},
            "/channel/create": {"POST": self._channel_create},
            "/channel/delete": {"POST": self._channel_delete},
            "/topic/tombstone": {"POST": self._topic_tombstone},
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
        return self._ok(request, {"version": __version__})

    async def _topics(self, request: Request) -> Response:
        return self._ok(request, {"topics": self.registry.topics()})

    async def _channels(self, request: Request) -> Response:
        _parsed(request)
        topic = _arg(request, "topic", "MISSING_ARG_TOPIC")
        return self._ok(request, {"channels": self.registry.channels(topic)})

    async def _lookup(self, request: Request) -> Response:
        _parsed(request)
        topic = _arg(request, "topic", "MISSING_ARG_TOPIC")
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

    async def _debug(self, request: Request) -> Response:
        """Every registration with producers: ``"category:key:subkey"`` -> producers.

        Keys come sorted, as Go marshals maps; times are Unix nanoseconds.
        """
        now = self.clock()
        wall_ns = time.time_ns()

        def unix_ns(at: float) -> int:
            return wall_ns - round((now - at) * 1_000_000_000)

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

    async def _topic_create(self, request: Request) -> Response:
        _parsed(request)
        topic = _arg(request, "topic", "MISSING_ARG_TOPIC")
        if not is_valid_name(topic.encode("utf-8", "surrogateescape")):
            raise HttpError(400, "INVALID_ARG_TOPIC")
        log.info("DB: adding topic(%s)", topic)
        self.registry.create_topic(topic)
        return Response.empty()

    async def _topic_delete(self, request: Request) -> Response:
        _parsed(request)
        topic = _arg(request, "topic", "MISSING_ARG_TOPIC")
        for key in self.registry.delete_topic(topic):
            if key.subkey:
                log.info("DB: removing channel(%s) from topic(%s)", key.subkey, key.key)
            else:
                log.info("DB: removing topic(%s)", key.key)
        return Response.empty()

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
