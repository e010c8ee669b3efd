"""nsqd's HTTP endpoints (spec http-api.md §2, §3): publish, admin, /info, /stats, /config.

Every handler takes a :class:`Request` and returns a :class:`Response`; checks run
in nsqd's order so the same bad request gets the same status and text. Endpoints
that nsqd ≤ 0.3 answered in the ``status_code/status_txt/data`` envelope (/info,
/pub, /mpub, /stats; Youzan's /pub_ext too) give it to a request that asks for it
(messages.py). Youzan's publishing (``partition``, /pubtrace, /pub_ext) follows
http-api.md §3 with TCP's rules: a named partition must exist, an ordered topic
needs one, and ext headers obey :func:`~trionsq.protocol.check_ext_header`.
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import attrs
import orjson
import trio

from ..broker.dead_letters import dead_topic_name
from ..broker.health import StorageFault
from ..broker.offsets import OffsetError
from ..broker.rate_limits import Rates, batch_size
from ..broker.rules import (
    EXT_TOO_LONG_REASON,
    MAX_PARTITION_NUM,
    Refusal,
    ext_refusal,
    publish_target,
)
from ..config import TlsRequired
from ..durations import parse_duration
from ..http.messages import Request, Response, parse_bool
from ..http.static import static_routes
from ..protocol.broker_errors import pub_failed
from ..protocol.commands import OffsetSpec
from ..protocol.errors import ProtocolError
from ..protocol.ext_header import MAX_TTL_SECONDS, TRACE_ID_KEY, ExtHeader, check_ext_header
from ..protocol.identify import MAX_ATTEMPTS_BOUND, MAX_BYTES_PER_SEC, MAX_MSGS_PER_SEC
from ..protocol.message import EXT_VERSION_JSON
from ..protocol.names import is_ephemeral, is_valid_name
from ..protocol.strconv import go_atoi, go_parse_uint64
from ..version import NSQD_RELEASE, TRIONSQ_VERSION, version_string
from .admin_stream import AdminStream, StreamContext, StreamShared
from .api_args import HttpError, name_arg, parsed_query
from .partition_api import PartitionApi

if TYPE_CHECKING:
    from collections.abc import Awaitable, Sequence

    from ..auth.session import AuthSession
    from ..broker.broker import Broker
    from ..broker.idempotence import Stored
    from ..broker.topic import Record
    from ..config import NsqdConfig
    from .metrics import MetricsRoute

__all__ = ["NsqdHttpApi"]

log = logging.getLogger("trionsq.http")

_INT32: Final = struct.Struct(">i")
SMALL_BODY: Final = 64 * 1024
MAX_AUTH_SESSIONS: Final = 4096
"""HTTP publishers' auth sessions kept (the least recently used go first)."""
"""Body bytes read for endpoints that ignore their body (admin POSTs)."""
LOG_LEVELS: Final = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}
"""nsqd's lg.LogLevel numbers, which /config/log_level reports."""
_TLS_VERSIONS: Final = {"ssl3.0": 0x0300, "tls1.0": 0x0301, "tls1.1": 0x0302}
_TLS_VERSIONS_LATER: Final = {"tls1.2": 0x0303, "tls1.3": 0x0304}
_DURATION_FIELDS: Final = frozenset(
    {
        "msg_timeout",
        "max_msg_timeout",
        "max_req_timeout",
        "client_timeout",
        "max_heartbeat_interval",
        "max_output_buffer_timeout",
        "min_output_buffer_timeout",
        "output_buffer_timeout",
        "sync_timeout",
        "http_client_connect_timeout",
        "http_client_request_timeout",
        "statsd_interval",
        "e2e_processing_latency_window_time",
        "queue_scan_interval",
        "queue_scan_refresh_interval",
    }
)
ADMIN_PAGE: Final = {
    "/admin": "admin_page/index.html",
    "/admin/": "admin_page/index.html",
    "/admin/admin.js": "admin_page/admin.js",
    "/admin/admin_dom.js": "admin_page/admin_dom.js",
    "/admin/admin_views.js": "admin_page/admin_views.js",
    "/admin/admin.css": "admin_page/admin.css",
}
"""The admin page's files (docs/admin.md), by path; lookupd serves the same."""
LEGACY_ENDPOINTS: Final = frozenset({"/info", "/pub", "/mpub", "/stats", "/pub_ext"})
"""Where nsqd ≤ 0.3 (and Youzan, for /pub_ext) answered in the status_code/status_txt/data
envelope; /pubtrace is V1 only."""
_SINGLE_MESSAGE: Final = frozenset({"/pub", "/pubtrace", "/pub_ext"})
"""Endpoints whose body is one message: bounded by max-msg-size."""
_NSQEXT_PREFIX: Final = "x-nsqext-"
"""Request headers that add a key to /pub_ext's JSON header (names are lower-cased)."""
_CFG_NAMES: Final = {"id": "node_id", "nsqlookupd_tcp_addresses": "lookupd_tcp_addresses"}
"""Config-file names that differ from the field (flag) name."""
_NOT_CFG_NAMES: Final = frozenset(
    {
        *_CFG_NAMES.values(),
        "queue_scan_interval",
        "queue_scan_refresh_interval",
        "queue_scan_dirty_percent",
        "client_timeout",
        "persist",
        "retention",
        "trace_log",
        "idempotency_window",
        "group_rebalance_delay",
        "admin_stream",
        "admin_secret",
        "admin_allowed_origins",
        "admin_max_subscribers",
    }
)
"""Fields /config does not know by their own name: renamed, or without a flag in nsqd."""


