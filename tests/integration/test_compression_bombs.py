"""A client whose few compressed bytes expand into millions of commands must not
freeze the broker (issue 14): it is served a bounded piece at a time, between the
other connections, and still gets every command processed.

These tests run on the real clock on purpose: what they measure is how long the
broker's single thread is held, which a mock clock cannot see. The bound asserted
is generous (half a second, while the bomb takes seconds); before the fix the
broker was blocked for the bomb's whole length, or ~1.5 s per read for snappy.
"""

from __future__ import annotations

import pytest
import trio

from trionsq.protocol import IdentifyRequest, Pub, Rdy, Sub
from trionsq.protocol.client import MessageFrame, Response, encode_commands

from .raw import start
from .upgraded import UpgradedClient

BOMB_COMMANDS = 6 * 1024 * 1024 // 4
"""``NOP\\n`` commands in one bomb: 6 MiB once decompressed, a few KiB on the wire."""
WORST_PING = 0.5
"""Seconds another client may wait for ``/ping`` while a bomb is processed."""


async def ping_gaps(address: tuple[str, int], done: trio.Event, gaps: list[float]) -> None:
    """``GET /ping`` back to back on one connection until ``done``; record the time
    between answers (the broker and this task share the thread, so a broker that
    holds it shows up here as one long gap)."""
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        last = trio.current_time()
        while not done.is_set():
            await stream.send_all(b"GET /ping HTTP/1.1\r\nHost: nsqd\r\n\r\n")
            answer = b""
            while not answer.endswith(b"\r\n\r\nOK"):
                data = await stream.receive_some(4096)
                assert data, "the HTTP server closed the connection"
                answer += data
            now = trio.current_time()
            gaps.append(now - last)
            last = now


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
async def test_a_compression_bomb_does_not_freeze_other_clients(
    codec: str, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    request = IdentifyRequest(snappy=codec == "snappy", deflate=codec == "deflate", deflate_level=9)
    bomber = await UpgradedClient.connect(addresses.tcp, request)
    bomb = b"NOP\n" * BOMB_COMMANDS + encode_commands([Pub("bombed", b"last")])
    done = trio.Event()
    gaps: list[float] = []
    assert addresses.http is not None
    nursery.start_soon(ping_gaps, addresses.http, done, gaps)
    await trio.sleep(0.05)  # pings flowing before the bomb lands
    started = trio.current_time()
    await bomber.send_raw(bomb)
    with trio.fail_after(60):
        (reply,) = await bomber.read(1)
    took = trio.current_time() - started
    done.set()
    assert isinstance(reply, Response)
    assert reply.is_ok, reply  # every NOP was parsed, then the PUB stored
    assert took > 2 * WORST_PING  # the bomb did take long: the bound below means something
    assert len(gaps) > 10
    assert max(gaps) < WORST_PING, f"/ping waited {max(gaps):.2f} s (bomb took {took:.2f} s)"
    consumer = await UpgradedClient.connect(addresses.tcp, IdentifyRequest())
    await consumer.send(Sub("bombed", "c"), Rdy(1))
    ok, message = await consumer.read(2)
    assert isinstance(ok, Response)
    assert ok.is_ok
    assert isinstance(message, MessageFrame)
    assert message.message.body == b"last"
    await bomber.aclose()
    await consumer.aclose()
