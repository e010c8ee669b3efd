"""The admin stream: ``/admin/stream`` on the broker's HTTP listener, a websocket
(trio-websocket) that pushes every change, periodic snapshots and message samples,
and takes admin actions (docs/admin.md is its contract).

The HTTP connection loop hands an upgrade request over (http/connection.py
``Upgrade``); trio-websocket then parses the same request bytes again and runs the
websocket on the connection. Each connection is a nursery (design §3, under its
HTTP listener's connection task) with trio-websocket's reader, this module's op
reader, and the writer, which runs in the connection's own task: it drains the
subscriber's bounded queue (broker/events.py ``Watcher``) and sends a snapshot when
its deadline comes (built once for every subscriber of the same subscription:
admin_snapshots.py). A subscriber whose queue overflows, or whose socket takes no
bytes for ``SEND_TIMEOUT``, is closed with code 4008: the broker never grows memory
for a reader that stopped reading.

Who may open the stream (a browser page only from the broker's own origins), how
many at once, and whether actions and message bodies are open, the broker's
:class:`~.admin_gate.AdminGate` decides. Admin actions run the HTTP API's own
handlers (a ``Request`` built from the op), so their checks and answers are the HTTP
API's.
"""

from __future__ import annotations

import base64
import logging
import math
import socket
import time
from typing import TYPE_CHECKING, Final, TypeGuard
from urllib.parse import urlencode

import attrs
import orjson
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, wrap_server_stream

from ..broker.events import EVENT_GROUPS, Watcher
from ..http.messages import Request, Response
from .admin_gate import CLOSE_TRY_LATER, AdminGate
from .admin_snapshots import SnapshotHub
from .websocket_frames import send_in_two_frames

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from ..auth.session import AuthSession
    from ..broker.broker import Broker
    from ..http.connection import Upgrade
    from .admin_snapshots import Snapshot, SnapshotKey

__all__ = ["STREAM_PATH", "AdminStream", "ReplayStream", "StreamContext", "StreamShared"]

log = logging.getLogger("trionsq.admin")

STREAM_PATH: Final = "/admin/stream"
DEFAULT_INTERVAL_MS: Final = 1000
MIN_INTERVAL_MS: Final = 100
SEND_TIMEOUT: Final = 30.0
"""Seconds one message may take to leave; a reader that takes nothing is closed."""
AUTH_TIMEOUT: Final = 10.0
"""Seconds to wait for the ``auth`` message when AUTH is on and none came at open."""
CLOSE_TIMEOUT: Final = 2.0
"""Seconds for the close handshake before the socket is just closed."""
MAX_OP_SIZE: Final = 64 * 1024
SEND_BUFFER: Final = 1 << 20
"""The socket's send buffer (Linux doubles it): a 0.5 MB snapshot (300 topics of 3
channels) goes in one write instead of dozens of partial ones, each a wake-up."""
CLOSE_NEEDS_AUTH: Final = 4001
CLOSE_TOO_SLOW: Final = 4008
SAMPLE_CHANNEL: Final = "admin_stream"
"""The channel name AUTH grants are checked for when a sample asks for bodies."""
READ_ONLY: Final = "ADMIN_STREAM_READ_ONLY"
"""The refusal of actions and bodies with ``--admin-stream=read-only``."""
SECRET_REQUIRED: Final = "ADMIN_SECRET_REQUIRED"  # noqa: S105 - a refusal, no secret
"""The refusal of actions and bodies before ``--admin-secret`` was given."""

_TOPIC_OPS: Final = {
    "topic.create": "/topic/create",
    "topic.pause": "/topic/pause",
    "topic.unpause": "/topic/unpause",
    "topic.empty": "/topic/empty",
    "topic.delete": "/topic/delete",
}
_CHANNEL_OPS: Final = {
    "channel.create": "/channel/create",
    "channel.pause": "/channel/pause",
    "channel.unpause": "/channel/unpause",
    "channel.empty": "/channel/empty",
    "channel.delete": "/channel/delete",
    "channel.setoffset": "/channel/setoffset",
}
_OP_ARGS: Final = ("topic", "channel", "partition", "partition_num", "ext", "extend", "ordered")
"""Fields of an op passed on as the endpoint's query arguments."""


@attrs.frozen
class StreamShared:
    """What the admin streams of one broker's listeners (HTTP, HTTPS) share."""

    gate: AdminGate
    snapshots: SnapshotHub