@attrs.define
class RuntimeOptions:
    """The two options nsqd lets ``PUT /config/:opt`` change while running."""

    log_level: str
    lookupd_tcp_addresses: tuple[str, ...]
    lookupd_changed: Callable[[tuple[str, ...]], None] | None = attrs.field(
        default=None, eq=False, repr=False
    )
    """Told each new address list: the broker's lookupd peers follow it, as nsqd's do."""


class NsqdHttpApi:
    """Routes and handlers for one listener (plain HTTP or HTTPS) of one broker."""

    def __init__(
        self,
        broker: Broker,
        config: NsqdConfig,
        *,
        started_at: float,
        ports: Callable[[], tuple[int, int]],
        https_port: Callable[[], int | None],
        is_https: bool = False,
        runtime: RuntimeOptions | None = None,
        admin: StreamShared,
    ) -> None:
        self.broker = broker
        self.config = config
        self.started_at = started_at
        self._ports = ports
        """(tcp port, http port) as bound, for /info."""
        self._https_port = https_port
        self.is_https = is_https
        self.runtime = runtime or RuntimeOptions(config.log_level, config.lookupd_tcp_addresses)
        self._auth_sessions: dict[tuple[str, str, bool], AuthSession] = {}
        """HTTP publishers' auth grants by (secret, client IP, https), oldest first."""
        self._metrics_route: MetricsRoute | None = None
        """/metrics' private registry, made at the first scrape."""
        post_ignoring_body: dict[str, Callable[[Request], Awaitable[Response]]] = {
            "/topic/create": self._topic_create,
            "/topic/delete": self._topic_delete,
            "/topic/empty": self._topic_empty,
            "/topic/pause": self._topic_pause,
            "/topic/unpause": self._topic_unpause,
            "/channel/create": self._channel_create,
            "/channel/delete": self._channel_delete,
            "/channel/empty": self._channel_empty,
            "/channel/pause": self._channel_pause,
            "/channel/dead_letter": self._channel_dead_letter,
            "/topic/ttl": self._topic_ttl,
            "/channel/rate_limit": self._channel_rate_limit,
            "/topic/publish_limit": self._topic_publish_limit,
            "/channel/unpause": self._channel_unpause,
        }
        self.routes: dict[str, dict[str, Callable[[Request], Awaitable[Response]]]] = {
            "/ping": {"GET": self._ping},
            "/info": {"GET": self._info},
            "/pub": {"POST": self._pub},
            "/mpub": {"POST": self._mpub},
            "/pubtrace": {"POST": self._pubtrace},
            "/pub_ext": {"POST": self._pub_ext},
            "/channel/setoffset": {"POST": self._channel_setoffset},
            "/stats": {"GET": self._stats},
            "/metrics": {"GET": self._metrics},
            **{path: {"POST": handler} for path, handler in post_ignoring_body.items()},
            **static_routes("trionsq", ADMIN_PAGE),
        }
        self.routes.update(PartitionApi(broker, self._authorize_reader).routes)
        self.admin_stream = AdminStream(
            StreamContext(
                broker,
                dispatch=self.dispatch,
                shared=admin,
                scheme="https" if is_https else "http",
                hello=self._hello_for_stream,
                authenticate=self.auth_session if config.auth_http_addresses else None,
            )
        )
        """``/admin/stream``: the HTTP loop hands it the websocket upgrades."""

    # ------------------------------------------------------------- connection hooks

    def body_limit(self, head: Request, length: int | None) -> Response | int:
        """Most body bytes the route reads (+1 to detect "too big"), or a refusal."""
        config = self.config
        method, path = head.method, head.path
        if self._tls_refused() and length:
            return self._tls_required()  # nsqd refuses before reading: so no body is read
        # only a POST gets past the router to the handler's Content-Length check
        declared = length if length is not None and method == "POST" else 0
        if path in _SINGLE_MESSAGE:
            if declared > config.max_msg_size:
                return self._refusal(head, 413, "MSG_TOO_BIG")
            return config.max_msg_size + 1
        if path == "/mpub":
            if declared > config.max_body_size:
                return self._refusal(head, 413, "BODY_TOO_BIG")
            return config.max_body_size + 1
        if path.startswith("/config/"):
            return config.max_msg_size + 1
        return SMALL_BODY

    @staticmethod
    def _refusal(request: Request, status: int, message: str) -> Response:
        """An error in the form the request asked for (legacy endpoints: a 500 envelope)."""
        if request.legacy and request.path in LEGACY_ENDPOINTS:
            return Response.legacy_error(message)
        return Response.error(status, message)

    async def dispatch(self, request: Request) -> Response:
        """Route by exact path, then method (httprouter: 404, then 405)."""
        if self._tls_refused():
            return self._tls_required()
        path = request.path
        methods = self.routes.get(path)
        handler = methods.get(request.method) if methods is not None else None
        if handler is None:
            if path.startswith("/config/") and path.count("/") == 2 and path != "/config/":
                return self._config(request, path.removeprefix("/config/"))
            if methods is None:
                return Response.error(404, "NOT_FOUND")
            return Response.error(405, "METHOD_NOT_ALLOWED")
        try:
            return await handler(request)
        except HttpError as error:
            return self._refusal(request, error.status, error.message)
        except StorageFault as fault:  # logged once per episode by the broker's health
            return self._refusal(request, 500, f"{_failed_verb(path)}_FAILED {fault.reason}")

    def _tls_refused(self) -> bool:
        """Plain HTTP while TLS is required: every request gets the 403."""
        return self.config.effective_tls_required is TlsRequired.YES and not self.is_https

    def _tls_required(self) -> Response:
        body = b'{"message": "TLS_REQUIRED", "https_port": %d}' % (self._https_port() or 0)
        response = Response.json(None, 403)
        return attrs.evolve(response, body=body)

    # ------------------------------------------------------------- simple endpoints

    async def _ping(self, request: Request) -> Response:
        health = self.broker.health
        if health != "OK":  # nsqd: 500 with the last storage error while unhealthy
            return attrs.evolve(Response.plain(health), status=500)
        return Response.plain("OK")

    async def _info(self, request: Request) -> Response:
        config = self.config
        tcp_port, http_port = self._ports()
        info = {
            "version": NSQD_RELEASE,
            "broadcast_address": config.broadcast_address,
            "hostname": socket.gethostname(),
            "http_port": http_port,
            "tcp_port": tcp_port,
            "start_time": int(self.started_at),
            "max_heartbeat_interval": _ns(config.max_heartbeat_interval),
            "max_output_buffer_size": config.max_output_buffer_size,
            "max_output_buffer_timeout": _ns(config.max_output_buffer_timeout),
            "max_deflate_level": config.max_deflate_level,
            "topology_zone": config.topology_zone,
            "topology_region": config.topology_region,
            "trionsq_version": TRIONSQ_VERSION,
        }
        return Response.legacy_ok(info) if request.legacy else Response.json(info)

    async def _stats(self, request: Request) -> Response:
        from .stats import stats_document, stats_text  # not needed to start answering

        parsed_query(request)
        include_clients = parse_bool(request.arg("include_clients"), default=True)
        include_mem = parse_bool(request.arg("include_mem"), default=True)
        options = {
            "started_at": self.started_at,
            "health": self.broker.health,
            "topic": request.arg("topic") or None,
            "channel": request.arg("channel") or None,
            "include_clients": True if include_clients is None else include_clients,
            "include_mem": True if include_mem is None else include_mem,
        }
        if request.arg("format") != "json":
            text = stats_text(self.broker, version_line=version_string("nsqd"), **options)  # type: ignore[arg-type]
            return Response.legacy_ok(text) if request.legacy else Response.text(text)
        document = stats_document(self.broker, version=NSQD_RELEASE, **options)  # type: ignore[arg-type]
        return Response.legacy_ok(document) if request.legacy else Response.json(document)

    async def _metrics(self, request: Request) -> Response:
        """Open like /stats, even with AUTH on (docs/admin.md)."""
        from .metrics import MetricsRoute  # prometheus_client: loaded at the first scrape

        if self._metrics_route is None:
            self._metrics_route = MetricsRoute(self.broker, started_at=self.started_at)
        return await self._metrics_route.get(request)

    def _hello_for_stream(self) -> dict[str, object]:
        tcp_port, http_port = self._ports()
        return {
            "version": NSQD_RELEASE,
            "trionsq_version": TRIONSQ_VERSION,
            "hostname": socket.gethostname(),
            "broadcast_address": self.config.broadcast_address,
            "tcp_port": tcp_port,
            "http_port": http_port,
            "start_time": int(self.started_at),
        }

    # ------------------------------------------------------------- publishing

    def _publish_target(
        self, request: Request, *, create: bool, invalid: str = "INVALID_TOPIC"
    ) -> tuple[str, int]:
        """The topic and partition index a publish goes to (spec http-api §3).

        No ``partition`` (or empty, or -1): the default partition 0, refused on an
        ordered topic as TCP refuses it; ``create``: a plain topic is created then,
        as nsqd's GetTopic does even if the rest of the request is refused. A named
        partition is Youzan's and never creates: it must exist.
        """
        name = name_arg(parsed_query(request), "topic", invalid=invalid)
        partition = _partition_arg(request)
        target = publish_target(self.broker.topics, name, partition, create=create)
        if target is Refusal.BAD_PARTITION:
            raise HttpError(400, "E_BAD_PARTITION")
        if type(target) is not int:
            raise HttpError(404, "E_TOPIC_NOT_EXIST")
        if name not in self.broker.topics:
            self.broker.topic(name)
        return name, target

    async def _authorize_publish(
        self,
        request: Request,
        verb: str = "PUB",
        *,
        invalid: str = "INVALID_TOPIC",
        channel: str = "",
    ) -> None:
        """With --auth-http-address, publishing over HTTP needs a secret too.

        nsqd checks only TCP clients, which leaves HTTP publishing open; here the
        secret comes as ``Authorization: Bearer <secret>`` (or ``auth_secret=``) and
        is checked like TCP's AUTH + PUB, the grants kept per secret and client
        address until their ttl. 401 without a working secret, 403 when the grants
        do not cover the topic; checked before the topic is created, as TCP's MPUB.
        With a ``channel``, the grants must allow subscribing to it instead (readers
        by offset, server/partition_api.py).
        """
        if not self.config.auth_http_addresses:
            return
        topic = name_arg(parsed_query(request), "topic", invalid=invalid)  # its errors first
        bearer = request.headers.get("authorization", "")
        secret = bearer[7:] if bearer[:7].lower() == "bearer " else request.arg("auth_secret")
        if not secret:
            raise HttpError(401, f"E_AUTH_FIRST AUTH required before {verb}")
        session = await self.auth_session(secret, request.remote_address)
        error = await session.check(verb, topic, channel)
        if error is not None:
            raise HttpError(403 if error.code == "E_UNAUTHORIZED" else 401, error.text)

    async def auth_session(self, secret: str, remote_address: str) -> AuthSession:
        """The grants of ``secret`` for a client at ``remote_address`` (kept per secret
        and client IP until their ttl); HttpError 401 when the auth server refuses it."""
        key = (secret, remote_address.rpartition(":")[0], self.is_https)
        session = self._auth_sessions.pop(key, None)  # re-inserted: most recent last
        if session is None:
            from ..auth.session import AuthSession  # loaded only where AUTH is on

            session = AuthSession(self.config, remote_address=remote_address, tls=self.is_https)
            answer = await session.authenticate(secret.encode("utf-8", "surrogateescape"))
            if isinstance(answer, ProtocolError):
                raise HttpError(401, answer.text)
        self._auth_sessions[key] = session
        while len(self._auth_sessions) > MAX_AUTH_SESSIONS:
            del self._auth_sessions[next(iter(self._auth_sessions))]
        return session

    async def _authorize_reader(self, request: Request, verb: str, reader: str) -> None:
        """AUTH for ``/partition/...``: a subscribe to the topic as channel ``reader``."""
        await self._authorize_publish(request, verb, invalid="INVALID_ARG_TOPIC", channel=reader)

    async def _pub(self, request: Request) -> Response:
        body = request.body
        if len(body) > self.config.max_msg_size:
            raise HttpError(413, "MSG_TOO_BIG")
        if not body:
            raise HttpError(400, "MSG_EMPTY")
        await self._authorize_publish(request)
        topic, partition = self._publish_target(request, create=True)
        now = self.broker.wall_clock()
        deliver_at = 0
        if "defer" in request.query:
            defer_ms = _go_int64(request.query["defer"][0])
            max_ms = int(self.config.max_req_timeout * 1000)
            if defer_ms is None or not 0 <= defer_ms <= max_ms:
                raise HttpError(400, "INVALID_DEFER")
            if defer_ms:
                deliver_at = now + defer_ms * 1_000_000
        self._check_publish_limit(topic, (body,))
        self.broker.publish(topic, [body], now, deliver_at=deliver_at, partition_index=partition)
        return Response.legacy_ok("OK") if request.legacy else Response.text("OK")

    async def _mpub(self, request: Request) -> Response:
        await self._authorize_publish(request, "MPUB")
        topic, partition = self._publish_target(request, create=True)
        binary = parse_bool(request.arg("binary"), default=False)
        if binary is None or binary:
            bodies = self._binary_bodies(request.body)
        else:
            bodies = self._text_bodies(request.body)
        if bodies:
            self._check_publish_limit(topic, bodies)
            self.broker.publish(topic, bodies, self.broker.wall_clock(), partition_index=partition)
        return Response.legacy_ok("OK") if request.legacy else Response.text("OK")

    def _check_publish_limit(self, topic: str, bodies: Sequence[bytes]) -> None:
        """The topic's publish limit, one bucket for all HTTP publishers: over it, a
        429 ``RATE_LIMITED`` and nothing stored."""
        limit = self.broker.topics[topic].publish_limit
        if limit is None:
            return
        if not limit.http.admit(trio.current_time(), len(bodies), batch_size(bodies)):
            limit.refused += 1
            raise HttpError(429, "RATE_LIMITED")

    def _youzan_body(self, request: Request) -> bytes:
        """Youzan's /pub body rules, shared by /pubtrace and /pub_ext: 413, then 406."""
        body = request.body
        if len(body) > self.config.max_msg_size:
            raise HttpError(413, "MSG_TOO_BIG")
        if not body:
            raise HttpError(406, "MSG_EMPTY")
        return body

    async def _pubtrace(self, request: Request) -> Response:
        """Youzan's traced publish: the topic must exist; answers where it was stored."""
        body = self._youzan_body(request)
        await self._authorize_publish(request, invalid="INVALID_ARG_TOPIC")
        topic, partition = self._publish_target(request, create=False, invalid="INVALID_ARG_TOPIC")
        given = request.arg("trace_id") or ""
        trace_id = go_parse_uint64(given.encode("utf-8", "surrogateescape"))
        if trace_id is None:
            raise HttpError(400, "INVALID_TRACE_ID")
        self._check_publish_limit(topic, (body,))
        records = self.broker.publish(
            topic,
            [body],
            self.broker.wall_clock(),
            partition_index=partition,
            trace_ids=[trace_id],
            source=request.remote_address,
        )
        return _traced(records, given, legacy=False)  # /pubtrace is V1 only

    async def _pub_ext(self, request: Request) -> Response:
        """Youzan's publish with a JSON header: ``ext`` plus ``X-Nsqext-*`` headers,
        checked by the same rules as TCP PUB_EXT, stored re-serialized."""
        body = self._youzan_body(request)
        await self._authorize_publish(request, invalid="INVALID_ARG_TOPIC")
        topic, partition = self._publish_target(request, create=False, invalid="INVALID_ARG_TOPIC")
        checked = check_ext_header(request.arg("ext") or "", _nsqext_headers(request))
        if isinstance(checked, ProtocolError):
            raise HttpError(400, checked.code)
        header = orjson.dumps(checked.fields)
        refusal = ext_refusal(self.broker.topics.get(topic), (header,))
        if refusal is Refusal.TOPIC_NOT_EXIST:
            raise HttpError(404, "E_TOPIC_NOT_EXIST")
        if refusal is Refusal.EXT_NOT_SUPPORTED:
            raise HttpError(400, "E_EXT_NOT_SUPPORT")
        if refusal is Refusal.EXT_TOO_LONG:  # the record's limit: TCP's refusal, as a 400
            raise HttpError(400, pub_failed("PUB", EXT_TOO_LONG_REASON, youzan=True).text)
        self._check_publish_limit(topic, (body,))
        trace_id = checked.trace_id
        if checked.idempotency_key is not None:
            return self._pub_ext_once(request, topic, partition, body, header, checked)
        records = self.broker.publish(
            topic,
            [body],
            self.broker.wall_clock(),
            partition_index=partition,
            trace_ids=[trace_id or 0],
            ext_version=EXT_VERSION_JSON,
            exts=[header],
            source=request.remote_address,
        )
        if trace_id is None:
            return Response.legacy_ok("OK") if request.legacy else Response.text("OK")
        return _traced(records, str(checked.fields[TRACE_ID_KEY]), legacy=request.legacy)

    def _pub_ext_once(
        self,
        request: Request,
        topic: str,
        partition: int,
        body: bytes,
        header: bytes,
        checked: ExtHeader,
    ) -> Response:
        """/pub_ext with ``##idempotency_key``: stored unless the partition holds the
        key; a traced one answers with the record that holds it (its trace id)."""
        stored = self.broker.publish_once(
            topic,
            [body],
            [checked.idempotency_key],
            self.broker.wall_clock(),
            partition_index=partition,
            trace_ids=[checked.trace_id or 0],
            exts=[header],
            source=request.remote_address,
        )
        if checked.trace_id is None or stored is None:
            return Response.legacy_ok("OK") if request.legacy else Response.text("OK")
        given = str(checked.fields[TRACE_ID_KEY])
        if stored.trace_id != checked.trace_id:  # a duplicate: the original's trace id
            given = str(stored.trace_id)
        return _traced([stored], given, legacy=request.legacy)

    def _text_bodies(self, body: bytes) -> list[bytes]:
        """Newline mode: one message per line; empty lines are skipped, ``\\r`` kept."""
        if len(body) > self.config.max_body_size:
            raise HttpError(413, "BODY_TOO_BIG")
        max_size = self.config.max_msg_size
        bodies = [line for line in body.split(b"\n") if line]
        if any(len(line) > max_size for line in bodies):
            raise HttpError(413, "MSG_TOO_BIG")
        return bodies

    def _binary_bodies(self, body: bytes) -> list[bytes]:
        """``[int32 count]([int32 size][bytes])*``, TCP MPUB's errors minus ``E_``."""
        if len(body) > self.config.max_body_size:
            raise HttpError(413, "BODY_TOO_BIG")
        if len(body) < _INT32.size:
            raise HttpError(413, "BAD_BODY")
        (count,) = _INT32.unpack_from(body, 0)
        if count <= 0 or count > (self.config.max_body_size - 4) // 5:
            raise HttpError(413, "BAD_BODY")
        max_size = self.config.max_msg_size
        bodies: list[bytes] = []
        position = _INT32.size
        for _ in range(count):
            if position + _INT32.size > len(body):
                raise HttpError(413, "BAD_MESSAGE")
            (size,) = _INT32.unpack_from(body, position)
            position += _INT32.size
            if size <= 0 or size > max_size or position + size > len(body):
                raise HttpError(413, "BAD_MESSAGE")
            bodies.append(body[position : position + size])
            position += size
        return bodies

    # ------------------------------------------------------------- topic admin

    def _topic_name(self, request: Request, *, validate: bool) -> str:
        return name_arg(
            parsed_query(request), "topic", invalid="INVALID_TOPIC" if validate else None
        )

    def _existing_topic(self, name: str) -> str:
        if name not in self.broker.topics:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        return name

    async def _topic_create(self, request: Request) -> Response:
        """Create a topic; ``ext=true`` makes (or upgrades) it ext, ``ordered=true``
        marks a new one ordered. Youzan's lookupd spellings ``extend`` and
        ``orderedmulti`` work too; as there, any other value means false.

        ``partition_num`` (Youzan, 1..255) gives the topic that many partitions, adding
        the missing ones to an existing topic; without it a new topic has one, as in
        nsqd."""
        name = self._topic_name(request, validate=True)
        partitions = 1
        raw = request.arg("partition_num")
        if raw is not None:
            parsed = int(raw) if raw.isascii() and raw.isdigit() else 0
            if not 1 <= parsed <= MAX_PARTITION_NUM:
                raise HttpError(400, "INVALID_ARG_TOPIC_PARTITION_NUM")
            partitions = parsed
        ext = _flag(request, "ext", "extend")
        ordered = _flag(request, "ordered", "orderedmulti")
        self.broker.topic(name, partitions=partitions, ext=ext, ordered=ordered)
        return Response.empty()

    async def _topic_delete(self, request: Request) -> Response:
        name = self._existing_topic(self._topic_name(request, validate=False))
        self.broker.delete_topic(name)
        return Response.empty()

    async def _topic_empty(self, request: Request) -> Response:
        name = self._existing_topic(self._topic_name(request, validate=True))
        self.broker.empty_topic(name)
        return Response.empty()

    async def _topic_pause(self, request: Request) -> Response:
        name = self._existing_topic(self._topic_name(request, validate=False))
        self.broker.set_topic_paused(name, paused=True)
        return Response.empty()

    async def _topic_unpause(self, request: Request) -> Response:
        name = self._existing_topic(self._topic_name(request, validate=False))
        self.broker.set_topic_paused(name, paused=False)
        return Response.empty()

    # ------------------------------------------------------------- channel admin

    def _topic_and_channel(self, request: Request) -> tuple[str, str]:
        """nsqd's GetTopicChannelArgs, then the topic must exist."""
        parsed_query(request)
        topic = name_arg(request, "topic", invalid="INVALID_ARG_TOPIC")
        channel = name_arg(request, "channel", invalid="INVALID_ARG_CHANNEL")
        return self._existing_topic(topic), channel

    def _existing_channel(self, request: Request) -> tuple[str, str]:
        topic, channel = self._topic_and_channel(request)
        if not self.broker.find_channel(topic, channel):
            raise HttpError(404, "CHANNEL_NOT_FOUND")
        return topic, channel

    async def _channel_create(self, request: Request) -> Response:
        topic, channel = self._topic_and_channel(request)
        await self.broker.create_channel(topic, channel)
        return Response.empty()

    async def _channel_delete(self, request: Request) -> Response:
        topic, channel = self._existing_channel(request)
        for partition in range(len(self.broker.topics[topic].partitions)):
            self.broker.delete_channel(topic, partition, channel)
        return Response.empty()

    async def _channel_empty(self, request: Request) -> Response:
        self.broker.empty_channel(*self._existing_channel(request))
        return Response.empty()

    async def _channel_pause(self, request: Request) -> Response:
        self.broker.set_channel_paused(*self._existing_channel(request), paused=True)
        return Response.empty()

    async def _channel_unpause(self, request: Request) -> Response:
        self.broker.set_channel_paused(*self._existing_channel(request), paused=False)
        return Response.empty()

    async def _topic_ttl(self, request: Request) -> Response:
        """trionsq's topic TTL: ``ttl`` as a Go duration (``90s``, ``2h``; ``0`` turns it
        off, at most ten years); messages older than it are skipped at delivery."""
        parsed_query(request)
        name = self._existing_topic(name_arg(request, "topic", invalid="INVALID_ARG_TOPIC"))
        raw = request.arg("ttl")
        if raw is None:
            raise HttpError(400, "MISSING_ARG_TTL")
        try:
            seconds = parse_duration(raw)
        except ValueError:
            raise HttpError(400, "INVALID_ARG_TTL") from None
        if not 0 <= seconds <= MAX_TTL_SECONDS or (seconds and seconds < 0.001):
            raise HttpError(400, "INVALID_ARG_TTL")
        self.broker.set_topic_ttl(name, int(seconds * 1e9))
        return Response.empty()

    async def _channel_dead_letter(self, request: Request) -> Response:
        """trionsq's dead-letter bound: ``max_attempts`` deliveries (0 turns it off,
        up to 65535), then the message goes to ``dead_topic`` (default
        ``<topic>.dead``). Creates the channel, as ``/channel/create`` does."""
        topic, channel = self._topic_and_channel(request)
        max_attempts = _count_arg(request, "max_attempts", MAX_ATTEMPTS_BOUND)
        if max_attempts is None:
            raise HttpError(400, "MISSING_ARG_MAX_ATTEMPTS")
        dead_topic = request.arg("dead_topic") or ""
        effective = dead_topic_name(topic, dead_topic)
        if not is_valid_name(effective.encode()) or is_ephemeral(effective) or effective == topic:
            raise HttpError(400, "INVALID_ARG_DEAD_TOPIC")
        await self.broker.create_channel(topic, channel)
        self.broker.set_dead_letter(topic, channel, max_attempts, dead_topic)
        return Response.empty()

    async def _channel_rate_limit(self, request: Request) -> Response:
        """trionsq's channel rate limit: ``msgs_per_sec`` and/or ``bytes_per_sec`` (0
        turns one off; one not given keeps its value), one limit for the channel in
        all partitions. Creates the channel, as ``/channel/create`` does."""
        topic, channel = self._topic_and_channel(request)
        current = self.broker.topics[topic].channel_limits.get(channel)
        rates = _rates_args(request, current.rates if current is not None else Rates())
        await self.broker.create_channel(topic, channel)
        self.broker.set_channel_rate_limit(topic, channel, rates)
        return Response.empty()

    async def _topic_publish_limit(self, request: Request) -> Response:
        """trionsq's per-producer publish limit: ``msgs_per_sec`` and/or
        ``bytes_per_sec`` for each TCP connection, and for all HTTP publishes
        together (0 turns one off; one not given keeps its value)."""
        parsed_query(request)
        name = self._existing_topic(name_arg(request, "topic", invalid="INVALID_ARG_TOPIC"))
        current = self.broker.topics[name].publish_limit
        rates = _rates_args(request, current.rates if current is not None else Rates())
        self.broker.set_publish_limit(name, rates)
        return Response.empty()

    async def _channel_setoffset(self, request: Request) -> Response:
        """Youzan's setoffset: move one partition's channel to the offset spec in the
        body (tcp-protocol §8.6), whoever is subscribed. Standalone, every spec kind
        works; one the log cannot satisfy is a 400 with the reason, and moves nothing."""
        parsed_query(request)
        name = name_arg(request, "topic", invalid="INVALID_ARG_TOPIC")
        partition = _partition_arg(request)
        channel = name_arg(request, "channel", invalid="INVALID_ARG_CHANNEL")
        topic = self.broker.topics.get(name)
        index = 0 if partition is None else partition
        if topic is None or not 0 <= index < len(topic.partitions):
            raise HttpError(404, "E_TOPIC_NOT_EXIST")
        if channel not in topic.partitions[index].channels:
            raise HttpError(404, "CHANNEL_NOT_FOUND")
        body = request.body
        if not body:
            raise HttpError(406, "MSG_EMPTY")
        spec = OffsetSpec.parse(body.strip())
        if spec is None:
            text = body.decode("utf-8", "replace")
            raise HttpError(400, f"invalid consume offset:{text}")
        try:
            await self.broker.set_channel_offset(name, index, channel, spec)
        except OffsetError as error:
            raise HttpError(400, str(error)) from None
        return Response.empty()

    # ------------------------------------------------------------- /config/:opt

    def _config(self, request: Request, name: str) -> Response:
        if request.method == "GET":
            value = self._option_value(name)
            if value is _MISSING:
                return Response.error(400, "INVALID_OPTION")
            return Response.json(value)
        if request.method != "PUT":
            return Response.error(405, "METHOD_NOT_ALLOWED")
        body = request.body
        if not body or len(body) > self.config.max_msg_size:
            return Response.error(413, "INVALID_VALUE")
        if name == "nsqlookupd_tcp_addresses":
            try:
                addresses = orjson.loads(body)
            except orjson.JSONDecodeError:
                return Response.error(400, "INVALID_VALUE")
            if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
                return Response.error(400, "INVALID_VALUE")
            self.runtime.lookupd_tcp_addresses = tuple(addresses)
            if self.runtime.lookupd_changed is not None:
                self.runtime.lookupd_changed(self.runtime.lookupd_tcp_addresses)
        elif name == "log_level":
            level = body.decode("utf-8", "replace").strip().lower()
            if level not in LOG_LEVELS:
                return Response.error(400, "INVALID_VALUE")
            self.runtime.log_level = level
            logging.getLogger("trionsq").setLevel(level.upper() if level != "fatal" else "CRITICAL")
        else:
            return Response.error(400, "INVALID_OPTION")
        return Response.json(self._option_value(name))

    def _option_value(self, cfg_name: str) -> object:
        """An option by its config-file name, in nsqd's JSON form (durations in ns)."""
        if cfg_name == "log_level":
            return LOG_LEVELS[self.runtime.log_level]
        if cfg_name == "nsqlookupd_tcp_addresses":
            return list(self.runtime.lookupd_tcp_addresses)
        field = _CFG_NAMES.get(cfg_name, cfg_name)
        if cfg_name in _NOT_CFG_NAMES or field not in attrs.fields_dict(type(self.config)):
            return _MISSING
        value = getattr(self.config, field)
        if field in _DURATION_FIELDS:
            return _ns(value)
        if field == "tls_required":
            return int(value)
        if field == "tls_min_version":
            return {**_TLS_VERSIONS, **_TLS_VERSIONS_LATER}.get(value, 0x0301)
        if isinstance(value, tuple):
            return list(value)
        return value


