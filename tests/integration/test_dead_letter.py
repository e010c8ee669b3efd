"""Dead letters over real sockets (issue 20): a channel's ``max_attempts``, set over
HTTP (``/channel/dead_letter``) or asked for in IDENTIFY, sends a message delivered
that many times and put back again (REQ, timeout) to ``<topic>.dead`` with its
headers, origin and delivery count; it leaves the channel. docs/extensions.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
import trio
import trio.testing

from trionsq import NsqdConfig
from trionsq.protocol import ExtMessage, Fin, IdentifyRequest, Pub, PubExt, Rdy, Req, Sub
from trionsq.protocol.client import Response, encode_identify

from .raw import (
    http,
    next_error,
    next_frame,
    next_message,
    ok,
    publish,
    quiet,
    start,
    stats_channel,
)

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.nursery_tree import BoundAddresses
    from trionsq.protocol.message import Message
    from trionsq.testing import ProtocolClient

    from .raw import Clients


async def started(
    clients: Clients, nursery: trio.Nursery, clock: trio.testing.MockClock, *pubs: Pub
) -> tuple[BoundAddresses, ProtocolClient]:
    """A broker on the mock clock (jumping only while no bytes are in flight on the
    real sockets), and a producer that published ``pubs``."""
    clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    if pubs:
        await publish(producer, *pubs)
    return addresses, producer


async def consumer(
    clients: Clients,
    addresses: BoundAddresses,
    topic: str,
    *,
    identify: IdentifyRequest | None = None,
    rdy: int = 10,
) -> ProtocolClient:
    client = await clients.connect(addresses.tcp)
    if identify is not None:
        await client.stream.send_all(encode_identify(identify))
        assert ok(await next_frame(client))
    await client.send(Sub(topic, "c"), Rdy(rdy))
    assert ok(await next_frame(client))
    return client


async def dead_letters(clients: Clients, addresses: BoundAddresses, topic: str) -> list[Message]:
    """What the dead-letter topic holds, read by an extend_support consumer."""
    reader = await consumer(
        clients, addresses, topic, identify=IdentifyRequest(extend_support=True), rdy=0
    )
    reader.decoder.extended = True
    await reader.send(Rdy(10))
    return [await next_message(reader)]


async def test_a_message_requeued_past_the_bound_goes_to_the_dead_letter_topic(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses, producer = await started(clients, nursery, autojump_clock, Pub("orders", b"bad"))
    answer = await http(
        addresses, "POST", "/channel/dead_letter?topic=orders&channel=c&max_attempts=3"
    )
    assert (answer.status_code, answer.text) == (200, "")
    client = await consumer(clients, addresses, "orders", rdy=1)
    attempts = []
    for _ in range(3):
        message = await next_message(client)
        assert message.body == b"bad"
        attempts.append(message.attempts)
        await client.send(Req(message.id, 0))
    assert attempts == [1, 2, 3]
    assert await quiet(client, 0.5) == []  # the third REQ sent it away
    await publish(producer, Pub("orders", b"good"))
    following = await next_message(client)
    assert (following.body, following.attempts) == (b"good", 1)  # bad left the channel
    await client.send(Fin(following.id))
    assert await quiet(client, 0.5) == []
    channel = await stats_channel(addresses, "orders")
    assert (channel["depth"], channel["in_flight_count"]) == (0, 0)
    assert (channel["max_attempts"], channel["dead_letter_count"]) == (3, 1)
    (dead,) = await dead_letters(clients, addresses, "orders.dead")
    assert dead.body == b"bad"
    assert orjson.loads(dead.ext or b"{}") == {
        "##dead_from_topic": "orders",
        "##dead_from_channel": "c",
        "##dead_from_partition": "0",
        "##dead_attempts": "3",
        "##dead_reason": "max_attempts",
    }


async def test_timeouts_count_and_an_ext_message_keeps_its_headers(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses, producer = await started(clients, nursery, autojump_clock)
    addresses.broker.topic("events", ext=True)
    await producer.stream.send_all(encode_identify(IdentifyRequest(extend_support=True)))
    assert ok(await next_frame(producer))
    await publish(producer, PubExt("events", ExtMessage(b'{"region":"eu"}', b"slow")))
    await http(
        addresses,
        "POST",
        "/channel/dead_letter?topic=events&channel=c&max_attempts=2&dead_topic=parked",
    )
    identify = IdentifyRequest(extend_support=True, msg_timeout=1000)
    client = await consumer(clients, addresses, "events", identify=identify, rdy=0)
    client.decoder.extended = True
    await client.send(Rdy(10))
    first = await next_message(client)
    second = await next_message(client)  # after the first timed out, 1 s later
    assert [first.attempts, second.attempts] == [1, 2]
    assert await quiet(client, 2.0) == []  # the second timeout sent it away
    (dead,) = await dead_letters(clients, addresses, "parked")
    assert dead.body == b"slow"
    headers = orjson.loads(dead.ext or b"{}")
    assert headers["region"] == "eu"
    assert (headers["##dead_attempts"], headers["##dead_from_topic"]) == ("2", "events")


async def test_a_consumer_asks_for_a_bound_in_identify(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses, _ = await started(clients, nursery, autojump_clock, Pub("jobs", b"x"))
    client = await clients.connect(addresses.tcp)
    asked = IdentifyRequest(feature_negotiation=True, max_attempts=1)
    await client.stream.send_all(encode_identify(asked))
    frame = await next_frame(client)
    assert isinstance(frame, Response)
    assert orjson.loads(frame.data)["max_attempts"] == 1
    await client.send(Sub("jobs", "c"), Rdy(5))
    assert ok(await next_frame(client))
    message = await next_message(client)
    await client.send(Req(message.id, 0))
    assert await quiet(client, 0.5) == []
    assert (await stats_channel(addresses, "jobs"))["dead_letter_count"] == 1
    (dead,) = await dead_letters(clients, addresses, "jobs.dead")
    assert dead.body == b"x"


async def test_without_a_bound_nothing_changes(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses, _ = await started(clients, nursery, autojump_clock, Pub("t", b"again"))
    client = await consumer(clients, addresses, "t", rdy=1)
    for attempt in range(1, 6):
        message = await next_message(client)
        assert message.attempts == attempt
        await client.send(Req(message.id, 0))
    channel = await stats_channel(addresses, "t")
    assert "max_attempts" not in channel  # nsqd's document, unchanged
    assert "dead_letter_count" not in channel
    assert "t.dead" not in addresses.broker.topics


async def test_bad_settings_are_refused_with_a_reason(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t")
    cases = [
        ("topic=t&channel=c", "MISSING_ARG_MAX_ATTEMPTS"),
        ("topic=t&channel=c&max_attempts=-1", "INVALID_ARG_MAX_ATTEMPTS"),
        ("topic=t&channel=c&max_attempts=65536", "INVALID_ARG_MAX_ATTEMPTS"),
        ("topic=t&channel=c&max_attempts=x", "INVALID_ARG_MAX_ATTEMPTS"),
        ("topic=t&channel=c&max_attempts=3&dead_topic=t", "INVALID_ARG_DEAD_TOPIC"),
        ("topic=t&channel=c&max_attempts=3&dead_topic=a%20b", "INVALID_ARG_DEAD_TOPIC"),
        ("topic=t&channel=c&max_attempts=3&dead_topic=d%23ephemeral", "INVALID_ARG_DEAD_TOPIC"),
        ("topic=missing&channel=c&max_attempts=3", "TOPIC_NOT_FOUND"),
    ]
    for query, reason in cases:
        answer = await http(addresses, "POST", f"/channel/dead_letter?{query}")
        assert answer.status_code in (400, 404), query
        assert answer.json() == {"message": reason}, query
    long_topic = "t" * 60  # "<topic>.dead" would pass the 64 bytes of a name
    addresses.broker.topic(long_topic)
    answer = await http(
        addresses, "POST", f"/channel/dead_letter?topic={long_topic}&channel=c&max_attempts=3"
    )
    assert answer.json() == {"message": "INVALID_ARG_DEAD_TOPIC"}
    client = await clients.connect(addresses.tcp)
    await client.stream.send_all(encode_identify(IdentifyRequest(max_attempts=65536)))
    error = await next_error(client)
    assert error.error.text == "E_BAD_BODY IDENTIFY max attempts (65536) is invalid"


async def test_the_bound_survives_a_restart(
    clients: Clients, nursery: trio.Nursery, tmp_path: Path
) -> None:
    config = NsqdConfig.loopback(data_path=str(tmp_path))
    async with trio.open_nursery() as first:
        addresses: BoundAddresses = await first.start(_serve, config)
        addresses.broker.topic("t")
        answer = await http(
            addresses,
            "POST",
            "/channel/dead_letter?topic=t&channel=c&max_attempts=4&dead_topic=graveyard",
        )
        assert answer.status_code == 200
        first.cancel_scope.cancel()
    again: BoundAddresses = await nursery.start(_serve, config)
    (channel,) = again.broker.find_channel("t", "c")
    assert (channel.max_attempts, channel.dead_topic()) == (4, "graveyard")
    assert (await stats_channel(again, "t"))["max_attempts"] == 4


async def _serve(config: NsqdConfig, *, task_status: trio.TaskStatus[BoundAddresses]) -> None:
    from trionsq import serve_nsqd

    await serve_nsqd(config, task_status=task_status)
