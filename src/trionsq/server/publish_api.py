"""nsqd's and Youzan's HTTP publishing (spec http-api.md §2, §3): ``/pub``, ``/mpub``,
``/pubtrace`` and ``/pub_ext``.

Checks run in nsqd's order, so the same bad request gets the same status and text.
Youzan's publishing (``partition``, /pubtrace, /pub_ext) follows http-api.md §3 with
TCP's rules: a named partition must exist, an ordered topic needs one, and ext
headers obey :func:`~trionsq.protocol.check_ext_header`. A topic's publish limit
(docs/extensions.md, "Rate limits") is checked last, before anything is stored.
"""

from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING, Final, Protocol

import attrs
import orjson
import trio

from ..broker.broker import Broker
from ..broker.rate_limits import PublishMode, batch_size
from ..broker.rules import EXT_TOO_LONG_REASON, Refusal, ext_refusal, publish_target
from ..config import NsqdConfig
from ..http.messages import Request, Response, parse_bool
from ..protocol.broker_errors import pub_failed
from ..protocol.errors import ProtocolError
from ..protocol.ext_header import TRACE_ID_KEY, ExtHeader, check_ext_header
from ..protocol.strconv import go_parse_uint64
from .api_args import HttpError, Routes, name_arg, parsed_query, partition_arg

if TYPE_CHECKING:
    from collections.abc import Awaitable, Sequence

    from ..broker.idempotence import Stored
    from ..broker.topic import Record

__all__ = ["HTTP_THROTTLE_SECONDS", "AuthorizePublish", "PublishApi"]

_INT32: Final = struct.Struct(">i")
HTTP_THROTTLE_SECONDS: Final = 10.0
"""Longest an HTTP publish waits for a throttling publish limit before its 429: a
third of the connection's request timeout (30 s, from the first byte of the request
to the last of its answer), so the answer always has time to go out."""
_NSQEXT_PREFIX: Final = "x-nsqext-"
"""Request headers that add a key to /pub_ext's JSON header (names are lower-cased)."""


class AuthorizePublish(Protocol):
    """The listener's AUTH check of a publish (raises :class:`HttpError`), a no-op
    without ``--auth-http-address``."""

    def __call__(
        self, request: Request, verb: str = ..., *, invalid: str = ...
    ) -> Awaitable[None]: ...


