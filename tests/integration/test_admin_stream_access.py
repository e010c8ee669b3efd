"""Who may use the admin stream (issue 30, item 2): a browser page's upgrade only from
the broker's own origin (or an allowed one), 403 before the upgrade otherwise; DNS
rebinding refused; read-only and off modes; an admin secret guarding actions and
message bodies; and the lookupd's cluster page, which follows every broker."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
import pytest
import trio
from trio_websocket import ConnectionClosed

from trionsq import NsqdConfig
from trionsq.config import ConfigError
from trionsq.lookupd.config import LookupdConfig
from trionsq.lookupd.server import serve_lookupd
from trionsq.testing import wait_until
from trionsq.top import StreamClosed, follow, stream_url

from .raw import http, start
from .test_admin_stream import Message, events_until, open_stream, receive, send

if TYPE_CHECKING:
    from trio_websocket import WebSocketConnection

    from trionsq.lookupd.server import LookupdAddresses
    from trionsq.nursery_tree import BoundAddresses

SECRET = "open-sesame"  # noqa: S105 - the test's admin secret


async def upgrade(
    broker: BoundAddresses, *, origin: str | None, host: str | None = None, path: str = ""
) -> bytes:
    """The head of the answer to a raw upgrade request with these headers."""
    assert broker.http is not None
    address = f"{broker.http[0]}:{broker.http[1]}"
    lines = [
        f"GET /admin/stream{path} HTTP/1.1",
        f"Host: {host or address}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
    ]
    if origin is not None:
        lines.append(f"Origin: {origin}")
    stream = await trio.open_tcp_stream(*broker.http)
    async with stream:
        await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        with trio.fail_after(5):
            while b"\r\n\r\n" not in answer:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                answer += chunk
    return answer


def own_origin(broker: BoundAddresses) -> str:
    assert broker.http is not None
    return f"http://{broker.http[0]}:{broker.http[1]}"


async def test_a_page_of_another_origin_gets_403_before_the_upgrade(nursery: trio.Nursery) -> None:
    broker = await start(nursery)
    assert broker.http is not None
    port = broker.http[1]
    for origin in (
        f"http://127.0.0.1:{port + 1}",  # another port of the same host: another origin
        "http://evil.example",
        f"https://127.0.0.1:{port}",  # the scheme is part of the origin
        "null",  # a sandboxed frame, a file
    ):
        answer = await upgrade(broker, origin=origin)
        assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n"), (origin, answer)
        assert b"may not open the admin stream" in answer
    assert (await http(broker, "GET", "/ping")).text == "OK"


async def test_the_brokers_own_page_and_clients_without_origin_may(nursery: trio.Nursery) -> None:
    broker = await start(nursery)
    assert broker.http is not None
    port = broker.http[1]
    for origin, host in (
        (own_origin(broker), None),
        (f"http://localhost:{port}", f"localhost:{port}"),
        (None, None),  # no browser: trionsq top, scripts
    ):
        answer = await upgrade(broker, origin=origin, host=host)
        assert answer.startswith(b"HTTP/1.1 101 "), (origin, answer)


async def test_dns_rebinding_is_refused(nursery: trio.Nursery) -> None:
    """A page of evil.example whose name now points at the broker: its origin and the
    Host the browser sends agree, but evil.example is no name of the broker."""
    broker = await start(nursery)
    assert broker.http is not None
    port = broker.http[1]
    answer = await upgrade(
        broker, origin=f"http://evil.example:{port}", host=f"evil.example:{port}"
    )
    assert answer.startswith(b"HTTP/1.1 403 "), answer


async def test_allowed_origins_and_any(nursery: trio.Nursery) -> None:
    listed = await start(
        nursery, NsqdConfig.loopback(admin_allowed_origins=("https://ops.example:8443",))
    )
    assert (await upgrade(listed, origin="https://ops.example:8443")).startswith(b"HTTP/1.1 101 ")
    assert (await upgrade(listed, origin="https://ops.example")).startswith(b"HTTP/1.1 403 ")
    anyone = await start(nursery, NsqdConfig.loopback(admin_allowed_origins=("*",)))
    assert (await upgrade(anyone, origin="http://evil.example")).startswith(b"HTTP/1.1 101 ")


async def test_the_lookupds_page_may_follow_its_brokers(nursery: trio.Nursery) -> None:
    lookupd: LookupdAddresses = await nursery.start(serve_lookupd, LookupdConfig.loopback())
    config = NsqdConfig.loopback(lookupd_tcp_addresses=(f"127.0.0.1:{lookupd.tcp[1]}",))
    broker = await start(nursery, config)
    page = f"http://127.0.0.1:{lookupd.http[1]}"
    await wait_until(
        lambda: bool(lookupd.registry.find_producers("client", "", "")), "the broker identified"
    )
    for _ in range(50):  # the broker learns the lookupd's HTTP port from its IDENTIFY answer
        if (await upgrade(broker, origin=page)).startswith(b"HTTP/1.1 101 "):
            break
        await trio.sleep(0.05)
    else:
        pytest.fail("the lookupd's page was refused")
    other = f"http://127.0.0.1:{lookupd.http[1] + 1}"
    assert (await upgrade(broker, origin=other)).startswith(b"HTTP/1.1 403 ")


async def test_off_means_no_stream(nursery: trio.Nursery) -> None:
    broker = await start(nursery, NsqdConfig.loopback(admin_stream="off"))
    answer = await upgrade(broker, origin=None)
    assert answer.startswith(b"HTTP/1.1 404 "), answer
    assert (await http(broker, "GET", "/admin")).status_code == 200  # the page still loads


async def test_read_only_refuses_actions_and_bodies(nursery: trio.Nursery) -> None:
    broker = await start(nursery, NsqdConfig.loopback(admin_stream="read-only"))
    await http(broker, "POST", "/topic/create?topic=t")
    async with open_stream(broker, "snapshot_interval_ms=0") as ws:
        hello = await receive(ws)
        assert (hello["mode"], hello["admin_secret_required"]) == ("read-only", False)
        await send(ws, op="topic.delete", topic="t", ref=1)
        await send(ws, op="sample", topic="t", every=1, bodies=True, ref=2)
        await send(ws, op="sample", topic="t", every=1, ref=3)
        replies = await events_until_replies(ws, 3)
        assert [(r["ref"], r["status"], r.get("error")) for r in replies] == [
            (1, 403, "ADMIN_STREAM_READ_ONLY"),
            (2, 403, "ADMIN_STREAM_READ_ONLY"),
            (3, 200, None),  # metadata samples are no secret
        ]
        await http(broker, "POST", "/pub?topic=t", b"private")
        sample = (await events_until(ws, "sample"))[-1]
        assert "body" not in sample
    assert "t" in broker.broker.topics


async def events_until_replies(ws: WebSocketConnection, count: int) -> list[Message]:
    """The next ``count`` replies (other messages skipped)."""
    replies: list[Message] = []
    while len(replies) < count:
        message = await receive(ws)
        if message["type"] == "reply":
            replies.append(message)
    return replies


async def test_an_admin_secret_guards_actions_and_bodies(nursery: trio.Nursery) -> None:
    broker = await start(nursery, NsqdConfig.loopback(admin_secret=SECRET))
    await http(broker, "POST", "/topic/create?topic=t")
    async with open_stream(broker, "snapshot_interval_ms=0") as ws:
        hello = await receive(ws)
        assert (hello["mode"], hello["admin_secret_required"]) == ("read-write", True)
        assert hello["auth_required"] is False
        await send(ws, op="topic.pause", topic="t", ref=1)
        await send(ws, op="sample", topic="t", every=1, bodies=True, ref=2)
        await send(ws, op="auth", secret="wrong", ref=3)  # noqa: S106 - a test secret
        await send(ws, op="topic.pause", topic="t", ref=4)
        await send(ws, op="auth", secret=SECRET, ref=5)
        await send(ws, op="topic.pause", topic="t", ref=6)
        replies = await events_until_replies(ws, 6)
        assert [(r["ref"], r["status"]) for r in replies] == [
            (1, 401),
            (2, 401),
            (3, 401),
            (4, 401),
            (5, 200),
            (6, 200),
        ]
        assert replies[0]["error"] == "ADMIN_SECRET_REQUIRED"
        assert replies[2]["error"] == "E_AUTH_FAILED the admin secret was refused"
    assert broker.broker.topics["t"].paused
    # at open: a bearer token or auth_secret= (the page's reconnect)
    async with open_stream(broker, f"snapshot_interval_ms=0&auth_secret={SECRET}") as ws:
        await receive(ws)
        await send(ws, op="topic.unpause", topic="t", ref=1)
        assert (await events_until_replies(ws, 1))[0]["status"] == 200
    async with open_stream(broker, "auth_secret=wrong") as ws:
        await receive(ws)
        error = await receive(ws)
        assert error["error"] == "E_AUTH_FAILED the admin secret was refused"
        with pytest.raises(ConnectionClosed) as closed:
            await receive(ws)
        assert closed.value.reason is not None
        assert closed.value.reason.code == 4001


async def test_the_admin_secret_is_not_shown_by_config(nursery: trio.Nursery) -> None:
    broker = await start(nursery, NsqdConfig.loopback(admin_secret=SECRET))
    answer = await http(broker, "GET", "/config/admin_secret")
    assert (answer.status_code, orjson.loads(answer.content)) == (
        400,
        {"message": "INVALID_OPTION"},
    )


def test_bad_admin_options_are_refused_at_start() -> None:
    for changes, text in (
        ({"admin_stream": "sometimes"}, "--admin-stream must be one of"),
        ({"admin_max_subscribers": 0}, "--admin-max-subscribers must be 1 or more"),
        ({"admin_allowed_origins": ("ops.example",)}, "--admin-allowed-origins must be"),
        (
            {"admin_secret": SECRET, "auth_http_addresses": ("127.0.0.1:1",)},
            "--admin-secret cannot be used with --auth-http-address",
        ),
    ):
        with pytest.raises(ConfigError, match=text):
            NsqdConfig.loopback(**changes).validate()


async def test_top_reads_with_the_defaults_and_with_an_admin_secret(nursery: trio.Nursery) -> None:
    """trionsq top sends no Origin (it is no browser) and needs no secret to read; a
    secret given (--auth-secret, sent as a bearer token) must be the admin secret."""
    for config in (NsqdConfig.loopback(), NsqdConfig.loopback(admin_secret=SECRET)):
        broker = await start(nursery, config)
        assert broker.http is not None
        url = stream_url(f"{broker.http[0]}:{broker.http[1]}")
        await http(broker, "POST", "/topic/create?topic=t")
        for secret in (None, SECRET if config.admin_secret else None):
            state = await follow(url, auth_secret=secret, max_snapshots=1)
            assert [topic.name for topic in state.topics] == ["t"]
    with pytest.raises(StreamClosed, match="refused the auth secret"):
        await follow(url, auth_secret="wrong", max_snapshots=1)  # noqa: S106 - a test secret
