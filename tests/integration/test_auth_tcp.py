"""AUTH on the TCP protocol against a real auth server (spec tcp-protocol §4.2).

The auth server (tests/auth_server.py) answers per secret; the broker runs with
``--auth-http-address`` pointing at it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
import trio
import trio.testing

from trionsq import NsqdConfig
from trionsq.protocol import Auth, IdentifyRequest, Mpub, Pub, Rdy, Sub
from trionsq.protocol.client import Response, encode_identify

from ..auth_server import Reply, grant, start_auth_server
from .raw import next_error, next_frame, next_message, ok, publish, start

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses
    from trionsq.testing import ProtocolClient

    from ..auth_server import AuthServer
    from .raw import Clients

ORDERS = grant(
    [
        {"topic": "^orders$", "channels": [".*"], "permissions": ["publish"]},
        {"topic": "^orders$", "channels": ["^billing$"], "permissions": ["subscribe"]},
    ],
    ttl=60,
    identity="alice",
    identity_url="https://id.example/alice",
)


async def broker_with_auth(
    nursery: trio.Nursery, replies: dict[str, Reply]
) -> tuple[BoundAddresses, AuthServer]:
    server = await start_auth_server(nursery, replies)
    config = NsqdConfig.loopback(auth_http_addresses=(server.address,))
    return await start(nursery, config), server


async def authed(clients: Clients, addresses: BoundAddresses, secret: bytes) -> ProtocolClient:
    client = await clients.connect(addresses.tcp)
    await client.send(Auth(secret))
    frame = await next_frame(client)
    assert isinstance(frame, Response), frame
    return client


async def test_identify_says_auth_required(clients: Clients, nursery: trio.Nursery) -> None:
    addresses, _ = await broker_with_auth(nursery, {})
    client = await clients.connect(addresses.tcp)
    await client.stream.send_all(encode_identify(IdentifyRequest(feature_negotiation=True)))
    frame = await next_frame(client)
    assert isinstance(frame, Response)
    assert orjson.loads(frame.data)["auth_required"] is True


async def test_auth_answers_identity_and_permission_count(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses, server = await broker_with_auth(nursery, {"alice-secret": ORDERS})
    client = await clients.connect(addresses.tcp)
    await client.send(Auth(b"alice-secret"))
    frame = await next_frame(client)
    assert isinstance(frame, Response)
    assert frame.data == (
        b'{"identity":"alice","identity_url":"https://id.example/alice","permission_count":2}'
    )
    host, port = client.stream.socket.getsockname()[:2]
    assert server.requests[0].params == {
        "common_name": "",
        "remote_ip": host,
        "secret": "alice-secret",
        "tls": "false",
    }
    assert port
    (stats,) = [c.statistics() for c in addresses.broker.clients.values()]
    assert (stats.authed, stats.auth_identity, stats.auth_identity_url) == (
        True,
        "alice",
        "https://id.example/alice",
    )


async def test_publish_before_auth_is_e_auth_first(clients: Clients, nursery: trio.Nursery) -> None:
    addresses, _ = await broker_with_auth(nursery, {})
    client = await clients.connect(addresses.tcp)
    await client.send(Pub("orders", b"x"))
    error = await next_error(client)
    assert (error.error.text, error.fatal) == ("E_AUTH_FIRST AUTH required before PUB", True)


async def test_publish_and_subscribe_within_the_grants(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses, _ = await broker_with_auth(nursery, {"alice-secret": ORDERS})
    producer = await authed(clients, addresses, b"alice-secret")
    await publish(producer, Pub("orders", b"one"), Mpub("orders", (b"two",)))
    consumer = await authed(clients, addresses, b"alice-secret")
    await consumer.send(Sub("orders", "billing"))
    assert ok(await next_frame(consumer))
    await consumer.send(Rdy(5))
    assert [(await next_message(consumer)).body for _ in range(2)] == [b"one", b"two"]


async def test_outside_the_grants_is_fatal_e_unauthorized(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses, _ = await broker_with_auth(nursery, {"alice-secret": ORDERS})
    for command, text in (
        (Pub("audit", b"x"), 'E_UNAUTHORIZED AUTH failed for PUB on "audit" ""'),
        (Mpub("audit", (b"x",)), 'E_UNAUTHORIZED AUTH failed for MPUB on "audit" ""'),
        (Sub("orders", "other"), 'E_UNAUTHORIZED AUTH failed for SUB on "orders" "other"'),
    ):
        client = await authed(clients, addresses, b"alice-secret")
        await client.send(command, Pub("orders", b"after the refusal"))
        error = await next_error(client)
        assert (error.error.text, error.fatal) == (text, True)
        await client.wait_closed()
    assert "audit" not in addresses.broker.topics  # refused before it was created
    assert "orders" not in addresses.broker.topics  # nothing after a fatal answer ran


async def test_auth_refused_or_unreachable_is_e_auth_failed(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses, _ = await broker_with_auth(nursery, {"down": Reply(status=500)})
    for secret in (b"down", b"unknown"):
        client = await clients.connect(addresses.tcp)
        await client.send(Auth(secret))
        error = await next_error(client)
        assert (error.error.text, error.fatal) == ("E_AUTH_FAILED AUTH failed", True)


async def test_auth_without_grants_is_e_unauthorized(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses, _ = await broker_with_auth(nursery, {"nobody": grant([])})
    client = await clients.connect(addresses.tcp)
    await client.send(Auth(b"nobody"))
    error = await next_error(client)
    assert error.error.text == "E_UNAUTHORIZED AUTH no authorizations found"


async def test_auth_twice_is_e_invalid_and_without_auth_servers_e_auth_disabled(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses, _ = await broker_with_auth(nursery, {"alice-secret": ORDERS})
    client = await authed(clients, addresses, b"alice-secret")
    await client.send(Auth(b"alice-secret"))
    assert (await next_error(client)).error.text == "E_INVALID AUTH already set"
    plain = await start(nursery)
    other = await clients.connect(plain.tcp)
    await other.send(Auth(b"x"))
    assert (await next_error(other)).error.text == "E_AUTH_DISABLED AUTH disabled"


async def test_expired_grants_are_fetched_again_and_a_failed_refresh_is_fatal(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    short = grant([{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}], ttl=20)
    addresses, server = await broker_with_auth(nursery, {"alice-secret": short})
    producer = await authed(clients, addresses, b"alice-secret")
    await publish(producer, Pub("orders", b"1"), Pub("orders", b"2"))
    assert len(server.requests) == 1  # checks use the grants in hand
    await trio.sleep(21)  # within the 60 s read deadline
    await publish(producer, Pub("orders", b"3"))
    assert len(server.requests) == 2  # the 20 s ttl passed: fetched again
    server.replies["alice-secret"] = Reply(status=500)
    await trio.sleep(21)  # within the 60 s read deadline
    await producer.send(Pub("orders", b"4"))
    error = await next_error(producer)
    assert (error.error.text, error.fatal) == ("E_AUTH_FAILED AUTH failed", True)
    assert addresses.broker.topics["orders"].statistics().message_count == 3