@attrs.define(eq=False)
class PublishApi:
    """The publishing handlers of one listener's :class:`~.nsqd_api.NsqdHttpApi`."""

    broker: Broker
    config: NsqdConfig
    _authorize_publish: AuthorizePublish = attrs.field(alias="authorize")
    routes: Routes = attrs.field(init=False)

    @routes.default
    def _routes(self) -> Routes:
        return {
            "/pub": {"POST": self._pub},
            "/mpub": {"POST": self._mpub},
            "/pubtrace": {"POST": self._pubtrace},
            "/pub_ext": {"POST": self._pub_ext},
        }

    def _publish_target(
        self, request: Request, *, create: bool, invalid: str = "INVALID_TOPIC"
    ) -> tuple[str, int]:
        """The topic and partition index a publish goes to (spec http-api §3).

        No ``partition`` (or empty, or -1): the default partition 0 (of a replicated
        topic, the lowest this broker leads), refused on an ordered topic as TCP
        refuses it; ``create``: a plain topic is created then,
        as nsqd's GetTopic does even if the rest of the request is refused. A named
        partition is Youzan's and never creates: it must exist.
        """
        name = name_arg(parsed_query(request), "topic", invalid=invalid)
        partition = partition_arg(request)
        target = publish_target(self.broker.topics, name, partition, create=create)
        if target is Refusal.BAD_PARTITION:
            raise HttpError(400, "E_BAD_PARTITION")
        if type(target) is not int:
            raise HttpError(404, "E_TOPIC_NOT_EXIST")
        if name not in self.broker.topics:
            self.broker.topic(name)
        if partition is None and self.broker.replication is not None:
            target = self.broker.default_partition(name, target)
        return name, target

    async def _pub(self, request: Request) -> Response:
        body = request.body
        if len(body) > self.config.max_msg_size:
            raise HttpError(413, "MSG_TOO_BIG")
        if not body:
            raise HttpError(400, "MSG_EMPTY")
        await self._authorize_publish(request)
        topic, partition = self._publish_target(request, create=True)
        defer_ms = 0
        if "defer" in request.query:
            parsed = _go_int64(request.query["defer"][0])
            max_ms = int(self.config.max_req_timeout * 1000)
            if parsed is None or not 0 <= parsed <= max_ms:
                raise HttpError(400, "INVALID_DEFER")
            defer_ms = parsed
        await self._admit(topic, partition, (body,))
        now = self.broker.wall_clock()
        deliver_at = now + defer_ms * 1_000_000 if defer_ms else 0
        if not deliver_at:  # TCP's short way, to any partition (a cluster's rules kept)
            self.broker.publish_plain(self.broker.topics[topic], body, now, partition)
        else:
            self.broker.publish(
                topic, [body], now, deliver_at=deliver_at, partition_index=partition
            )
        await self._committed(topic, partition)
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
            await self._admit(topic, partition, bodies)
            self.broker.publish(topic, bodies, self.broker.wall_clock(), partition_index=partition)
            await self._committed(topic, partition)
        return Response.legacy_ok("OK") if request.legacy else Response.text("OK")

    async def _committed(self, topic: str, partition: int) -> None:
        """A replicated topic's publish is answered once committed (on every in-sync
        replica); a ReplicaRefusal becomes nsqd_api's 400 with Youzan's code."""
        replication = self.broker.replication
        if replication is None or not replication.replicated(topic):
            return
        end = self.broker.topics[topic].partitions[partition].log.next_id
        await replication.committed(topic, partition, end)

    async def _admit(self, topic: str, partition: int, bodies: Sequence[bytes]) -> None:
        """The topic's publish limit, one bucket for all HTTP publishers (docs/extensions.md,
        "Rate limits"). Throttling (the default): a publish the bucket cannot take now
        waits until it has a token, for at most :data:`HTTP_THROTTLE_SECONDS`; one that
        would wait longer, or any over a refusing limit, is a 429 ``RATE_LIMITED`` with
        ``Retry-After`` (whole seconds until the bucket has a token), nothing stored."""
        limit = self.broker.topics[topic].publish_limit
        if limit is None:
            return
        bucket = limit.http
        now = trio.current_time()
        if limit.mode is PublishMode.THROTTLE and not bucket.is_open(now):
            give_up = now + HTTP_THROTTLE_SECONDS
            opens = bucket.open_at(now)
            if opens <= give_up:
                limit.throttled += 1
            while opens <= give_up:  # others may take the token first: wait again
                await trio.sleep_until(opens)
                _still_there(self.broker, topic, partition)
                now = trio.current_time()
                if bucket.is_open(now):
                    break
                opens = bucket.open_at(now)
        if bucket.admit(now, len(bodies), batch_size(bodies)):
            return
        limit.refused += 1
        retry_after = max(1, math.ceil(bucket.open_at(now) - now))
        raise HttpError(429, "RATE_LIMITED", ((b"Retry-After", b"%d" % retry_after),))

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
        await self._admit(topic, partition, (body,))
        records = self.broker.publish(
            topic,
            [body],
            self.broker.wall_clock(),
            partition_index=partition,
            trace_ids=[trace_id],
            source=request.remote_address,
        )
        await self._committed(topic, partition)
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
        await self._admit(topic, partition, (body,))
        trace_id = checked.trace_id
        if checked.idempotency_key is not None:
            response = self._pub_ext_once(request, topic, partition, body, header, checked)
            await self._committed(topic, partition)
            return response
        records = self.broker.publish_single(
            topic, partition, body, trace_id, header, source=request.remote_address
        )
        await self._committed(topic, partition)
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


def _still_there(broker: Broker, topic: str, partition: int) -> None:
    """After a throttled wait: the topic (and partition) may have been deleted meanwhile."""
    found = broker.topics.get(topic)
    if found is None or partition >= len(found.partitions):
        raise HttpError(404, "E_TOPIC_NOT_EXIST")


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


def _go_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64), or None where Go would return an error."""
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None
