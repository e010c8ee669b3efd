"""AUTH sessions (refresh at expiry) and publishing over HTTP with --auth-http-address.

nsqd checks only TCP clients; trionsq asks HTTP publishers for the secret too
(``Authorization: Bearer``), with the same auth server and the same grants.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import orjson
import trio
import trio.testing

from trionsq import NsqdConfig
from trionsq.auth.session import AuthSession, remote_ip_of
from trionsq.protocol.errors import ProtocolError

from ..auth_server import Reply, grant, start_auth_server
from .raw import start

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses

PUBLISH_ORDERS = grant(
    [{"topic": "^orders$", "channels": [".*"], "permissions": ["publish"]}], ttl=60
)


async def post(addresses: BoundAddresses, path: str, body: bytes, **headers: str) -> httpx.Response:
    assert addresses.http is not None
    host, port = addresses.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        return await http.post(path, content=body, headers=headers)


def test_remote_ip_drops_the_port_and_brackets() -> None:
    assert remote_ip_of("10.1.2.3:4150") == "10.1.2.3"
    assert remote_ip_of("[::1]:4150") == "::1"
    assert remote_ip_of("nsqd.sock") == ""  # a unix socket: nsqd sends no address


async def test_session_refetches_grants_once_their_ttl_has_passed(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    server = await start_auth_server(nursery, {"s": PUBLISH_ORDERS})
    config = NsqdConfig.loopback(auth_http_addresses=(server.address,))
    session = AuthSession(config, remote_address="127.0.0.1:5000")
    answer = await session.authenticate(b"s")
    assert orjson.loads(answer) == {  # type: ignore[arg-type]
        "identity": "test-identity",
        "identity_url": "http://example.invalid/id",
        "permission_count": 1,
    }
    assert await session.check("PUB", "orders") is None
    assert await session.check("PUB", "orders") is None  # cached: no second request
    assert len(server.requests) == 1
    await trio.sleep(61)
    assert await session.check("PUB", "orders") is None
    assert len(server.requests) == 2  # fetched again after the ttl
    assert server.requests[1].params == {
        "common_name": "",
        "remote_ip": "127.0.0.1",
        "secret": "s",
        "tls": "false",
    }
    denied = await session.check("SUB", "orders", "c")
    assert isinstance(denied, ProtocolError)
    assert denied.text == 'E_UNAUTHORIZED AUTH failed for SUB on "orders" "c"'


async def test_session_refresh_failure_is_e_auth_failed(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    server = await start_auth_server(nursery, {"s": PUBLISH_ORDERS})
    config = NsqdConfig.loopback(auth_http_addresses=(server.address,))
    session = AuthSession(config, remote_address="127.0.0.1:5000")
    assert not isinstance(await session.authenticate(b"s"), ProtocolError)
    server.replies["s"] = Reply(status=500)
    await trio.sleep(61)
    failed = await session.check("PUB", "orders")
    assert isinstance(failed, ProtocolError)
    assert failed.text == "E_AUTH_FAILED AUTH failed"


async def test_session_without_grants_is_e_unauthorized_and_without_auth_e_auth_first(
    nursery: trio.Nursery,
) -> None:
    server = await start_auth_server(nursery, {"none": grant([])})
    config = NsqdConfig.loopback(auth_http_addresses=(server.address,))
    session = AuthSession(config, remote_address="127.0.0.1:5000")
    first = await session.check("PUB", "orders")
    assert isinstance(first, ProtocolError)
    assert first.text == "E_AUTH_FIRST AUTH required before PUB"
    empty = await session.authenticate(b"none")
    assert isinstance(empty, ProtocolError)
    assert empty.text == "E_UNAUTHORIZED AUTH no authorizations found"
    unknown = await AuthSession(config, remote_address="127.0.0.1:1").authenticate(b"x")
    assert isinstance(unknown, ProtocolError)
    assert unknown.text == "E_AUTH_FAILED AUTH failed"


async def test_http_publish_needs_a_secret_with_publish_rights(nursery: trio.Nursery) -> None:
    server = await start_auth_server(nursery, {"s": PUBLISH_ORDERS})
    addresses = await start(nursery, NsqdConfig.loopback(auth_http_addresses=(server.address,)))
    missing = await post(addresses, "/pub?topic=orders", b"x")
    assert missing.status_code == 401
    assert missing.json() == {"message": "E_AUTH_FIRST AUTH required before PUB"}
    wrong = await post(addresses, "/pub?topic=orders", b"x", authorization="Bearer nope")
    assert (wrong.status_code, wrong.json()) == (401, {"message": "E_AUTH_FAILED AUTH failed"})
    other = await post(addresses, "/mpub?topic=audit", b"x\ny", authorization="Bearer s")
    assert other.status_code == 403
    assert other.json() == {"message": 'E_UNAUTHORIZED AUTH failed for MPUB on "audit" ""'}
    ok = await post(addresses, "/pub?topic=orders", b"x", authorization="Bearer s")
    assert (ok.status_code, ok.content) == (200, b"OK")
    by_query = await post(addresses, "/pub?topic=orders&auth_secret=s", b"y")
    assert by_query.status_code == 200
    assert addresses.broker.topics["orders"].statistics().message_count == 2
    assert "audit" not in addresses.broker.topics  # refused before it is created
    assert server.secrets_seen() == ["nope", "s"]  # the grants are kept per secret


async def test_http_publish_is_open_without_auth_servers(nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    response = await post(addresses, "/pub?topic=orders", b"x")
    assert response.status_code == 200
