"""A real HTTP auth server for tests: trio + h11 on 127.0.0.1, one request per connection.

Replies are chosen by the request's ``secret`` (from the query of a GET, from
nsqd's JSON body of a POST); every request is recorded so tests can assert what
was sent. ``Reply.delay`` sleeps on Trio's clock, so slow servers are tested under
a MockClock without real waiting.
"""

from __future__ import annotations

import socket
import ssl
from contextlib import contextmanager
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

import attrs
import h11
import orjson
import trio

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

__all__ = [
    "AuthServer",
    "RecordedRequest",
    "Reply",
    "grant",
    "refusing_address",
    "start_auth_server",
    "unanswering_address",
]

MAX_REQUEST_BODY = 1 << 20


@attrs.frozen
class Reply:
    """What the server answers: status, body, and how (delayed, chunked, or not at all)."""

    status: int = 200
    body: bytes = b""
    delay: float = 0.0
    chunked: bool = False
    hang_up: bool = False


def grant(
    authorizations: Sequence[Mapping[str, object]] = (
        {"topic": ".*", "channels": [".*"], "permissions": ["subscribe", "publish"]},
    ),
    *,
    ttl: int = 3600,
    identity: str = "test-identity",
    identity_url: str = "http://example.invalid/id",
) -> Reply:
    """A 200 reply in the auth server's JSON shape (everything allowed by default)."""
    body = {
        "ttl": ttl,
        "identity": identity,
        "identity_url": identity_url,
        "authorizations": list(authorizations),
    }
    return Reply(body=orjson.dumps(body))


@attrs.frozen
class RecordedRequest:
    """One request as the server received it."""

    method: str
    target: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def query(self) -> str:
        return self.target.partition("?")[2]

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name.lower():
                return value
        return None

    @property
    def params(self) -> dict[str, str]:
        """The auth values: query pairs of a GET, the JSON lists of a POST (first item)."""
        if self.method == "POST":
            form = orjson.loads(self.body)
            return {str(key): str(values[0]) for key, values in form.items()}
        return dict(parse_qsl(self.query, keep_blank_values=True))


@attrs.define
class AuthServer:
    """Replies by secret, ``default`` for the rest; ``requests`` in arrival order."""

    replies: dict[str, Reply] = attrs.field(factory=dict)
    default: Reply = Reply(status=403, body=b'{"message":"unknown secret"}')
    ssl_context: ssl.SSLContext | None = None
    requests: list[RecordedRequest] = attrs.field(factory=list)
    port: int = 0

    @property
    def address(self) -> str:
        """``host:port``, the form nsqd turns into ``http://host:port/auth``."""
        return f"127.0.0.1:{self.port}"

    def url(self, path: str = "/auth") -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def secrets_seen(self) -> list[str]:
        return [request.params.get("secret", "") for request in self.requests]

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        sockets = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = sockets[0].socket.getsockname()[1]
        listeners: list[trio.abc.Listener[trio.abc.Stream]] = list(sockets)
        if self.ssl_context is not None:
            listeners = [
                trio.SSLListener(listener, self.ssl_context, https_compatible=True)
                for listener in listeners
            ]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.abc.Stream) -> None:
        try:
            await self._answer(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            pass  # the client went away (a timeout test): nothing to answer
        finally:
            await trio.aclose_forcefully(stream)

    async def _answer(self, stream: trio.abc.Stream) -> None:
        connection = h11.Connection(h11.SERVER)
        request: h11.Request | None = None
        body = bytearray()
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(bytes(await stream.receive_some(65536)))
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_REQUEST_BODY:
                    return
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                break
        if request is None:
            return
        recorded = RecordedRequest(
            method=request.method.decode(),
            target=request.target.decode(),
            headers=tuple((name.decode(), value.decode()) for name, value in request.headers),
            body=bytes(body),
        )
        self.requests.append(recorded)
        reply = self.replies.get(recorded.params.get("secret", ""), self.default)
        if reply.delay:
            await trio.sleep(reply.delay)
        if reply.hang_up:
            return
        headers = [("Content-Type", "application/json"), ("Connection", "close")]
        if not reply.chunked:
            headers.append(("Content-Length", str(len(reply.body))))
        out = connection.send(h11.Response(status_code=reply.status, headers=headers))
        if reply.body:
            out += connection.send(h11.Data(data=reply.body))
        out += connection.send(h11.EndOfMessage())
        await stream.send_all(out)


async def start_auth_server(
    nursery: trio.Nursery,
    replies: Mapping[str, Reply] | None = None,
    *,
    default: Reply | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> AuthServer:
    """Start an :class:`AuthServer` in ``nursery`` and return it once it listens."""
    server = AuthServer(replies=dict(replies or {}), ssl_context=ssl_context)
    if default is not None:
        server.default = default
    await nursery.start(server.serve)
    return server


@contextmanager
def refusing_address() -> Iterator[str]:
    """A ``host:port`` whose connects are refused: bound, never listening, held open."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


@contextmanager
def unanswering_address() -> Iterator[str]:
    """A ``host:port`` whose connects hang: its accept queue (backlog 0) is already full.

    Linux drops the SYNs of further connects, so only the connect timeout ends them.
    """
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener,
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as filler,
    ):
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        filler.connect(listener.getsockname())  # completes at once and fills the queue
        yield f"127.0.0.1:{listener.getsockname()[1]}"
