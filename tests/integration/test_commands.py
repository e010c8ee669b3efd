"""Every command of protocol V2 over real sockets: timings, limits and every spec error.

Expected texts come from spec tcp-protocol §4; times are checked on the virtual clock
(``autojump_clock`` with a 0.1 s threshold, so the clock never jumps while bytes are
still on their way through a real socket).
"""

from __future__ import annotations

import json
import socket
import struct
from typing import TYPE_CHECKING

import attrs
import pytest
import trio
import trio.testing

from trionsq.protocol import (
    MAGIC_V2,
    Cls,
    Dpub,
    ExtMessage,
    Fin,
    IdentifyRequest,
    InternalCreateTopic,
    Mpub,
    MpubExt,
    MpubTrace,
    Nop,
    Pub,
    PubExt,
    PubTrace,
    Rdy,
    Req,
    Sub,
    SubAdvanced,
    SubOrdered,
    Touch,
    TracedMessage,
)
from trionsq.protocol.client import (
    ErrorReply,
    MessageFrame,
    Response,
    encode_commands,
    encode_identify,
)
from trionsq.testing import ProtocolClient
from trionsq.version import NSQD_RELEASE

from .raw import (
    LOCAL,
    bodies,
    next_error,
    next_frame,
    next_message,
    ok,
    publish,
    quiet,
    start,
)

if TYPE_CHECKING:
    from trionsq.broker.channel import Channel
    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients

WINDOW = 0.1
"""How far a virtual arrival time may be from the exact one."""


def near(elapsed: float, expected: float) -> bool:
    return abs(elapsed - expected) <= WINDOW


def only_channel(addresses: BoundAddresses, topic: str, channel: str) -> Channel:
    (found,) = addresses.broker.find_channel(topic, channel)
    return found


def only_consumer(channel: Channel) -> int:
    (client_id,) = channel.consumers
    return client_id


# ---------------------------------------------------------------------- DPUB


async def test_dpub_arrives_at_its_virtual_time_and_not_before(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """Unbuffered output (``output_buffer_size`` -1), so arrival times are the broker's."""
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    consumer = await clients.subscribe(
        addresses.tcp, "d", "c", rdy=10, identify=IdentifyRequest(output_buffer_size=-1)
    )
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Dpub("d", 5000, b"later"), Dpub("d", 0, b"now"), Pub("d", b"plain"))
    t0 = trio.current_time()
    first, second = await next_message(consumer), await next_message(consumer)
    assert [first.body, second.body] == [b"now", b"plain"]  # a deferred one holds nothing up
    assert trio.current_time() - t0 < WINDOW
    channel = only_channel(addresses, "d", "c")
    assert (len(channel.deferred), channel.depth) == (1, 0)  # deferred, not queued
    later = await next_message(consumer)
    assert later.body == b"later"
    assert later.attempts == 1
    assert near(trio.current_time() - t0, 5.0)
    assert len(channel.deferred) == 0


async def test_dpub_up_to_max_req_timeout(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery, attrs.evolve(LOCAL, max_req_timeout=8.0))
    consumer = await clients.subscribe(addresses.tcp, "d", "c", rdy=1)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Dpub("d", 8000, b"edge"))  # the limit itself is in range
    t0 = trio.current_time()
    assert (await next_message(consumer)).body == b"edge"
    assert near(trio.current_time() - t0, 8.0)
    await producer.send(Dpub("d", 8001, b"late"))
    error = await next_error(producer)
    assert error.error.text == "E_INVALID DPUB timeout 8001 out of range 0-8000"
    await producer.wait_closed()


# ---------------------------------------------------------------------- TOUCH / FIN / REQ


async def test_touch_restarts_the_timeout_up_to_max_msg_timeout(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """The client's msg_timeout (IDENTIFY) counts from the TOUCH; the cap from delivery."""
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery, attrs.evolve(LOCAL, max_msg_timeout=15.0))
    consumer = await clients.subscribe(
        addresses.tcp, "t", "c", rdy=1, identify=IdentifyRequest(msg_timeout=10_000)
    )
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("t", b"work"))
    message = await next_message(consumer)
    await trio.sleep(4)
    await consumer.send(Touch(message.id))
    touched = trio.current_time()
    again = await next_message(consumer)
    assert again.attempts == 2
    assert near(trio.current_time() - touched, 10.0)  # not 6 s: the TOUCH reset it
    delivered = trio.current_time()
    await trio.sleep(8)
    await consumer.send(Touch(again.id))  # would be delivered + 18 s; capped at + 15 s
    third = await next_message(consumer)
    assert third.attempts == 3
    assert near(trio.current_time() - delivered, 15.0)
    assert only_channel(addresses, "t", "c").timeout_count == 2


