"""Message TTL over real sockets (issue 20): a topic's TTL (``/topic/ttl``) or a
message's ``##ttl`` header makes a message that waited longer than it since it was
published leave each channel unseen, counted in /stats. docs/extensions.md.

TTL counts from the publish time, a wall-clock timestamp in the record (it has to
survive restarts), and trio's MockClock moves trio's clock, not the wall clock; so
these tests wait real time, a fifth of a second at most, for TTLs of 100 ms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol import ExtMessage, IdentifyRequest, Pub, PubExt, Rdy, Sub
from trionsq.protocol.client import encode_identify

from .raw import bodies, http, next_frame, next_message, ok, publish, quiet, start

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.nursery_tree import BoundAddresses
    from trionsq.testing import ProtocolClient

    from .raw import Clients


async def subscribe(
    clients: Clients, addresses: BoundAddresses, topic: str, *, ext: bool = False
) -> ProtocolClient:
    client = await clients.connect(addresses.tcp)
    if ext:
        await client.stream.send_all(encode_identify(IdentifyRequest(extend_support=True)))
        assert ok(await next_frame(client))
        client.decoder.extended = True
    await client.send(Sub(topic, "c"), Rdy(10))
    assert ok(await next_frame(client))
    return client


async def test_a_topic_ttl_skips_what_waited_too_long(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t")
    assert (await http(addresses, "POST", "/topic/ttl?topic=t&ttl=100ms")).status_code == 200
    await http(addresses, "POST", "/channel/create?topic=t&channel=c")
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("t", b"old-1"), Pub("t", b"old-2"))
    await trio.sleep(0.15)  # real time: past the TTL
    await publish(producer, Pub("t", b"fresh"))
    client = await subscribe(clients, addresses, "t")
    message = await next_message(client)
    assert message.body == b"fresh"
    assert bodies(await quiet(client, 0.1)) == []  # the two old ones never come
    stats = (await http(addresses, "GET", "/stats?format=json&topic=t")).json()
    channel = stats["topics"][0]["channels"][0]
    assert (channel["ttl"], channel["expired_count"], channel["depth"]) == ("100ms", 2, 0)


async def test_a_message_header_ttl_and_the_shorter_of_the_two(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("e", ext=True)
    await http(addresses, "POST", "/channel/create?topic=e&channel=c")
    producer = await clients.connect(addresses.tcp)
    await producer.stream.send_all(encode_identify(IdentifyRequest(extend_support=True)))
    assert ok(await next_frame(producer))
    await publish(
        producer,
        PubExt("e", ExtMessage(b'{"##ttl":"0.1"}', b"short")),
        PubExt("e", ExtMessage(b'{"##ttl":"600"}', b"long")),
        PubExt("e", ExtMessage(b"{}", b"none")),
    )
    await trio.sleep(0.15)
    client = await subscribe(clients, addresses, "e", ext=True)
    got = [(await next_message(client)).body for _ in range(2)]
    assert got == [b"long", b"none"]
    assert bodies(await quiet(client, 0.1)) == []
    (channel,) = addresses.broker.find_channel("e", "c")
    assert channel.expired_count == 1
    bad = await http(
        addresses, "POST", "/pub_ext?topic=e&ext=%7B%22%23%23ttl%22%3A%22-1%22%7D", b"x"
    )
    assert (bad.status_code, bad.json()) == (400, {"message": "E_INVALID_JSON_HEADER"})
    await producer.send(PubExt("e", ExtMessage(b'{"##ttl":"forever"}', b"x")))
    refused = await next_frame(producer)
    assert "##ttl must be a string of a positive number of seconds" in str(refused)


async def test_without_a_ttl_nothing_changes(clients: Clients, nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("p", b"kept"))
    await trio.sleep(0.15)
    client = await subscribe(clients, addresses, "p")
    assert (await next_message(client)).body == b"kept"
    channel = (await http(addresses, "GET", "/stats?format=json&topic=p")).json()["topics"][0][
        "channels"
    ][0]
    assert "ttl" not in channel  # nsqd's document, unchanged
    assert "expired_count" not in channel


async def test_bad_ttls_are_refused_and_the_ttl_survives_a_restart(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    config = NsqdConfig.loopback(data_path=str(tmp_path))
    async with trio.open_nursery() as first:
        addresses: BoundAddresses = await first.start(serve_nsqd, config)
        addresses.broker.topic("t")
        for query, reason in [
            ("topic=t", "MISSING_ARG_TTL"),
            ("topic=t&ttl=soon", "INVALID_ARG_TTL"),
            ("topic=t&ttl=-1s", "INVALID_ARG_TTL"),
            ("topic=t&ttl=100000h", "INVALID_ARG_TTL"),
            ("topic=missing&ttl=1s", "TOPIC_NOT_FOUND"),
        ]:
            answer = await http(addresses, "POST", f"/topic/ttl?{query}")
            assert answer.status_code in (400, 404), query
            assert answer.json() == {"message": reason}, query
        assert (await http(addresses, "POST", "/topic/ttl?topic=t&ttl=2h")).status_code == 200
        first.cancel_scope.cancel()
    again: BoundAddresses = await nursery.start(serve_nsqd, config)
    assert again.broker.topics["t"].ttl.ttl_ns == 2 * 3600 * 10**9