class StreamContext:
    """What the stream needs from its HTTP API (server/nsqd_api.py builds it)."""

    def __init__(
        self,
        broker: Broker,
        *,
        dispatch: Callable[[Request], Awaitable[Response]],
        shared: StreamShared,
        scheme: str,
        hello: Callable[[], dict[str, object]],
        authenticate: Callable[[str, str], Awaitable[AuthSession]] | None,
    ) -> None:
        self.broker = broker
        self.dispatch = dispatch
        """The HTTP API's router: admin ops run its handlers."""
        self.gate = shared.gate
        """Origins, mode, secret and the bound on subscribers (shared by the listeners)."""
        self.snapshots = shared.snapshots
        """Snapshots built once per interval and subscription (shared too)."""
        self.scheme = scheme
        """``http`` or ``https``: the listener's, which a page's origin must have."""
        self.hello = hello
        """The broker's identity fields of the ``hello`` message."""
        self.authenticate = authenticate
        """With AUTH on: (secret, client address) → the session; raises ``HttpError``."""


class ReplayStream(trio.abc.Stream):
    """A stream that first gives back bytes already read from it (the upgrade
    request the HTTP loop parsed), then reads the connection as usual."""

    def __init__(self, inner: trio.abc.Stream, replay: bytes) -> None:
        self._inner = inner
        self._replay = replay

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._replay:
            size = len(self._replay) if max_bytes is None else max_bytes
            taken, self._replay = self._replay[:size], self._replay[size:]
            await trio.lowlevel.checkpoint()
            return taken
        return await self._inner.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self._inner.aclose()


class AdminStream:
    """Accepts ``/admin/stream`` upgrades of one HTTP listener and serves them."""

    def __init__(self, context: StreamContext) -> None:
        self.context = context

    def accepts(self, head: Request) -> bool | Response:
        """The HTTP loop's question: hand this upgrade request over? A page from an
        origin the gate refuses gets 403 (``--admin-stream=off``: no stream, 404)."""
        gate = self.context.gate
        if head.path != STREAM_PATH or head.method != "GET" or gate.mode == "off":
            return False
        refusal = gate.origin_refusal(head, self.context.scheme)
        if refusal is None:
            return True
        log.info("admin stream: refused %s: %s", head.remote_address, refusal)
        return Response.error(403, refusal)

    async def serve(self, stream: trio.abc.Stream, upgrade: Upgrade) -> None:
        """Run one subscriber's websocket until it or the broker closes it; a peer
        gone at any step (before the 101, at hello, mid frame) just ends it. Past
        ``--admin-max-subscribers`` the websocket is closed at once with 1013."""
        gate = self.context.gate
        full = gate.full()
        if full is None:
            gate.subscribers += 1
        try:
            if isinstance(stream, trio.SocketStream):  # a snapshot leaves in a write or two
                stream.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
            async with trio.open_nursery() as nursery:
                replay = ReplayStream(stream, upgrade.replay)
                handshake = await wrap_server_stream(
                    nursery, replay, message_queue_size=16, max_message_size=MAX_OP_SIZE
                )
                ws = await handshake.accept()
                try:
                    if full is None:
                        await _Subscriber(self.context, ws, upgrade.request).run()
                    else:
                        log.info(
                            "admin stream: refused %s: %s", upgrade.request.remote_address, full
                        )
                        await _close(ws, CLOSE_TRY_LATER, full)
                finally:
                    nursery.cancel_scope.cancel()
        except* ConnectionClosed:
            log.debug("admin stream: %s went away", upgrade.request.remote_address)
        finally:
            if full is None:
                gate.subscribers -= 1


