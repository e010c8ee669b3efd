"""Connections dropped at a chosen step of a handshake (issue 30: no error of one
connection may end the broker or the lookupd).

A :class:`Step` is what a client says (and reads) before it goes away; :func:`drop_at`
runs it on a fresh socket, then ends the socket both ways a peer can vanish: a
close (FIN) and a reset (RST, ``SO_LINGER`` 0, as a killed process or a NAT timeout
leaves it), and lets the server handle that before the caller checks it still serves.
"""

from __future__ import annotations

import contextlib
import ssl
import struct
from collections.abc import Awaitable, Callable
from typing import Final

import attrs
import trio
import trio.testing
import wsproto
from wsproto.events import AcceptConnection, Request, TextMessage

GUARD: Final = 10.0
"""Longest wait for an answer the step reads."""
WAYS: Final = ("close", "reset")


@attrs.frozen
class Step:
    """One place to drop a connection: its name and what the client does before."""

    name: str
    act: Callable[[trio.socket.SocketType], Awaitable[None]]


async def drop_at(address: tuple[str, int], step: Step, way: str) -> None:
    """Connect, do ``step``, end the socket by ``way`` (close or reset), and wait until
    the server has seen it (every task blocked for a moment)."""
    sock = trio.socket.socket()
    try:
        await sock.connect(address)
        with trio.fail_after(GUARD):
            await step.act(sock)
    finally:
        if way == "reset":
            sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    await trio.testing.wait_all_tasks_blocked(cushion=0.02)


def sending(*parts: bytes) -> Callable[[trio.socket.SocketType], Awaitable[None]]:
    """A step that sends ``parts`` (each its own write) and reads nothing."""

    async def act(sock: trio.socket.SocketType) -> None:
        for part in parts:
            await sock.send(part)

    return act


async def read_until(sock: trio.socket.SocketType, marker: bytes) -> bytes:
    """Read until ``marker`` has arrived; everything read."""
    seen = b""
    while marker not in seen:
        chunk = await sock.recv(65536)
        assert chunk, f"closed before {marker!r}: {seen[:200]!r}"
        seen += chunk
    return seen


async def read_some(sock: trio.socket.SocketType, count: int) -> bytes:
    """Read at least ``count`` bytes."""
    seen = b""
    while len(seen) < count:
        chunk = await sock.recv(65536)
        assert chunk, f"closed after {seen[:200]!r}"
        seen += chunk
    return seen


def sized(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def client_hello() -> bytes:
    """A TLS ClientHello as a real client sends it first (any server certificate)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def tls_steps(prefix: Callable[[trio.socket.SocketType], Awaitable[None]]) -> list[Step]:
    """Drops inside a TLS handshake the server runs after ``prefix``: half a
    ClientHello, the whole of it unanswered, and after the server's first flight."""
    hello = client_hello()

    async def half(sock: trio.socket.SocketType) -> None:
        await prefix(sock)
        await sock.send(hello[: len(hello) // 2])

    async def whole(sock: trio.socket.SocketType) -> None:
        await prefix(sock)
        await sock.send(hello)

    async def after_server_flight(sock: trio.socket.SocketType) -> None:
        await whole(sock)
        await read_some(sock, 1)

    return [
        Step("half a ClientHello", half),
        Step("a ClientHello, unanswered", whole),
        Step("after the server's first flight", after_server_flight),
    ]


def websocket_client(target: str) -> tuple[wsproto.WSConnection, bytes]:
    """A websocket client (wsproto) and its upgrade request for ``target``."""
    client = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    return client, client.send(Request(host="127.0.0.1", target=target))


async def websocket_open(sock: trio.socket.SocketType, target: str) -> wsproto.WSConnection:
    """Upgrade ``sock`` to a websocket on ``target``, up to the 101 read."""
    client, upgrade = websocket_client(target)
    await sock.send(upgrade)
    client.receive_data(await read_until(sock, b"\r\n\r\n"))
    assert any(isinstance(event, AcceptConnection) for event in client.events())
    return client


async def websocket_message(sock: trio.socket.SocketType, client: wsproto.WSConnection) -> str:
    """The next whole text message."""
    parts: list[str] = []
    while True:
        for event in client.events():
            if isinstance(event, TextMessage):
                parts.append(event.data)
                if event.message_finished:
                    return "".join(parts)
        chunk = await sock.recv(65536)
        assert chunk, "the server closed the websocket"
        client.receive_data(chunk)


def websocket_frame(client: wsproto.WSConnection, text: str) -> bytes:
    """A masked text frame of ``text`` from ``client``."""
    return client.send(TextMessage(data=text))


async def ping(address: tuple[str, int]) -> None:
    """``GET /ping`` answers ``200 OK`` (a raw request: an HTTP client costs far more
    to set up than the broker takes to answer)."""
    sock = trio.socket.socket()
    try:
        await sock.connect(address)
        await sock.send(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        with trio.fail_after(GUARD):
            while chunk := await sock.recv(65536):
                answer += chunk
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:200]
    assert answer.endswith(b"\r\n\r\nOK"), answer[-200:]
