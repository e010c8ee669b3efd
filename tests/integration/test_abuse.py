"""Clients that misbehave get nsqd's error or a clean close, in bounded memory, while
the others keep being served (issue: limits and abuse).

Memory is checked on the test process itself (the broker runs in it): its peak RSS
(``ru_maxrss``) may not grow by more than a few MiB where a broker that trusted a
size prefix would allocate gigabytes.
"""

from __future__ import annotations

import resource
import struct
from typing import TYPE_CHECKING

import trio
import trio.testing

from trionsq import NsqdConfig
from trionsq.protocol import Fin, Pub
from trionsq.protocol.frames import MAGIC_V2

from .raw import next_error, next_message, publish, start

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients

_SIZE = struct.Struct(">I")
MIB = 1024 * 1024
NSQD_HEARTBEATS = NsqdConfig.loopback(client_timeout=60.0)
"""nsqd's 30-second default heartbeat (a loopback broker sends one a day)."""


def peak_rss() -> int:
    """Bytes: the process's peak resident set so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


async def still_served(clients: Clients, addresses: BoundAddresses, topic: str) -> None:
    """Another client publishes and consumes as usual."""
    tcp = addresses.tcp
    producer = await clients.connect(tcp)
    await publish(producer, Pub(topic, b"fine"))
    consumer = await clients.subscribe(tcp, topic, "c", rdy=1)
    message = await next_message(consumer)
    assert message.body == b"fine"
    await consumer.send(Fin(message.id))


async def test_a_4_gib_size_prefix_is_refused_without_allocating(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    before = peak_rss()
    for command, text in (
        (b"PUB t\n", "E_BAD_MESSAGE PUB invalid message body size -1"),
        (b"MPUB t\n", "E_BAD_BODY MPUB invalid body size -1"),
        (b"IDENTIFY\n", "E_BAD_BODY IDENTIFY invalid body size -1"),
    ):
        client = await clients.connect(addresses.tcp)
        await client.stream.send_all(command + _SIZE.pack(0xFFFF_FFFF) + b"x" * 1000)
        error = await next_error(client)
        assert error.error.text == text
        await client.wait_closed()
    huge = await clients.connect(addresses.tcp)
    await huge.stream.send_all(b"PUB t\n" + _SIZE.pack(0x7FFF_FFFF))
    error = await next_error(huge)
    assert error.error.text == "E_BAD_MESSAGE PUB message too big 2147483647 > 1048576"
    await huge.wait_closed()
    assert peak_rss() - before < 64 * MIB
    await still_served(clients, addresses, "after-prefix")


async def test_a_body_that_never_ends_is_dropped_after_two_heartbeats(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery, NSQD_HEARTBEATS)
    stalled = await clients.connect(addresses.tcp)
    await stalled.stream.send_all(b"PUB t\n" + _SIZE.pack(1000) + b"only part of it")
    start_time = trio.current_time()
    await still_served(clients, addresses, "while-stalled")  # the others go on
    received = b""
    with trio.fail_after(120):  # heartbeats only, then the read deadline of 2 x 30 s
        while chunk := await stalled.stream.receive_some(100):
            received += chunk
    assert received.count(b"_heartbeat_") == 2  # at 30 s and 60 s, then closed
    assert b"E_" not in received
    assert 60 <= trio.current_time() - start_time < 61
    assert (
        "t" not in addresses.broker.topics
        or not addresses.broker.topics["t"].statistics().message_count
    )


async def test_thousands_of_idle_connections_cost_bounded_memory(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery, NsqdConfig.loopback())
    before = peak_rss()
    streams: list[trio.SocketStream] = []
    try:
        for _ in range(2000):
            stream = await trio.open_tcp_stream(*addresses.tcp)
            await stream.send_all(MAGIC_V2)
            streams.append(stream)
        await still_served(clients, addresses, "beside-idle")
        assert len(addresses.broker.clients) >= 2000
        assert peak_rss() - before < 200 * MIB
    finally:
        for stream in streams:
            await trio.aclose_forcefully(stream)


async def test_garbage_instead_of_a_protocol_is_closed_cleanly(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    stream = await trio.open_tcp_stream(*addresses.tcp)
    await stream.send_all(b"\x16\x03\x01\x02\x00" + bytes(range(256)) * 64)  # a TLS hello
    reply = b""
    while chunk := await stream.receive_some(65536):
        reply += chunk
    assert reply.endswith(b"E_BAD_PROTOCOL")  # nsqd's answer to a bad magic, then close
    await stream.aclose()
    await still_served(clients, addresses, "after-garbage")
