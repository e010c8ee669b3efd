"""``trionsq serve`` as a user runs it: a subprocess, real sockets, signals."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from trionsq.protocol import MAGIC_V2, Pub
from trionsq.protocol.client import ClientConnection, Response, encode_commands

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

TRIONSQ = Path(sys.executable).with_name("trionsq")


@asynccontextmanager
async def serving() -> AsyncIterator[tuple[trio.Process, bytes]]:
    """``trionsq serve`` on free loopback ports, in memory: the process and what it
    said on stderr up to its listening lines (TCP first, then HTTP); killed on the way
    out unless it has exited."""
    process = await trio.lowlevel.open_process(
        [
            str(TRIONSQ),
            "serve",
            "--tcp-address",
            "127.0.0.1:0",
            "--http-address",
            "127.0.0.1:0",
            "--in-memory",
        ],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    try:
        seen = b""
        with trio.fail_after(20):
            while b"HTTP: listening on" not in seen:
                chunk = await process.stderr.receive_some(4096)
                assert chunk, f"exited early: {seen!r}"
                seen += chunk
        yield process, seen
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.stderr.aclose()


async def test_serve_listens_answers_and_stops_on_sigterm() -> None:
    started = time.monotonic()
    async with serving() as (process, seen):
        startup = time.monotonic() - started
        match = re.search(rb"\[nsqd\] \S+ \S+ INFO: TCP: listening on 127\.0\.0\.1:(\d+)", seen)
        assert match is not None, seen
        stream = await trio.open_tcp_stream("127.0.0.1", int(match.group(1)))
        async with stream:
            await stream.send_all(MAGIC_V2 + encode_commands([Pub("t", b"hi")]))
            decoder = ClientConnection()
            with trio.fail_after(10):
                frames = decoder.receive_data(await stream.receive_some(4096))
            assert isinstance(frames[0], Response)
            assert frames[0].is_ok
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            assert await process.wait() == 0
        assert startup < 10  # the acceptance figure (< 1 s idle) is measured in the closing note


async def test_a_websocket_upgrade_closed_unread_does_not_end_serve() -> None:
    """Issue 30's repro, as the issue ran it: an upgrade to /admin/stream whose socket
    closes before the answer is read ended ``trionsq serve`` with status 1 every time."""
    async with serving() as (process, seen):
        match = re.search(rb"HTTP: listening on 127\.0\.0\.1:(\d+)", seen)
        assert match is not None, seen
        http = ("127.0.0.1", int(match.group(1)))
        for _ in range(20):
            sock = trio.socket.socket()
            await sock.connect(http)
            await sock.send(
                b"GET /admin/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                b"Sec-WebSocket-Version: 13\r\n\r\n"
            )
            sock.close()
        await trio.sleep(0.5)  # the broker's writes of the 101 and the hello fail meanwhile
        assert process.returncode is None
        stream = await trio.open_tcp_stream(*http)
        async with stream:
            await stream.send_all(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            with trio.fail_after(10):
                assert (await stream.receive_some(4096)).endswith(b"\r\n\r\nOK")
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            assert await process.wait() == 0
