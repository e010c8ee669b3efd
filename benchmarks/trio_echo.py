"""The floor under a request's round trip: a minimal Trio server that answers and stores nothing.

It speaks just enough of nsqd's two front doors for NSQ's ``bench_pub`` and ``wrk`` to
drive it as they drive a broker: on the TCP port, the ``  V2`` magic, then one ``OK``
frame per command (a ``PUB``'s or ``IDENTIFY``'s body is skipped by its length); on the
HTTP port, ``200 OK`` per request (its body skipped by ``Content-Length``), keep-alive.
What a broker does beyond that (parsing for real, routing, the durable append, stats)
is the broker's own cost; what this costs is Trio's and CPython's, and is the floor that
``benchmarks/request_cost.py`` prints beside trionsq and Go nsqd.

Each connection is one task reading with ``receive_some`` and answering every command
of a read with one ``send_all``: the idiomatic Trio server. ``--raw`` reads and writes
the descriptor the way trionsq's reader does instead (``os.read``/``os.write``, waiting
on ``wait_readable`` only when a read finds nothing), to show what that buys.

Takes the flags ``vs_nsqd.py`` gives a broker (``--tcp-address``, ``--http-address``;
the others are ignored)::

    .venv/bin/python benchmarks/trio_echo.py --tcp-address=127.0.0.1:4150 \\
        --http-address=127.0.0.1:4151
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
from typing import TYPE_CHECKING, Final

import trio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

OK_FRAME: Final = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
HTTP_OK: Final = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nOK"
PING_OK: Final = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK"
_BODY_COMMANDS: Final = (b"PUB", b"IDENTIFY", b"MPUB", b"AUTH", b"DPUB")


def nsq_replies(buffer: bytearray) -> int:
    """How many complete commands ``buffer`` starts with; they are removed from it."""
    if buffer.startswith(b"  V2"):
        del buffer[:4]
    count = 0
    start = 0
    while True:
        end = buffer.find(b"\n", start)
        if end < 0:
            break
        line_end = end + 1
        if bytes(buffer[start:end]).split(b" ", 1)[0] in _BODY_COMMANDS:
            if len(buffer) < line_end + 4:
                break
            size = int.from_bytes(buffer[line_end : line_end + 4], "big")
            if len(buffer) < line_end + 4 + size:
                break
            line_end += 4 + size
        start = line_end
        count += 1
    del buffer[:start]
    return count


def http_replies(buffer: bytearray) -> tuple[int, bool]:
    """Complete requests at the start of ``buffer`` (removed) and whether one was /ping."""
    count = 0
    ping = False
    while (end := buffer.find(b"\r\n\r\n")) >= 0:
        head = bytes(buffer[:end]).lower()
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line.startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        if len(buffer) < end + 4 + length:
            break
        ping = ping or head.startswith(b"get /ping")
        del buffer[: end + 4 + length]
        count += 1
    return count, ping


async def serve_nsq(stream: trio.SocketStream) -> None:
    buffer = bytearray()
    async with stream:
        while data := await stream.receive_some(65536):
            buffer += data
            if count := nsq_replies(buffer):
                await stream.send_all(OK_FRAME * count)


async def serve_http(stream: trio.SocketStream) -> None:
    buffer = bytearray()
    async with stream:
        while data := await stream.receive_some(65536):
            buffer += data
            count, ping = http_replies(buffer)
            if ping:
                await stream.send_all(PING_OK)
                return
            if count:
                await stream.send_all(HTTP_OK * count)


async def _read_raw(fd: int) -> bytes:
    """One read straight from the descriptor, waiting for it only when it is empty."""
    while True:
        try:
            return os.read(fd, 65536)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(fd)


async def serve_nsq_raw(stream: trio.SocketStream) -> None:
    buffer = bytearray()
    fd = stream.socket.fileno()
    async with stream:
        while data := await _read_raw(fd):
            buffer += data
            if count := nsq_replies(buffer):
                os.write(fd, OK_FRAME * count)  # small: fits in the socket's buffer


async def serve_http_raw(stream: trio.SocketStream) -> None:
    buffer = bytearray()
    fd = stream.socket.fileno()
    async with stream:
        while data := await _read_raw(fd):
            buffer += data
            count, ping = http_replies(buffer)
            if ping:
                os.write(fd, PING_OK)
                return
            if count:
                os.write(fd, HTTP_OK * count)


def quietly(
    handler: Callable[[trio.SocketStream], Awaitable[None]],
) -> Callable[[trio.SocketStream], Awaitable[None]]:
    """``handler``, for which a client that resets its connection is just gone (an
    exception out of a handler would end ``serve_listeners`` and the whole server)."""

    async def serve(stream: trio.SocketStream) -> None:
        with contextlib.suppress(OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            await handler(stream)

    return serve


def host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


async def main(args: argparse.Namespace) -> None:
    nsq_handler = serve_nsq_raw if args.raw else serve_nsq
    http_handler = serve_http_raw if args.raw else serve_http
    async with trio.open_nursery() as nursery:
        for address, handler in (
            (args.tcp_address, nsq_handler),
            (args.http_address, http_handler),
        ):
            host, port = host_port(address)
            listeners = await trio.open_tcp_listeners(port, host=host)  # streams: NODELAY
            nursery.start_soon(functools.partial(trio.serve_listeners, quietly(handler), listeners))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tcp-address", default="127.0.0.1:4150")
    parser.add_argument("--http-address", default="127.0.0.1:4151")
    parser.add_argument("--raw", action="store_true", help="read/write the descriptor directly")
    return parser


if __name__ == "__main__":
    parsed, _ignored = build_parser().parse_known_args()  # vs_nsqd's other broker flags
    trio.run(main, parsed)