_MISSING: Final = object()


def _partition_arg(request: Request) -> int | None:
    """Youzan's optional ``partition``: None for the default (absent, empty, -1), else
    the int, which may name no partition (negative ones never do). Not an int: 400
    with Go's strconv.Atoi text, as Youzan's GetTopicPartitionArgs answers."""
    raw = request.arg("partition")
    if not raw:
        return None
    value = go_atoi(raw.encode("utf-8", "surrogateescape"))
    if isinstance(value, str):
        raise HttpError(400, value)
    return None if value == -1 else value


def _nsqext_headers(request: Request) -> dict[str, str]:
    """``X-Nsqext-<Name>: value`` request headers as ext keys ``<name>`` (lower-cased).

    The connection decodes header bytes as latin-1; they are read back as UTF-8 (bad
    bytes become U+FFFD, as Go's JSON encoding of the header string does)."""
    return {
        name.removeprefix(_NSQEXT_PREFIX): value.encode("latin-1").decode("utf-8", "replace")
        for name, value in request.headers.items()
        if name.startswith(_NSQEXT_PREFIX)
    }


def _traced(records: Sequence[Record | Stored], trace_id: str, *, legacy: bool) -> Response:
    """Youzan's traced answer, in its key order; ``trace_id`` as the client gave it.

    An ephemeral topic may have dropped the message: like TCP, plain ``OK`` then."""
    if not records:
        return Response.legacy_ok("OK") if legacy else Response.text("OK")
    record = records[0]
    answer = {
        "status": "OK",
        "id": record.internal_id,
        "trace_id": trace_id,
        "queue_offset": record.offset,
        "rawsize": record.raw_size,
    }
    return Response.legacy_ok(answer) if legacy else Response.json(answer)