async def test_fin_req_touch_of_unknown_and_foreign_ids_are_not_fatal(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    owner = await clients.subscribe(addresses.tcp, "t", "c", rdy=1)
    other = await clients.subscribe(addresses.tcp, "t", "c", rdy=1)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("t", b"one"), Pub("t", b"two"))
    mine, theirs = await next_message(owner), await next_message(other)
    foreign = theirs.id
    await owner.send(Fin(foreign), Req(foreign, 0), Touch(foreign))
    texts = [(await next_error(owner)).error.text for _ in range(3)]
    reason = "client does not own message"
    assert texts == [
        f"E_FIN_FAILED FIN {foreign.decode()} failed {reason}",
        f"E_REQ_FAILED REQ {foreign.decode()} failed {reason}",
        f"E_TOUCH_FAILED TOUCH {foreign.decode()} failed {reason}",
    ]
    await owner.send(Fin(mine.id))
    unknown = b"00000000000000ff"
    await owner.send(Fin(mine.id), Req(unknown, 0), Touch(unknown), Pub("elsewhere", b"open"))
    frames = [await next_frame(owner) for _ in range(4)]
    assert [f.error.text for f in frames[:3] if isinstance(f, ErrorReply)] == [
        f"E_FIN_FAILED FIN {mine.id.decode()} failed ID not in flight",
        "E_REQ_FAILED REQ 00000000000000ff failed ID not in flight",
        "E_TOUCH_FAILED TOUCH 00000000000000ff failed ID not in flight",
    ]
    assert ok(frames[3])
    await other.send(Fin(theirs.id), Nop(), Pub("elsewhere", b"x"))  # the owner's FIN works
    assert ok(await next_frame(other))


# ---------------------------------------------------------------------- REQ


async def test_req_delay_is_clamped_and_attempts_count_every_delivery(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery, attrs.evolve(LOCAL, max_req_timeout=5.0))
    consumer = await clients.subscribe(addresses.tcp, "r", "c", rdy=1)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("r", b"job"))
    message = await next_message(consumer)
    assert message.attempts == 1
    t0 = trio.current_time()
    await consumer.send(Req(message.id, 60_000))  # clamped to max-req-timeout, no error
    message = await next_message(consumer)
    assert message.attempts == 2
    assert near(trio.current_time() - t0, 5.0)
    # 2**64 - 1 parses (uint64) and is -1 as Go's int64: a negative delay is clamped to 0
    t1 = trio.current_time()
    await consumer.send(Req(message.id, 2**64 - 1))
    message = await next_message(consumer)
    assert message.attempts == 3
    assert trio.current_time() - t1 < WINDOW
    await consumer.send(Req(message.id, 0))
    message = await next_message(consumer)
    assert message.attempts == 4
    assert trio.current_time() - t1 < WINDOW
    await consumer.send(Fin(message.id))
    await publish(producer, Pub("r", b"next"))
    assert (await next_message(consumer)).attempts == 1  # a new message starts over
    channel = only_channel(addresses, "r", "c")
    assert channel.requeue_count == 3


# ---------------------------------------------------------------------- RDY


async def test_rdy_is_a_window_over_in_flight_and_zero_stops_delivery(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    consumer = await clients.subscribe(addresses.tcp, "w", "c", rdy=3)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("w", tuple(b"%d" % i for i in range(7))))
    held = [await next_message(consumer) for _ in range(3)]
    assert bodies(await quiet(consumer, 2)) == []  # RDY 3: three in flight, no more
    channel = only_channel(addresses, "w", "c")
    client_id = only_consumer(channel)
    assert channel.in_flight.count_for(client_id) == 3
    await consumer.send(Fin(held[0].id))  # RDY is not used up: one FIN, one more message
    assert (await next_message(consumer)).body == b"3"
    await consumer.send(Rdy(0), *(Fin(m.id) for m in held[1:]))
    assert bodies(await quiet(consumer, 5)) == []  # RDY 0: nothing, even with room
    assert channel.in_flight.count_for(client_id) == 1
    assert channel.depth == 3
    await consumer.stream.send_all(b"RDY\n")  # no count means 1 ...
    assert bodies(await quiet(consumer, 2)) == []  # ... and one is still in flight
    await consumer.send(Rdy(2))
    assert bodies(await quiet(consumer, 2)) == [b"4"]
    assert channel.in_flight.count_for(client_id) == 2


# ---------------------------------------------------------------------- IDENTIFY