class _Subscriber:
    """One websocket: its watcher, its writer (this task) and its op reader."""

    def __init__(self, context: StreamContext, ws: WebSocketConnection, head: Request) -> None:
        self.context = context
        self.ws = ws
        self.head = head
        self.seq = 0
        self.session: AuthSession | None = None
        self.unlocked = False
        """``--admin-secret`` was given: actions and bodies are open to this one."""
        self.interval_ms = DEFAULT_INTERVAL_MS
        self._wakeup = trio.Event()
        self._scope = trio.CancelScope()
        self.watcher = Watcher(self._wake)
        self._snapshot_key: SnapshotKey | None = None
        """The snapshot group this subscriber is in (None: it takes no snapshots)."""
        self._next_snapshot = self._fresh_after = trio.current_time()
        """When this subscriber's next snapshot is due (Trio time; its group's), and its
        subscription, which its first snapshot is never older than."""
        self._sent_built_at = -math.inf
        """When the snapshot it sent last was built."""
        self._why_closing: tuple[int, str] | None = None

    def _wake(self) -> None:
        if self.watcher.overflowed:
            self._why_closing = (CLOSE_TOO_SLOW, "subscriber too slow")
            self._scope.cancel()
        else:
            self._wakeup.set()

    # ----------------------------------------------------------------- lifecycle

    async def run(self) -> None:
        broker = self.context.broker
        error = self._subscribe(_query_subscription(self.head.query))
        if error:
            await _close(self.ws, 1008, error)
            return
        try:
            await self._send({"type": "hello", **self.context.hello(), **self._hello_fields()})
            if self.context.authenticate is not None and not await self._authenticate_at_open():
                await _close(self.ws, CLOSE_NEEDS_AUTH, "an auth secret is needed (AUTH is on)")
                return
            if not await self._unlock_at_open():
                await _close(self.ws, CLOSE_NEEDS_AUTH, "the admin secret was refused")
                return
            broker.events.add(self.watcher)
            await self._serve()
        finally:
            broker.events.remove(self.watcher)
            self.watcher.queue.clear()
            self._join_snapshots(None)
        if self._why_closing is not None:
            log.info("admin stream: closing %s: %s", self.head.remote_address, self._why_closing[1])
            await _close(self.ws, *self._why_closing)

    async def _serve(self) -> None:
        """The op reader beside the writer, until either ends the stream."""
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read_ops)
                    await self._write_forever()
                    nursery.cancel_scope.cancel()
        except* ConnectionClosed:
            log.debug("admin stream: %s closed", self.head.remote_address)

    def _hello_fields(self) -> dict[str, object]:
        gate = self.context.gate
        return {
            "auth_required": self.context.authenticate is not None,
            "mode": gate.mode,
            "admin_secret_required": bool(gate.secret),
            "subscription": self._subscription(),
        }

    def _subscription(self) -> dict[str, object]:
        topics = self.watcher.topics
        return {
            "topics": None if topics is None else sorted(topics),
            "events": [group for group in EVENT_GROUPS if group in self.watcher.groups],
            "snapshot_interval_ms": self.interval_ms,
        }

    async def _authenticate_at_open(self) -> bool:
        """AUTH: a secret at open (query or bearer), else an ``auth`` message soon."""
        secret = self._secret_at_open()
        ref: object = None
        if not secret:
            with trio.move_on_after(AUTH_TIMEOUT):
                while not secret:
                    message = _parsed(await self.ws.get_message())
                    if isinstance(message, dict) and message.get("op") == "auth":
                        found, ref = message.get("secret"), message.get("ref")
                        secret = found if isinstance(found, str) and found else None
                        if secret is None:
                            return False
                    else:
                        await self._send({"type": "error", "error": "send auth first"})
        if not secret:
            return False
        refused = await self._auth(secret)
        if refused is not None:
            await self._send({"type": "error", "error": refused, "ref": ref})
        elif ref is not None:
            await self._send({"type": "reply", "ref": ref, "ok": True, "status": 200})
        return refused is None

    def _secret_at_open(self) -> str | None:
        """The secret the open request carried: a bearer token or ``auth_secret=``."""
        bearer = self.head.headers.get("authorization", "")
        return bearer[7:] if bearer[:7].lower() == "bearer " else self.head.arg("auth_secret")

    async def _unlock_at_open(self) -> bool:
        """``--admin-secret``: a secret given at open must be it (else False: the stream
        closes with 4001); none given leaves actions locked until an ``auth`` op."""
        gate = self.context.gate
        secret = self._secret_at_open()
        if not gate.secret or not secret or self.context.authenticate is not None:
            return True
        self.unlocked = gate.secret_matches(secret)
        if not self.unlocked:
            await self._send(
                {"type": "error", "error": "E_AUTH_FAILED the admin secret was refused"}
            )
        return self.unlocked

    async def _auth(self, secret: str) -> str | None:
        """Take the grants of ``secret``; the auth server's refusal, if it refused."""
        from .api_args import HttpError

        assert self.context.authenticate is not None  # noqa: S101 - only with AUTH on
        try:
            self.session = await self.context.authenticate(secret, self.head.remote_address)
        except HttpError as error:
            return error.message
        return None

    # ----------------------------------------------------------------- writing

    async def _send(self, message: Mapping[str, object]) -> None:
        self.seq += 1
        document = {"type": message["type"], "seq": self.seq, "ts": _now_ms(), **message}
        body = document.get("body")
        if isinstance(body, bytes):
            document["body"] = base64.b64encode(body).decode("ascii")
        await self._send_text(orjson.dumps(document).decode())

    async def _send_snapshot(self, snapshot: Snapshot) -> None:
        """The group's snapshot, as every subscriber of it sends it, at our ``seq``."""
        self.seq += 1
        await self._sent(send_in_two_frames(self.ws, snapshot.head(self.seq), snapshot.tail))

    async def _send_text(self, text: str) -> None:
        await self._sent(self.ws.send_message(text))

    async def _sent(self, sending: Awaitable[None]) -> None:
        """Await ``sending`` for at most ``SEND_TIMEOUT``; a reader that takes nothing
        for that long is closed as too slow."""
        with trio.move_on_after(SEND_TIMEOUT) as scope:
            await sending
        if scope.cancelled_caught:
            self._why_closing = (CLOSE_TOO_SLOW, "subscriber too slow")
            self._scope.cancel()
            await trio.lowlevel.checkpoint()  # raises Cancelled: the scope ends the run

    async def _write_forever(self) -> None:
        """Drain the queue as events come; a snapshot at each deadline (its group's
        schedule: every subscriber of the subscription wakes at the same times)."""
        snapshots = self.context.snapshots
        while True:
            if self.interval_ms and trio.current_time() >= self._next_snapshot:
                if self._snapshot_key is not None:
                    snapshot = await snapshots.snapshot(
                        self._snapshot_key, sent=self._sent_built_at, fresh_after=self._fresh_after
                    )
                    self._next_snapshot, self._sent_built_at = snapshot.next_due, snapshot.built_at
                    await self._send_snapshot(snapshot)
                else:  # snapshots not asked for: only the events
                    self._next_snapshot = math.inf
            for event in self.watcher.take():
                await self._send(event)
            if self.watcher.queue:
                continue
            self._wakeup = trio.Event()
            deadline = self._next_snapshot if self.interval_ms else math.inf
            with trio.move_on_at(deadline):
                await self._wakeup.wait()

    def _join_snapshots(self, key: SnapshotKey | None) -> None:
        """Move to the snapshot group of ``key`` (None: none)."""
        snapshots = self.context.snapshots
        if self._snapshot_key is not None:
            snapshots.leave(self._snapshot_key)
        self._snapshot_key = key
        if key is not None:
            snapshots.join(key)

    # ----------------------------------------------------------------- ops

    async def _read_ops(self) -> None:
        while True:
            message = _parsed(await self.ws.get_message())
            if not isinstance(message, dict):
                self._answer({"type": "error", "error": "a frame must be a JSON object"})
                continue
            await self._op(message)

    async def _op(self, message: dict[str, object]) -> None:
        op = message.get("op")
        ref = message.get("ref")
        if op == "subscribe":
            error = self._subscribe(message)
            if error:
                self._answer({"type": "error", "error": error, "ref": ref})
            else:
                self._next_snapshot = self._fresh_after = trio.current_time()
                self._wakeup.set()
        elif op == "sample":
            await self._sample(message)
        elif op == "auth":
            secret = message.get("secret")
            refused = await self._auth_op(secret if isinstance(secret, str) else "")
            await self._reply(ref, Response.error(401, refused) if refused else Response.empty())
        elif isinstance(op, str) and (op in _TOPIC_OPS or op in _CHANNEL_OPS):
            refusal = self._locked()
            await self._reply(ref, refusal or await self._admin(op, message))
        else:
            self._answer({"type": "error", "error": f"unknown op {op!r}", "ref": ref})

    async def _auth_op(self, secret: str) -> str | None:
        """An ``auth`` op: AUTH's grants, or ``--admin-secret`` (without either it is
        accepted and changes nothing); the refusal's text."""
        if self.context.authenticate is not None:
            return await self._auth(secret) if secret else "E_AUTH_FAILED no secret"
        if not self.context.gate.secret:
            return None
        self.unlocked = self.unlocked or self.context.gate.secret_matches(secret)
        return None if self.unlocked else "E_AUTH_FAILED the admin secret was refused"

    def _locked(self) -> Response | None:
        """Why this subscriber may not act or read bodies: the mode, or the admin
        secret not given yet (AUTH's grants are checked per op, later)."""
        gate = self.context.gate
        if not gate.actions_allowed:
            return Response.error(403, READ_ONLY)
        if gate.secret and not self.unlocked:
            return Response.error(401, SECRET_REQUIRED)
        return None

    def _subscribe(self, message: Mapping[str, object]) -> str | None:
        """Apply a subscription; the error text when it is not one."""
        topics = message.get("topics")
        groups = message.get("events", list(EVENT_GROUPS))
        interval = message.get("snapshot_interval_ms", self.interval_ms)
        if topics is not None and not _strings(topics):
            return "topics must be a list of topic names or null"
        if not _strings(groups) or not set(groups).issubset(EVENT_GROUPS):
            return f"events must be a list of {', '.join(EVENT_GROUPS)}"
        if not isinstance(interval, int) or isinstance(interval, bool):
            return "snapshot_interval_ms must be an integer"
        if interval != 0 and interval < MIN_INTERVAL_MS:
            return f"snapshot_interval_ms must be 0 or at least {MIN_INTERVAL_MS}"
        self.watcher.topics = None if topics is None else frozenset(topics)
        self.watcher.groups = frozenset(groups)
        self.interval_ms = interval
        wants = interval and "snapshot" in self.watcher.groups
        self._join_snapshots((interval, self.watcher.topics) if wants else None)
        return None

    async def _sample(self, message: dict[str, object]) -> None:
        ref = message.get("ref")
        topic, every, bodies = message.get("topic"), message.get("every", 1), message.get("bodies")
        if not isinstance(topic, str) or not topic:
            await self._reply(ref, Response.error(400, "MISSING_ARG_TOPIC"))
            return
        if not isinstance(every, int) or isinstance(every, bool) or every < 0:
            await self._reply(ref, Response.error(400, "INVALID_ARG_EVERY"))
            return
        locked = self._locked() if bodies else None
        if locked is not None:
            await self._reply(ref, locked)
            return
        if bodies and self.session is not None:
            refused = await self.session.check("SUB", topic, SAMPLE_CHANNEL)
            if refused is not None:
                await self._reply(ref, Response.error(403, refused.text))
                return
        self.context.broker.events.set_sampler(self.watcher, topic, every, bodies=bool(bodies))
        await self._reply(ref, Response.empty())

    async def _admin(self, op: str, message: Mapping[str, object]) -> Response:
        """An admin op through the HTTP API's handler, after the AUTH grants."""
        topic, channel = message.get("topic"), message.get("channel")
        if self.session is not None:
            topic_name = topic if isinstance(topic, str) else ""
            if op in _TOPIC_OPS:
                refused = await self.session.check("PUB", topic_name)
            else:
                channel_name = channel if isinstance(channel, str) else ""
                refused = await self.session.check("SUB", topic_name, channel_name)
            if refused is not None:
                status = 403 if refused.code == "E_UNAUTHORIZED" else 401
                return Response.error(status, refused.text)
        path = _TOPIC_OPS.get(op) or _CHANNEL_OPS[op]
        args = {
            name: _arg_text(message[name])
            for name in _OP_ARGS
            if name in message and message[name] is not None
        }
        body = message.get("offset", b"")
        request = Request.from_target(
            "POST",
            f"{path}?{urlencode(args)}",
            {},
            body=str(body).encode() if body != b"" else b"",
            remote_address=self.head.remote_address,
        )
        return await self.context.dispatch(request)

    def _answer(self, message: dict[str, object]) -> None:
        """Queue an answer to an op behind the events the op caused (the writer sends)."""
        message.setdefault("ts", _now_ms())
        self.watcher.offer(message)

    async def _reply(self, ref: object, response: Response) -> None:
        reply: dict[str, object] = {
            "type": "reply",
            "ref": ref,
            "ok": 200 <= response.status < 300,
            "status": response.status,
        }
        if not reply["ok"]:
            reply["error"] = _error_text(response)
        self._answer(reply)


