"""nsqd's HTTP endpoints (spec http-api.md §2, §3): admin, /info, /stats, /config, and
the routes of publishing (:mod:`.publish_api`) and reading by offset
(:mod:`.partition_api`).

Every handler takes a :class:`Request` and returns a :class:`Response`; checks run
in nsqd's order so the same bad request gets the same status and text. Endpoints
that nsqd ≤ 0.3 answered in the ``status_code/status_txt/data`` envelope (/info,
/pub, /mpub, /stats; Youzan's /pub_ext too) give it to a request that asks for it
(messages.py).
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import attrs
import orjson

from ..admin_page_files import ADMIN_PAGE as ADMIN_PAGE  # importable from here as before
from ..broker.broker import Broker
from ..broker.dead_letters import dead_topic_name
from ..broker.health import StorageFault, go_error_text
from ..broker.offsets import OffsetError
from ..broker.rate_limits import PublishMode, Rates
from ..broker.replication import ReplicaRefusal
from ..broker.rules import MAX_PARTITION_NUM
from ..config import NsqdConfig, TlsRequired
from ..durations import parse_duration
from ..http.messages import Request, Response, parse_bool
from ..http.static import static_routes
from ..protocol.commands import OffsetSpec
from ..protocol.errors import ProtocolError
from ..protocol.ext_header import MAX_TTL_SECONDS
from ..protocol.identify import MAX_ATTEMPTS_BOUND, MAX_BYTES_PER_SEC, MAX_MSGS_PER_SEC
from ..protocol.names import is_ephemeral, is_valid_name
from ..version import NSQD_RELEASE, TRIONSQ_VERSION, version_string
from .admin_stream import AdminStream, StreamContext, StreamShared
from .api_args import HttpError, Routes, name_arg, parsed_query, partition_arg
from .partition_api import PartitionApi
from .publish_api import PublishApi

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from ..auth.session import AuthSession
    from .metrics import MetricsRoute
    from .stats import StatsQuery

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
        "lookupd_ping_interval",
    }
)
LEGACY_ENDPOINTS: Final = frozenset({"/info", "/pub", "/mpub", "/stats", "/pub_ext"})
"""Where nsqd ≤ 0.3 (and Youzan, for /pub_ext) answered in the status_code/status_txt/data
envelope; /pubtrace is V1 only."""
_SINGLE_MESSAGE: Final = frozenset({"/pub", "/pubtrace", "/pub_ext"})
"""Endpoints whose body is one message: bounded by max-msg-size."""
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
        "lookupd_ping_interval",
        "ttl_dead_letter",
        "admin_stream",
        "admin_secret",
        "etcd_password",
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


def _own_runtime(api: NsqdHttpApi) -> RuntimeOptions:
    """A listener's runtime options when it is not given the broker's shared ones."""
    return RuntimeOptions(api.config.log_level, api.config.lookupd_tcp_addresses)


@attrs.define(slots=False, eq=False)
class NsqdHttpApi:
    """Routes and handlers for one listener (plain HTTP or HTTPS) of one broker.

    Not slotted: the attributes :meth:`__attrs_post_init__` adds name types that are
    imported only where used (auth, metrics)."""

    broker: Broker
    config: NsqdConfig
    started_at: float = attrs.field(kw_only=True)
    _ports: Callable[[], tuple[int, int]] = attrs.field(kw_only=True)
    """(tcp port, http port) as bound, for /info."""
    _https_port: Callable[[], int | None] = attrs.field(kw_only=True)
    is_https: bool = attrs.field(default=False, kw_only=True)
    runtime: RuntimeOptions = attrs.field(
        default=attrs.Factory(_own_runtime, takes_self=True), kw_only=True
    )
    admin: StreamShared = attrs.field(kw_only=True, repr=False)

    def __attrs_post_init__(self) -> None:
        broker, config = self.broker, self.config
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
        self.routes: Routes = {
            "/ping": {"GET": self._ping},
            "/info": {"GET": self._info},
            "/channel/setoffset": {"POST": self._channel_setoffset},
            "/stats": {"GET": self._stats},
            "/metrics": {"GET": self._metrics},
            **{
                path: {"POST": self._saved(handler)} for path, handler in post_ignoring_body.items()
            },
            **static_routes("trionsq", ADMIN_PAGE),
        }
        self.routes.update(PublishApi(broker, config, self._authorize_publish).routes)
        self.routes.update(PartitionApi(broker, self._authorize_reader).routes)
        self.admin_stream = AdminStream(
            StreamContext(
                broker,
                dispatch=self.dispatch,
                shared=self.admin,
                scheme="https" if self.is_https else "http",
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

    def _saved(
        self, handler: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """An admin endpoint that answers once what it changed is in metadata.json: an
        answered change (a topic created ext or with partitions, a pause, a bound, a
        limit, a TTL) survives a kill -9 right after the answer, where the persister
        would have written it up to a second later."""

        async def handle(request: Request) -> Response:
            response = await handler(request)
            storage = self.broker.storage
            if storage is not None and response.status < 300:
                try:
                    await storage.save_metadata_now(self.broker)
                except OSError as error:
                    raise StorageFault(go_error_text(error)) from None
            return response

        return handle

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
            refusal = self._refusal(request, error.status, error.message)
            if error.headers:
                refusal = attrs.evolve(refusal, headers=refusal.headers + error.headers)
            return refusal
        except StorageFault as fault:  # logged once per episode by the broker's health
            return self._refusal(request, 500, f"{_failed_verb(path)}_FAILED {fault.reason}")
        except ReplicaRefusal as refusal:  # Youzan's 400 for a replicated partition
            return self._refusal(request, 400, refusal.code)

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
        options: StatsQuery = {
            "started_at": self.started_at,
            "health": self.broker.health,
            "topic": request.arg("topic") or None,
            "channel": request.arg("channel") or None,
            "include_clients": True if include_clients is None else include_clients,
            "include_mem": True if include_mem is None else include_mem,
        }
        if request.arg("format") != "json":
            text = stats_text(self.broker, version_line=version_string("nsqd"), **options)
            return Response.legacy_ok(text) if request.legacy else Response.text(text)
        document = stats_document(self.broker, version=NSQD_RELEASE, **options)
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

    # ------------------------------------------------------------- AUTH over HTTP

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
        await self.broker.set_topic_ttl(name, int(seconds * 1e9))
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
        together (0 turns one off), and ``mode``, ``throttle`` (the default) or
        ``refuse``; one not given keeps its value, ``mode`` alone changes only that."""
        parsed_query(request)
        name = self._existing_topic(name_arg(request, "topic", invalid="INVALID_ARG_TOPIC"))
        current = self.broker.topics[name].publish_limit
        raw_mode = request.arg("mode")
        mode = current.mode if current is not None else PublishMode.THROTTLE
        if raw_mode is not None:
            if raw_mode not in _PUBLISH_MODES:
                raise HttpError(400, "INVALID_ARG_MODE")
            mode = _PUBLISH_MODES[raw_mode]
        rates = current.rates if current is not None else Rates()
        rates = _rates_args(request, rates, required=raw_mode is None)
        if not rates and raw_mode is not None:  # a mode, and no limit to apply it to
            raise HttpError(400, "MISSING_ARG_RATE")
        self.broker.set_publish_limit(name, rates, mode)
        return Response.empty()

    async def _channel_setoffset(self, request: Request) -> Response:
        """Youzan's setoffset: move one partition's channel to the offset spec in the
        body (tcp-protocol §8.6), whoever is subscribed. Standalone, every spec kind
        works; one the log cannot satisfy is a 400 with the reason, and moves nothing."""
        parsed_query(request)
        name = name_arg(request, "topic", invalid="INVALID_ARG_TOPIC")
        partition = partition_arg(request)
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
_PUBLISH_MODES: Final = {mode.value: mode for mode in PublishMode}


def _rates_args(request: Request, current: Rates, *, required: bool = True) -> Rates:
    """``msgs_per_sec``/``bytes_per_sec`` (decimal, 0 to the IDENTIFY bounds); one left
    out keeps its ``current`` value; ``required``: at least one must be given."""
    msgs = _count_arg(request, "msgs_per_sec", MAX_MSGS_PER_SEC)
    size = _count_arg(request, "bytes_per_sec", MAX_BYTES_PER_SEC)
    if msgs is None and size is None and required:
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