async def test_identify_feature_negotiation_reply(clients: Clients, nursery: trio.Nursery) -> None:
    """Keys and order are nsqd's (spec §4.1); without a certificate TLS is not offered,
    and compression not asked for reports the default level."""
    config = attrs.evolve(LOCAL, max_rdy_count=123, msg_timeout=20.0, max_msg_timeout=100.0)
    addresses = await start(nursery, config)
    client = await clients.connect(addresses.tcp)
    request = IdentifyRequest(
        client_id="id",
        hostname="host",
        user_agent="test/1.0",
        feature_negotiation=True,
        msg_timeout=30_000,
        output_buffer_size=4096,
        output_buffer_timeout=100,
        sample_rate=50,
        tls_v1=True,
        deflate=False,
        deflate_level=3,
        snappy=False,
        heartbeat_interval=5000,
    )
    await client.stream.send_all(encode_identify(request))
    reply = await next_frame(client)
    assert isinstance(reply, Response)
    assert list(json.loads(reply.data).items()) == [
        ("max_rdy_count", 123),
        ("version", NSQD_RELEASE),
        ("max_msg_timeout", 100_000),
        ("msg_timeout", 30_000),
        ("tls_v1", False),
        ("deflate", False),
        ("deflate_level", 6),
        ("max_deflate_level", 6),
        ("snappy", False),
        ("sample_rate", 50),
        ("auth_required", False),
        ("output_buffer_size", 4096),
        ("output_buffer_timeout", 100),
        ("topology_region", ""),
        ("topology_zone", ""),
    ]
    defaults = await clients.connect(addresses.tcp)
    await defaults.stream.send_all(
        encode_identify(IdentifyRequest(feature_negotiation=True, output_buffer_size=-1))
    )
    reply = await next_frame(defaults)
    assert isinstance(reply, Response)
    settled = json.loads(reply.data)
    assert (settled["msg_timeout"], settled["sample_rate"]) == (20_000, 0)
    assert (settled["output_buffer_size"], settled["output_buffer_timeout"]) == (1, 0)


async def test_identify_is_allowed_again_until_sub(clients: Clients, nursery: trio.Nursery) -> None:
    """IDENTIFY does not change the state (spec §4.1): a second one before SUB is fine."""
    addresses = await start(nursery)
    client = await clients.connect(addresses.tcp)
    await client.stream.send_all(encode_identify(IdentifyRequest()) * 2)
    assert ok(await next_frame(client))
    assert ok(await next_frame(client))
    await client.stream.send_all(b"SUB t c\n" + encode_identify(IdentifyRequest()))
    assert ok(await next_frame(client))
    error = await next_error(client)
    assert error.error.text == "E_INVALID cannot IDENTIFY in current state"
    await client.wait_closed()