async def _close(ws: WebSocketConnection, code: int, reason: str) -> None:
    """Close with ``code``, waiting a little for the close handshake, even when
    the stream is being cancelled."""
    with trio.move_on_after(CLOSE_TIMEOUT) as scope:
        scope.shield = True
        await ws.aclose(code, reason)


def _parsed(frame: str | bytes) -> object:
    try:
        return orjson.loads(frame)
    except orjson.JSONDecodeError:
        return None


def _strings(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value)


def _arg_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _error_text(response: Response) -> str:
    """The HTTP API's error message: ``{"message": ...}`` or the text body."""
    try:
        document = orjson.loads(response.body)
    except orjson.JSONDecodeError:
        return response.body.decode("utf-8", "replace")
    if isinstance(document, dict) and isinstance(document.get("message"), str):
        return str(document["message"])
    return response.body.decode("utf-8", "replace")


def _query_subscription(query: Mapping[str, list[str]]) -> dict[str, object]:
    """The subscription the open request's query asks for (docs/admin.md)."""
    subscription: dict[str, object] = {}
    if query.get("topics"):
        subscription["topics"] = [t for t in query["topics"][0].split(",") if t]
    if query.get("events"):
        subscription["events"] = [e for e in query["events"][0].split(",") if e]
    if query.get("snapshot_interval_ms"):
        text = query["snapshot_interval_ms"][0]
        subscription["snapshot_interval_ms"] = int(text) if text.isdigit() else text
    return subscription


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