def _rates_args(request: Request, current: Rates) -> Rates:
    """``msgs_per_sec``/``bytes_per_sec`` (decimal, 0 to the IDENTIFY bounds); at least
    one must be given, one left out keeps its ``current`` value."""
    msgs = _count_arg(request, "msgs_per_sec", MAX_MSGS_PER_SEC)
    size = _count_arg(request, "bytes_per_sec", MAX_BYTES_PER_SEC)
    if msgs is None and size is None:
        raise HttpError(400, "MISSING_ARG_RATE")
    return Rates(
        current.msgs_per_sec if msgs is None else msgs,
        current.bytes_per_sec if size is None else size,
    )


def _count_arg(request: Request, name: str, bound: int) -> int | None:
    """A decimal parameter from 0 to ``bound`` (None: not given); anything else is
    400 ``INVALID_ARG_<NAME>``."""
    raw = request.arg(name)
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 20 or int(raw) > bound:
        raise HttpError(400, f"INVALID_ARG_{name.upper()}")
    return int(raw)


def _ns(seconds: float) -> int:
    """A duration as Go's JSON has it: integer nanoseconds."""
    return round(seconds * 1_000_000_000)


def _go_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64), or None where Go would return an error."""
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def _flag(request: Request, *names: str) -> bool:
    """A Youzan creation flag: on only when one of ``names`` is ``true`` or ``1``."""
    return any(parse_bool(request.arg(name), default=False) is True for name in names)


def _failed_verb(path: str) -> str:
    """The verb a storage failure is reported as: ``MPUB``, ``PUB`` or ``STORE``
    (topic and channel creation)."""
    if path.startswith("/mpub"):
        return "MPUB"
    if path.startswith("/pub"):
        return "PUB"
    return "STORE"