async def test_heartbeat_interval_minus_one_disables_heartbeats_and_the_read_deadline(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    client = await clients.connect(addresses.tcp)
    await client.stream.send_all(encode_identify(IdentifyRequest(heartbeat_interval=-1)))
    assert ok(await next_frame(client))
    t0 = trio.current_time()
    assert await client.drain(quiet=100) == []  # no heartbeat, and not closed either
    assert trio.current_time() - t0 >= 100
    await client.send(Pub("t", b"still here"))
    assert ok(await next_frame(client))
    control = await clients.connect(addresses.tcp)  # the same wait with heartbeats on
    await control.stream.send_all(encode_identify(IdentifyRequest(heartbeat_interval=10_000)))
    assert ok(await next_frame(control))
    t1 = trio.current_time()
    (beat,) = await control.read(1)
    assert isinstance(beat, Response)
    assert beat.is_heartbeat
    assert near(trio.current_time() - t1, 10.0)


# ---------------------------------------------------------------------- MPUB, channels


async def test_mpub_of_many_bodies_arrives_in_order(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    consumer = await clients.subscribe(addresses.tcp, "m", "c", rdy=2500)
    producer = await clients.connect(addresses.tcp)
    sent = tuple(b"%d:" % i + b"x" * (i % 50) for i in range(2000))
    await publish(producer, Mpub("m", sent))
    received = [await next_message(consumer) for _ in range(len(sent))]
    assert [m.body for m in received] == list(sent)
    ids = [int(m.id, 16) for m in received]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert {m.attempts for m in received} == {1}


async def test_channels_get_what_is_published_after_they_exist(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """nsqd fans a message out to the channels existing at that moment (semantics §3)."""
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    await addresses.broker.create_channel("f", "early")  # a channel, but nobody reading
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("f", b"1"), Mpub("f", (b"2", b"3")))
    late = await clients.subscribe(addresses.tcp, "f", "late", rdy=10)  # created now: tail
    early = await clients.subscribe(addresses.tcp, "f", "early", rdy=10)
    assert [(await next_message(early)).body for _ in range(3)] == [b"1", b"2", b"3"]
    await publish(producer, Pub("f", b"4"), Mpub("f", (b"5",)))
    assert [(await next_message(early)).body for _ in range(2)] == [b"4", b"5"]
    assert [(await next_message(late)).body for _ in range(2)] == [b"4", b"5"]
    assert bodies(await quiet(late, 2)) == []


# ---------------------------------------------------------------------- CLS


async def test_cls_stops_deliveries_but_in_flight_can_still_be_finished(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    closing = await clients.subscribe(addresses.tcp, "q", "c", rdy=5)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("q", (b"a", b"b")))
    a, b = await next_message(closing), await next_message(closing)
    await closing.send(Cls())
    reply = await next_frame(closing)
    assert isinstance(reply, Response)
    assert reply.is_close_wait
    await publish(producer, Mpub("q", (b"c", b"d")))
    await closing.send(Rdy(5))  # ignored while closing: no error, no delivery
    assert bodies(await quiet(closing, 5)) == []
    await closing.send(Touch(a.id), Fin(a.id), Req(b.id, 0), Pub("q", b"e"))
    assert ok(await next_frame(closing))  # all accepted (no error before the PUB's OK)
    assert bodies(await quiet(closing, 5)) == []  # the server keeps the connection open
    assert only_consumer(only_channel(addresses, "q", "c"))  # still subscribed
    successor = await clients.subscribe(addresses.tcp, "q", "c", rdy=10)
    got = [await next_message(successor) for _ in range(4)]
    assert sorted(m.body for m in got) == [b"b", b"c", b"d", b"e"]
    assert next(m for m in got if m.body == b"b").attempts == 2


# ---------------------------------------------------------------------- slow consumer


async def test_slow_consumer_holds_rdy_messages_and_the_rest_waits(
    clients: Clients, nursery: trio.Nursery
) -> None:
    """A consumer that never reads its socket gets RDY messages; nothing else stalls."""
    addresses = await start(nursery)
    slow = await clients.subscribe(addresses.tcp, "big", "slow", rdy=10)
    fast = await clients.subscribe(addresses.tcp, "big", "fast", rdy=1000)
    channel = only_channel(addresses, "big", "slow")
    slow_id = only_consumer(channel)
    total, batch = 5000, 500
    peak = 0
    done = trio.Event()

    async def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, channel.in_flight.count_for(slow_id))
            await trio.sleep(0.001)

    async def produce() -> None:
        producer = await clients.connect(addresses.tcp)
        for start_at in range(0, total, batch):
            parts = tuple(b"%05d" % i + b"." * 1019 for i in range(start_at, start_at + batch))
            await publish(producer, Mpub("big", parts))

    received: list[bytes] = []

    async def consume() -> None:
        while len(received) < total:
            frames = await fast.read(min(batch, total - len(received)))
            messages = [f.message for f in frames if isinstance(f, MessageFrame)]
            received.extend(m.body[:5] for m in messages)
            await fast.send(*(Fin(m.id) for m in messages))

    async with trio.open_nursery() as inner:
        inner.start_soon(watch)
        inner.start_soon(produce)
        await consume()
        done.set()
    assert received == [b"%05d" % i for i in range(total)]
    assert peak == 10  # reached, never passed
    assert channel.in_flight.count_for(slow_id) == 10
    assert channel.depth == total - 10
    other = await clients.connect(addresses.tcp)
    await publish(other, Pub("elsewhere", b"round trip"))
    held = [await next_message(slow) for _ in range(10)]  # it reads at last: its ten
    assert [m.body[:5] for m in held] == [b"%05d" % i for i in range(10)]
    assert bodies(await slow.drain(quiet=0.2)) == []


async def test_a_consumer_that_stops_reading_is_dropped_after_a_heartbeat_interval(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """nsqd's write deadline (spec §6): a write blocked for a heartbeat interval ends the
    connection, and the messages it held go to the channel's other consumers."""
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: no autotuning
    await sock.connect(addresses.tcp)
    stuck = ProtocolClient(trio.SocketStream(sock))
    clients.opened.append(stuck)
    await stuck.stream.send_all(
        MAGIC_V2 + encode_identify(IdentifyRequest(heartbeat_interval=10_000))
    )
    assert ok(await next_frame(stuck))
    await stuck.send(Sub("s", "c"), Rdy(100))
    assert ok(await next_frame(stuck))
    producer = await clients.connect(addresses.tcp)
    t0 = trio.current_time()
    for _ in range(2):  # 8 MB for a reader that takes none: more than any socket buffer
        await publish(producer, Mpub("s", (b"x" * 100_000,) * 40))
    await publish(producer, Pub("other", b"round trip"))  # the broker serves others meanwhile
    healthy = await clients.subscribe(addresses.tcp, "s", "c", rdy=100)
    first = await next_message(healthy)
    assert near(trio.current_time() - t0, 10.0)
    rest = [await next_message(healthy) for _ in range(79)]
    assert {m.attempts for m in [first, *rest]} == {2}
    assert len({m.id for m in [first, *rest]}) == 80
    assert len(only_channel(addresses, "s", "c").consumers) == 1


# ---------------------------------------------------------------------- names


async def test_names_at_the_limits_are_accepted_and_nop_has_no_answer(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    client = await clients.connect(addresses.tcp)
    longest = "t" * 54 + "#ephemeral"  # 64 bytes with the suffix
    await client.send(Nop(), Pub("a.B-c_9", b"x"), Nop(), Pub("t" * 64, b"x"), Pub(longest, b"x"))
    frames = await client.drain(quiet=0.1)
    assert len(frames) == 3  # NOP has no answer
    assert all(ok(f) for f in frames)
    await clients.subscribe(addresses.tcp, "a.B-c_9", "c" * 64)
    assert addresses.broker.find_channel("a.B-c_9", "c" * 64)


# ---------------------------------------------------------------------- every spec error

SIZE = struct.Struct(">i")
TABLE = attrs.evolve(
    LOCAL, max_msg_size=100, max_body_size=1000, max_rdy_count=50, max_req_timeout=10.0
)
"""Small limits, so that the errors about them are cheap to reach."""


def size(n: int) -> bytes:
    return SIZE.pack(n)


def sized(data: bytes) -> bytes:
    return SIZE.pack(len(data)) + data


def identify(json_body: bytes) -> bytes:
    return b"IDENTIFY\n" + sized(json_body)


@attrs.frozen
class Case:
    name: str
    send: bytes
    error: str
    fatal: bool = True
    setup: tuple[bytes, int] = (b"", 0)
    """Commands sent first, and how many response frames answer them."""
    eof: bool = False
    """Half-close after ``send``: the command is cut short."""
    magic: bytes = MAGIC_V2


SUBSCRIBED = (b"SUB t c\n", 1)
CLOSING = (b"SUB t c\nCLS\n", 2)
NO_HEARTBEAT = (encode_identify(IdentifyRequest(heartbeat_interval=-1)), 1)
ID = b"0000000000000009"


def bad_identify(key: str, value: int) -> Case:
    reason = key.replace("_", " ")
    return Case(
        f"IDENTIFY {key} {value}",
        identify(b'{"%s":%d}' % (key.encode(), value)),
        f"E_BAD_BODY IDENTIFY {reason} ({value}) is invalid",
    )


CASES = [
    # §1 connection start
    Case("bad magic", b"", "E_BAD_PROTOCOL", magic=b"  V1"),
    # §4 unknown commands (names are case-sensitive)
    Case("lowercase verb", b"pub t\n", "E_INVALID invalid command pub"),
    Case("empty line", b"\r\n", "E_INVALID invalid command "),
    # §4.1 IDENTIFY
    Case(
        "IDENTIFY after SUB",
        identify(b"{}"),
        "E_INVALID cannot IDENTIFY in current state",
        setup=SUBSCRIBED,
    ),
    Case("IDENTIFY size 0", b"IDENTIFY\n" + size(0), "E_BAD_BODY IDENTIFY invalid body size 0"),
    Case("IDENTIFY size -1", b"IDENTIFY\n" + size(-1), "E_BAD_BODY IDENTIFY invalid body size -1"),
    Case(
        "IDENTIFY too big",
        b"IDENTIFY\n" + size(1001),
        "E_BAD_BODY IDENTIFY body too big 1001 > 1000",
    ),
    Case(
        "IDENTIFY size cut",
        b"IDENTIFY\n\x00\x00",
        "E_BAD_BODY IDENTIFY failed to read body size",
        eof=True,
    ),
    Case(
        "IDENTIFY body cut",
        b"IDENTIFY\n" + size(10) + b"{}",
        "E_BAD_BODY IDENTIFY failed to read body",
        eof=True,
    ),
    Case("IDENTIFY not JSON", identify(b"{nope"), "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    Case(
        "IDENTIFY wrong type",
        identify(b'{"heartbeat_interval":"1s"}'),
        "E_BAD_BODY IDENTIFY failed to decode JSON body",
    ),
    bad_identify("heartbeat_interval", 999),
    bad_identify("heartbeat_interval", 60_001),
    bad_identify("heartbeat_interval", -2),
    bad_identify("output_buffer_size", 63),
    bad_identify("output_buffer_size", 65_537),
    bad_identify("output_buffer_size", -2),
    bad_identify("output_buffer_timeout", 9),
    bad_identify("output_buffer_timeout", 30_001),
    bad_identify("output_buffer_timeout", -2),
    bad_identify("sample_rate", 100),
    bad_identify("sample_rate", -1),
    bad_identify("msg_timeout", 999),
    bad_identify("msg_timeout", 900_001),
    bad_identify("msg_timeout", -1),
    Case(
        "IDENTIFY timeout checked before size",
        identify(b'{"output_buffer_size":1,"output_buffer_timeout":1}'),
        "E_BAD_BODY IDENTIFY output buffer timeout (1) is invalid",
    ),
    # §4.2 AUTH (no auth server configured)
    Case("AUTH disabled", b"AUTH\n" + sized(b"secret"), "E_AUTH_DISABLED AUTH disabled"),
    Case(
        "AUTH with a parameter",
        b"AUTH x\n" + sized(b"secret"),
        "E_INVALID AUTH invalid number of parameters",
    ),
    Case(
        "AUTH after SUB",
        b"AUTH\n" + sized(b"secret"),
        "E_INVALID cannot AUTH in current state",
        setup=SUBSCRIBED,
    ),
    Case("AUTH size 0", b"AUTH\n" + size(0), "E_BAD_BODY AUTH invalid body size 0"),
    Case("AUTH too big", b"AUTH\n" + size(1001), "E_BAD_BODY AUTH body too big 1001 > 1000"),
    Case("AUTH size cut", b"AUTH\n\x00", "E_BAD_BODY AUTH failed to read body size", eof=True),
    Case(
        "AUTH body cut",
        b"AUTH\n" + size(5) + b"ab",
        "E_BAD_BODY AUTH failed to read body",
        eof=True,
    ),
    # §4.3 SUB, §4.4 names
    Case("SUB twice", b"SUB t c\n", "E_INVALID cannot SUB in current state", setup=SUBSCRIBED),
    Case(
        "SUB after CLS",
        b"SUB t c\n",
        "E_INVALID cannot SUB in current state",
        setup=CLOSING,
    ),
    Case(
        "SUB without heartbeats",
        b"SUB t c\n",
        "E_INVALID cannot SUB with heartbeats disabled",
        setup=NO_HEARTBEAT,
    ),
    Case("SUB one argument", b"SUB t\n", "E_INVALID SUB insufficient number of parameters"),
    Case("SUB no argument", b"SUB\n", "E_INVALID SUB insufficient number of parameters"),
    Case("SUB bad topic", b"SUB a*b c\n", 'E_BAD_TOPIC SUB topic name "a*b" is not valid'),
    Case("SUB empty topic", b"SUB  c\n", 'E_BAD_TOPIC SUB topic name "" is not valid'),
    Case(
        "SUB topic of 65 bytes",
        b"SUB " + b"t" * 65 + b" c\n",
        f'E_BAD_TOPIC SUB topic name "{"t" * 65}" is not valid',
    ),
    Case(
        "SUB bare suffix",
        b"SUB #ephemeral c\n",
        'E_BAD_TOPIC SUB topic name "#ephemeral" is not valid',
    ),
    Case(
        "SUB topic Go-quoted",
        b"SUB t\xff\t c\n",
        'E_BAD_TOPIC SUB topic name "t\\xff\\t" is not valid',
    ),
    Case("SUB bad channel", b"SUB t c!\n", 'E_BAD_CHANNEL SUB channel name "c!" is not valid'),
    Case(
        "SUB channel of 65 bytes",
        b"SUB t " + b"c" * 65 + b"\n",
        f'E_BAD_CHANNEL SUB channel name "{"c" * 65}" is not valid',
    ),
    # §4.5 RDY
    Case("RDY before SUB", b"RDY 1\n", "E_INVALID cannot RDY in current state"),
    Case("RDY over max", b"RDY 51\n", "E_INVALID RDY count 51 out of range 0-50", setup=SUBSCRIBED),
    Case("RDY negative", b"RDY -1\n", "E_INVALID RDY could not parse count -1", setup=SUBSCRIBED),
    Case("RDY plus sign", b"RDY +1\n", "E_INVALID RDY could not parse count +1", setup=SUBSCRIBED),
    Case("RDY text", b"RDY x\n", "E_INVALID RDY could not parse count x", setup=SUBSCRIBED),
    Case(
        "RDY wraps to -1",
        b"RDY 18446744073709551615\n",
        "E_INVALID RDY count -1 out of range 0-50",
        setup=SUBSCRIBED,
    ),
    # §4.6 FIN
    Case("FIN before SUB", b"FIN " + ID + b"\n", "E_INVALID cannot FIN in current state"),
    Case("FIN no id", b"FIN\n", "E_INVALID FIN insufficient number of params", setup=SUBSCRIBED),
    Case("FIN short id", b"FIN abc\n", "E_INVALID invalid message ID", setup=SUBSCRIBED),
    Case(
        "FIN unknown id",
        b"FIN " + ID + b"\n",
        "E_FIN_FAILED FIN 0000000000000009 failed ID not in flight",
        fatal=False,
        setup=SUBSCRIBED,
    ),
    Case(
        "FIN id that is not hex",
        b"FIN zzzzzzzzzzzzzzzz\n",
        "E_FIN_FAILED FIN zzzzzzzzzzzzzzzz failed ID not in flight",
        fatal=False,
        setup=SUBSCRIBED,
    ),
    Case(
        "FIN unknown id while closing",
        b"FIN " + ID + b"\n",
        "E_FIN_FAILED FIN 0000000000000009 failed ID not in flight",
        fatal=False,
        setup=CLOSING,
    ),
    # §4.7 REQ
    Case("REQ before SUB", b"REQ " + ID + b" 0\n", "E_INVALID cannot REQ in current state"),
    Case(
        "REQ no timeout",
        b"REQ " + ID + b"\n",
        "E_INVALID REQ insufficient number of params",
        setup=SUBSCRIBED,
    ),
    Case("REQ short id", b"REQ abc 0\n", "E_INVALID invalid message ID", setup=SUBSCRIBED),
    Case(
        "REQ timeout text",
        b"REQ " + ID + b" x\n",
        "E_INVALID REQ could not parse timeout x",
        setup=SUBSCRIBED,
    ),
    Case(
        "REQ timeout negative",
        b"REQ " + ID + b" -1\n",
        "E_INVALID REQ could not parse timeout -1",
        setup=SUBSCRIBED,
    ),
    Case(
        "REQ unknown id",
        b"REQ " + ID + b" 0\n",
        "E_REQ_FAILED REQ 0000000000000009 failed ID not in flight",
        fatal=False,
        setup=SUBSCRIBED,
    ),
    # §4.8 TOUCH
    Case("TOUCH before SUB", b"TOUCH " + ID + b"\n", "E_INVALID cannot TOUCH in current state"),
    Case(
        "TOUCH no id", b"TOUCH\n", "E_INVALID TOUCH insufficient number of params", setup=SUBSCRIBED
    ),
    Case("TOUCH short id", b"TOUCH abc\n", "E_INVALID invalid message ID", setup=SUBSCRIBED),
    Case(
        "TOUCH unknown id",
        b"TOUCH " + ID + b"\n",
        "E_TOUCH_FAILED TOUCH 0000000000000009 failed ID not in flight",
        fatal=False,
        setup=SUBSCRIBED,
    ),
    # §4.9 CLS
    Case("CLS before SUB", b"CLS\n", "E_INVALID cannot CLS in current state"),
    Case("CLS twice", b"CLS\n", "E_INVALID cannot CLS in current state", setup=CLOSING),
    # §4.11 PUB
    Case("PUB no topic", b"PUB\n", "E_INVALID PUB insufficient number of parameters"),
    Case(
        "PUB bad topic",
        b"PUB a*b\n" + sized(b"x"),
        'E_BAD_TOPIC PUB topic name "a*b" is not valid',
    ),
    Case("PUB size 0", b"PUB t\n" + size(0), "E_BAD_MESSAGE PUB invalid message body size 0"),
    Case("PUB size -5", b"PUB t\n" + size(-5), "E_BAD_MESSAGE PUB invalid message body size -5"),
    Case("PUB too big", b"PUB t\n" + size(101), "E_BAD_MESSAGE PUB message too big 101 > 100"),
    Case(
        "PUB size cut",
        b"PUB t\n\x00\x00",
        "E_BAD_MESSAGE PUB failed to read message body size",
        eof=True,
    ),
    Case(
        "PUB body cut",
        b"PUB t\n" + size(5) + b"ab",
        "E_BAD_MESSAGE PUB failed to read message body",
        eof=True,
    ),
    # §4.12 MPUB
    Case("MPUB no topic", b"MPUB\n", "E_INVALID MPUB insufficient number of parameters"),
    Case(
        "MPUB bad topic",
        b"MPUB a*b\n" + sized(size(1) + sized(b"x")),
        'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "a*b" is not valid',
    ),
    Case(
        "MPUB size cut",
        b"MPUB t\n\x00",
        "E_BAD_BODY MPUB failed to read body size",
        eof=True,
    ),
    Case("MPUB size 0", b"MPUB t\n" + size(0), "E_BAD_BODY MPUB invalid body size 0"),
    Case("MPUB too big", b"MPUB t\n" + size(1001), "E_BAD_BODY MPUB body too big 1001 > 1000"),
    Case(
        "MPUB count cut",
        b"MPUB t\n" + size(20) + b"\x00",
        "E_BAD_BODY MPUB failed to read message count",
        eof=True,
    ),
    Case(
        "MPUB count 0",
        b"MPUB t\n" + size(20) + size(0),
        "E_BAD_BODY MPUB invalid message count 0",
    ),
    Case(
        "MPUB count -1",
        b"MPUB t\n" + size(20) + size(-1),
        "E_BAD_BODY MPUB invalid message count -1",
    ),
    Case(
        "MPUB count over (max-body-size - 4) / 5",
        b"MPUB t\n" + size(1000) + size(200),
        "E_BAD_BODY MPUB invalid message count 200",
    ),
    Case(
        "MPUB part size cut",
        b"MPUB t\n" + size(50) + size(2) + sized(b"abc") + b"\x00",
        "E_BAD_MESSAGE MPUB failed to read message(1) body size",
        eof=True,
    ),
    Case(
        "MPUB part size 0",
        b"MPUB t\n" + size(50) + size(2) + sized(b"abc") + size(0),
        "E_BAD_MESSAGE MPUB invalid message(1) body size 0",
    ),
    Case(
        "MPUB part too big",
        b"MPUB t\n" + size(200) + size(2) + size(101),
        "E_BAD_MESSAGE MPUB message too big 101 > 100",
    ),
    Case(
        "MPUB part cut",
        b"MPUB t\n" + size(50) + size(1) + size(10) + b"abc",
        "E_BAD_MESSAGE MPUB failed to read message body",
        eof=True,
    ),
    # §4.13 DPUB
    Case("DPUB no timeout", b"DPUB t\n", "E_INVALID DPUB insufficient number of parameters"),
    Case(
        "DPUB bad topic",
        b"DPUB a*b 10\n" + sized(b"x"),
        'E_BAD_TOPIC DPUB topic name "a*b" is not valid',
    ),
    Case("DPUB timeout text", b"DPUB t x\n", "E_INVALID DPUB could not parse timeout x"),
    Case("DPUB timeout negative", b"DPUB t -1\n", "E_INVALID DPUB could not parse timeout -1"),
    Case(
        "DPUB timeout over max",
        b"DPUB t 10001\n" + sized(b"x"),
        "E_INVALID DPUB timeout 10001 out of range 0-10000",
    ),
    Case(
        "DPUB timeout wraps negative",
        b"DPUB t 18446744073709551615\n" + sized(b"x"),
        "E_INVALID DPUB timeout 18446744073709551615 out of range 0-10000",
    ),
    Case(
        "DPUB size 0",
        b"DPUB t 10\n" + size(0),
        "E_BAD_MESSAGE DPUB invalid message body size 0",
    ),
    Case(
        "DPUB too big",
        b"DPUB t 10\n" + size(101),
        "E_BAD_MESSAGE DPUB message too big 101 > 100",
    ),
    Case(
        "DPUB size cut",
        b"DPUB t 10\n\x00",
        "E_BAD_MESSAGE DPUB failed to read message body size",
        eof=True,
    ),
    Case(
        "DPUB body cut",
        b"DPUB t 10\n" + size(4) + b"ab",
        "E_BAD_MESSAGE DPUB failed to read message body",
        eof=True,
    ),
    Case(
        "SUB_ADVANCED missing topic",
        encode_commands([SubAdvanced("t", "c")]),
        "E_TOPIC_NOT_EXIST ",
    ),
    # §8.2-§8.6 partitions, traced publishes and ordered SUB never create a topic
    Case(
        "SUB_ORDERED missing topic",
        encode_commands([SubOrdered("t", "c", 0)]),
        "E_TOPIC_NOT_EXIST ",
    ),
    Case("SUB partition missing topic", b"SUB t c 0\n", "E_TOPIC_NOT_EXIST "),
    Case("PUB partition missing topic", b"PUB t 0\n" + size(1) + b"x", "E_TOPIC_NOT_EXIST "),
    Case(
        "PUB_TRACE missing topic", encode_commands([PubTrace("t", 7, b"x")]), "E_TOPIC_NOT_EXIST "
    ),
    Case(
        "MPUB_TRACE missing topic",
        encode_commands([MpubTrace("t", (TracedMessage(7, b"x"),))]),
        "E_TOPIC_NOT_EXIST ",
    ),
    # §8.2-§8.3 ext publishes and standalone topic creation
    Case(
        "PUB_EXT missing topic",
        encode_commands([PubExt("t", ExtMessage(b"{}", b"x"))]),
        "E_TOPIC_NOT_EXIST ",
    ),
    Case(
        "MPUB_EXT missing topic",
        encode_commands([MpubExt("t", (ExtMessage(b"{}", b"x"),))]),
        "E_TOPIC_NOT_EXIST ",
    ),
    Case(
        "PUB_EXT plain topic",
        encode_commands([PubExt("t", ExtMessage(b"{}", b"x"))]),
        "E_EXT_NOT_SUPPORT ext content not supported in topic t",
        fatal=False,
        setup=(encode_commands([Pub("t", b"first")]), 1),
    ),
    Case(
        "INTERNAL_CREATE_TOPIC partition out of range",
        encode_commands([InternalCreateTopic("t", 255)]),
        "E_CREATE_TOPIC_FAILED partition 255 out of range 0-254",
        fatal=False,
    ),
]


@pytest.mark.parametrize("case", [pytest.param(case, id=case.name) for case in CASES])
async def test_spec_error(case: Case, clients: Clients, nursery: trio.Nursery) -> None:
    """The exact text; fatal ones close the connection, the others leave it answering."""
    addresses = await start(nursery, TABLE)
    client = ProtocolClient(await trio.open_tcp_stream(*addresses.tcp))
    clients.opened.append(client)
    setup, replies = case.setup
    await client.stream.send_all(case.magic + setup)
    for _ in range(replies):
        assert isinstance(await next_frame(client), Response)
    await client.stream.send_all(case.send)
    if case.eof:
        await client.stream.send_eof()
    error = await next_error(client)
    assert error.error.text == case.error
    if case.fatal:
        await client.wait_closed()
        assert client.frames == []  # nothing follows a fatal error
    else:
        await client.send(Nop(), Pub("t", b"after"))
        assert ok(await next_frame(client))
    other = await clients.connect(addresses.tcp)
    await publish(other, Pub("t", b"another client"))


async def test_magic_cut_short_closes_without_a_frame(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    client = ProtocolClient(await trio.open_tcp_stream(*addresses.tcp))
    clients.opened.append(client)
    await client.stream.send_all(b" V")
    await client.stream.send_eof()
    await client.wait_closed()
    assert client.frames == []
