"""The HTTP version in the request line, answered as Go's net/http server answers it
(issue 14): any ``HTTP/1.x`` is served, ``HTTP/0.x`` and ``HTTP/2+`` get 505 with
Go's exact bytes, a version not of the form ``HTTP/<digit>.<digit>`` is a 400."""

from __future__ import annotations

import pytest
import trio

from trionsq.testing import GUARD_SECONDS

from .raw import start

GO_505 = (
    b"HTTP/1.1 505 HTTP Version Not Supported: unsupported protocol version\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
    b"505 HTTP Version Not Supported: unsupported protocol version"
)


async def until_closed(address: tuple[str, int], request: bytes) -> bytes:
    """Everything the server sends for ``request`` before it closes the connection."""
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        await stream.send_all(request)
        received = b""
        with trio.fail_after(GUARD_SECONDS):
            while chunk := await stream.receive_some():
                received += chunk
    return received


@pytest.mark.parametrize("version", [b"9.9", b"2.0", b"3.0", b"0.9"])
async def test_a_version_other_than_1_x_is_505_as_go(version: bytes, nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    assert addresses.http is not None
    for request_line in (b"GET /ping HTTP/", b"POST /pub?topic=t HTTP/"):
        answer = await until_closed(
            addresses.http, request_line + version + b"\r\nHost: nsqd\r\nContent-Length: 1\r\n\r\nm"
        )
        assert answer == GO_505
    assert "t" not in addresses.broker.topics  # the handler never ran


@pytest.mark.parametrize("version", [b"1.2", b"1.9"])
async def test_any_http_1_x_is_served_and_kept_alive(version: bytes, nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    assert addresses.http is not None
    stream = await trio.open_tcp_stream(*addresses.http)
    async with stream:
        request = b"GET /ping HTTP/" + version + b"\r\nHost: nsqd\r\n\r\n"
        await stream.send_all(request + request)  # the second on the same connection
        received = b""
        with trio.fail_after(GUARD_SECONDS):
            while received.count(b"\r\n\r\nOK") < 2:
                chunk = await stream.receive_some()
                assert chunk, received
                received += chunk
    assert received.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Connection: close" not in received


@pytest.mark.parametrize("version", [b"10.1", b"1.10", b"1", b"one"])
async def test_a_malformed_version_is_400(version: bytes, nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    assert addresses.http is not None
    answer = await until_closed(addresses.http, b"GET /ping HTTP/" + version + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert answer.endswith(b"\r\n\r\n400 Bad Request")


async def test_the_http2_preface_reaches_the_router_as_in_go(nursery: trio.Nursery) -> None:
    """Go lets ``PRI * HTTP/2.0`` through to its handler; nsqd's router knows no ``*``."""
    addresses = await start(nursery)
    assert addresses.http is not None
    answer = await until_closed(addresses.http, b"PRI * HTTP/2.0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 404 Not Found\r\n")
    assert answer.endswith(b'{"message":"NOT_FOUND"}')
