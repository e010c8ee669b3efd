"""No error of one connection ends the broker or the lookupd (issue 30, item 1), on
every listener: connections opened and dropped (closed, and reset) at each step of
the TCP protocol's, HTTP's, HTTPS's, the admin stream's and the lookupd's
handshakes; after each drop the broker still answers /ping and delivers a PUB to a
SUB (the lookupd: /ping, and a REGISTER shows in /lookup), and nothing was logged
as an error.

The server runs in the test's nursery: a failure escaping any connection would end
it, and with it the test, with that failure."""

from __future__ import annotations

import itertools
import json
import logging
from typing import TYPE_CHECKING

import attrs
import pytest
import trio
import trustme

from trionsq import NsqdConfig
from trionsq.protocol import Auth, Fin, IdentifyRequest, Pub, Rdy, Sub
from trionsq.protocol.client import encode_identify
from trionsq.protocol.lookupd import LookupIdentify, encode_lookup_command

from ..auth_server import grant, start_auth_server
from .drops import (
    WAYS,
    Step,
    drop_at,
    ping,
    read_some,
    read_until,
    sending,
    sized,
    tls_steps,
    websocket_frame,
    websocket_message,
    websocket_open,
)
from .lookupd_peers import RawPeer, nsqd_info, start_lookupd
from .raw import LOCAL, Clients, next_frame, next_message, ok, start

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.lookupd.server import LookupdAddresses
    from trionsq.nursery_tree import BoundAddresses

SECRET = "drops-secret"  # noqa: S105 - the test auth server's one secret
EVERYTHING = grant([{"topic": ".*", "channels": [".*"], "permissions": ["subscribe", "publish"]}])
IDENTIFY = encode_identify(IdentifyRequest(feature_negotiation=True))
UPGRADE = (
    b"GET /admin/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)
"""The issue's repro: an upgrade to the admin stream, the socket closed unread."""
_checks = itertools.count()


@attrs.frozen
class Pki:
    cert_file: str
    key_file: str

    def broker_config(self) -> NsqdConfig:
        """A loopback broker with this certificate: TLS upgrades and HTTPS."""
        return attrs.evolve(LOCAL, tls_cert=self.cert_file, tls_key=self.key_file)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory: Path = tmp_path_factory.mktemp("pki")
    server = trustme.CA().issue_cert("localhost", "127.0.0.1")
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    server.cert_chain_pems[0].write_to_path(str(cert_file))
    server.private_key_pem.write_to_path(str(key_file))
    return Pki(str(cert_file), str(key_file))


async def still_serves(clients: Clients, broker: BoundAddresses, secret: str = "") -> None:
    """/ping answers OK, and a message PUB'd to a new topic reaches a SUB."""
    assert broker.http is not None
    await ping(broker.http)
    topic = f"after{next(_checks)}"
    producer = await clients.connect(broker.tcp)
    consumer = await clients.connect(broker.tcp)
    if secret:
        for client in (producer, consumer):
            await client.send(Auth(secret.encode()))
            assert b"permission_count" in (await next_frame(client)).data  # type: ignore[union-attr]
    await producer.send(Pub(topic, b"still here"))
    assert ok(await next_frame(producer))
    await consumer.send(Sub(topic, "c"))
    assert ok(await next_frame(consumer))
    await consumer.send(Rdy(1))
    message = await next_message(consumer)
    assert message.body == b"still here"
    await consumer.send(Fin(message.id))
    for client in (producer, consumer):
        await trio.aclose_forcefully(client.stream)


async def drop_everywhere(
    clients: Clients,
    broker: BoundAddresses,
    address: tuple[str, int],
    steps: list[Step],
    secret: str = "",
) -> None:
    """Each step, dropped each way, then the broker still serves; a peer that goes
    away is no failure (nothing logged with a traceback)."""
    errors = ErrorRecords()
    logging.getLogger("trionsq").addHandler(errors)
    try:
        for step, way in itertools.product(steps, WAYS):
            await drop_at(address, step, way)
            await still_serves(clients, broker, secret)
            assert errors.records == [], (step.name, way, errors.records[0].getMessage())
    finally:
        logging.getLogger("trionsq").removeHandler(errors)


class ErrorRecords(logging.Handler):
    """Failures logged while it is attached: records with a traceback, as a
    connection's unexpected failure is logged (a protocol error the lookupd logs at
    ERROR, as nsqlookupd does, is an answer, not a failure)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info is not None:
            self.records.append(record)


# ---------------------------------------------------------------------- TCP


async def identified(sock: trio.socket.SocketType) -> None:
    """Magic and IDENTIFY sent, the JSON answer read."""
    await sock.send(b"  V2" + IDENTIFY)
    await read_some(sock, 8)


async def subscribed_with_a_message_in_flight(sock: trio.socket.SocketType) -> None:
    await sock.send(b"  V2" + b"PUB inflight\n" + sized(b"m") + b"SUB inflight c\nRDY 1\n")
    await read_until(sock, b"m")  # OK, OK, then the message


TCP_STEPS = [
    Step("connected, nothing sent", sending()),
    Step("part of the magic", sending(b"  V")),
    Step("after the magic", sending(b"  V2")),
    Step("mid IDENTIFY's size", sending(b"  V2IDENTIFY\n\x00\x00")),
    Step("mid IDENTIFY's body", sending(b"  V2" + IDENTIFY[: len(IDENTIFY) - 5])),
    Step("after IDENTIFY, its answer unread", sending(b"  V2" + IDENTIFY)),
    Step("after IDENTIFY's answer", identified),
    Step("mid SUB", sending(b"  V2SUB t c")),
    Step("mid PUB's body", sending(b"  V2PUB t\n" + sized(b"x" * 100)[:40])),
    Step("after a PUB, its OK unread", sending(b"  V2PUB t\n" + sized(b"x" * 100))),
    Step("mid MPUB's body", sending(b"  V2MPUB t\n\x00\x00\x00\x20\x00\x00\x00\x02")),
    Step("subscribed, a message in flight", subscribed_with_a_message_in_flight),
]


async def test_tcp_connections_dropped_mid_tls_upgrade(
    clients: Clients, nursery: trio.Nursery, pki: Pki
) -> None:
    broker = await start(nursery, pki.broker_config())
    tls_identify = encode_identify(IdentifyRequest(feature_negotiation=True, tls_v1=True))

    async def upgrading(sock: trio.socket.SocketType) -> None:
        await sock.send(b"  V2" + tls_identify)
        await read_until(sock, b"}")  # IDENTIFY's JSON: the handshake begins

    asked = Step("after IDENTIFY asked for TLS", sending(b"  V2" + tls_identify))
    await drop_everywhere(clients, broker, broker.tcp, [asked, *tls_steps(upgrading)])


async def test_tcp_connections_dropped_at_auth(clients: Clients, nursery: trio.Nursery) -> None:
    server = await start_auth_server(nursery, {SECRET: EVERYTHING})
    broker = await start(nursery, NsqdConfig.loopback(auth_http_addresses=(server.address,)))
    auth = b"AUTH\n" + sized(SECRET.encode())

    async def authenticated(sock: trio.socket.SocketType) -> None:
        await identified(sock)
        await sock.send(auth)
        await read_until(sock, b"permission_count")

    steps = [
        Step("mid AUTH's body", sending(b"  V2" + IDENTIFY + auth[:-3])),
        Step("after AUTH, while the auth server is asked", sending(b"  V2" + IDENTIFY + auth)),
        Step("after AUTH's answer", authenticated),
        Step("a PUB refused before AUTH", sending(b"  V2PUB t\n" + sized(b"x"))),
    ]
    await drop_everywhere(clients, broker, broker.tcp, steps, SECRET)


# ---------------------------------------------------------------------- HTTP and HTTPS

PUB_HEAD = b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"


async def answered_then_half_a_second(sock: trio.socket.SocketType) -> None:
    await sock.send(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    await read_until(sock, b"OK")
    await sock.send(b"GET /stats?format=json HTTP/1.1\r\nHo")


HTTP_STEPS = [
    Step("connected, nothing sent", sending()),
    Step("mid head", sending(PUB_HEAD[:30])),
    Step("mid body", sending(PUB_HEAD + b"x" * 40)),
    Step("after a PUB, its answer unread", sending(PUB_HEAD + b"x" * 100)),
    Step("after a /stats, its answer unread", sending(b"GET /stats HTTP/1.1\r\nHost: x\r\n\r\n")),
    Step("mid the second request of a keep-alive", answered_then_half_a_second),
]


async def test_https_connections_dropped_mid_handshake_and_request(
    clients: Clients, nursery: trio.Nursery, pki: Pki
) -> None:
    broker = await start(nursery, pki.broker_config())
    assert broker.https is not None

    async def nothing(sock: trio.socket.SocketType) -> None:
        pass

    steps = [Step("connected, nothing sent", nothing), *tls_steps(nothing)]
    await drop_everywhere(clients, broker, broker.https, steps)


# ---------------------------------------------------------------------- the admin stream


async def after_101(sock: trio.socket.SocketType) -> None:
    await sock.send(UPGRADE)
    await read_until(sock, b"\r\n\r\n")


async def after_hello(sock: trio.socket.SocketType) -> None:
    client = await websocket_open(sock, "/admin/stream")
    assert json.loads(await websocket_message(sock, client))["type"] == "hello"


async def mid_frame(sock: trio.socket.SocketType) -> None:
    client = await websocket_open(sock, "/admin/stream")
    frame = websocket_frame(client, json.dumps({"op": "topic.create", "topic": "ws"}))
    await sock.send(frame[: len(frame) // 2])


async def after_an_op(sock: trio.socket.SocketType) -> None:
    client = await websocket_open(sock, "/admin/stream?snapshot_interval_ms=0")
    await sock.send(websocket_frame(client, json.dumps({"op": "topic.create", "topic": "ws"})))


WEBSOCKET_STEPS = [
    Step("after the upgrade request, before the 101", sending(UPGRADE)),
    Step("mid the upgrade request", sending(UPGRADE[:60])),
    Step("after the 101", after_101),
    Step("after hello", after_hello),
    Step("mid a frame", mid_frame),
    Step("after an op, its reply unread", after_an_op),
]


@pytest.mark.parametrize(
    ("listener", "steps"),
    [("tcp", TCP_STEPS), ("http", HTTP_STEPS), ("http", WEBSOCKET_STEPS)],
    ids=["tcp", "http", "admin stream"],
)
async def test_connections_dropped_at_every_step(
    clients: Clients, nursery: trio.Nursery, listener: str, steps: list[Step]
) -> None:
    broker = await start(nursery)
    address = broker.tcp if listener == "tcp" else broker.http
    assert address is not None
    await drop_everywhere(clients, broker, address, steps)


async def test_admin_stream_connections_dropped_at_the_auth_prompt(
    clients: Clients, nursery: trio.Nursery
) -> None:
    server = await start_auth_server(nursery, {SECRET: EVERYTHING})
    broker = await start(nursery, NsqdConfig.loopback(auth_http_addresses=(server.address,)))
    assert broker.http is not None

    async def after_auth_op(sock: trio.socket.SocketType) -> None:
        client = await websocket_open(sock, "/admin/stream")
        assert json.loads(await websocket_message(sock, client))["auth_required"] is True
        await sock.send(websocket_frame(client, json.dumps({"op": "auth", "secret": SECRET})))

    steps = [
        Step("before the 101", sending(UPGRADE)),
        Step("at the auth prompt", after_hello),
        Step("after the auth op, its answer unread", after_auth_op),
        Step(
            "with a secret in the query",
            sending(UPGRADE.replace(b"stream", b"stream?auth_secret=" + SECRET.encode())),
        ),
    ]
    await drop_everywhere(clients, broker, broker.http, steps, SECRET)


async def test_an_unexpected_failure_in_one_stream_is_logged_and_ends_only_it(
    clients: Clients,
    nursery: trio.Nursery,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug in a handler (here an op that raises) closes that connection with a log
    line and a traceback; the broker and its other streams go on."""
    from trionsq.server import admin_stream

    original = admin_stream._Subscriber._op

    async def failing(self: admin_stream._Subscriber, message: dict[str, object]) -> None:
        if message.get("op") == "explode":
            raise RuntimeError("a bug in the op handler")
        await original(self, message)

    monkeypatch.setattr(admin_stream._Subscriber, "_op", failing)
    broker = await start(nursery)
    assert broker.http is not None
    bystander = trio.socket.socket()
    await bystander.connect(broker.http)
    watching = await websocket_open(bystander, "/admin/stream?snapshot_interval_ms=0&events=topic")
    await websocket_message(bystander, watching)  # hello
    with caplog.at_level(logging.ERROR, logger="trionsq"):
        victim = trio.socket.socket()
        await victim.connect(broker.http)
        client = await websocket_open(victim, "/admin/stream?snapshot_interval_ms=0")
        await websocket_message(victim, client)  # hello
        await victim.send(websocket_frame(client, json.dumps({"op": "explode"})))
        with trio.fail_after(10):
            while await victim.recv(65536):
                pass  # the broker closes it
        victim.close()
    (record,) = [r for r in caplog.records if r.exc_info]
    assert "RuntimeError: a bug in the op handler" in caplog.text
    assert record.levelno == logging.ERROR
    await still_serves(clients, broker)
    await bystander.send(
        websocket_frame(watching, json.dumps({"op": "topic.create", "topic": "x"}))
    )
    assert json.loads(await websocket_message(bystander, watching))["type"] == "topic_created"
    bystander.close()


# ---------------------------------------------------------------------- lookupd

LOOKUPD_IDENTIFY = encode_lookup_command(LookupIdentify(nsqd_info()))


async def lookupd_still_serves(lookupd: LookupdAddresses) -> None:
    """/ping answers OK, and a new nsqd's REGISTER shows in /lookup."""
    await ping(lookupd.http)
    topic = f"after{next(_checks)}"
    peer = await RawPeer.connect(lookupd)
    try:
        await peer.identify()
        assert await peer.register(topic) == b"OK"
        assert lookupd.registry.find_producers("topic", topic, "")
    finally:
        await peer.aclose()


async def lookupd_drop_everywhere(
    lookupd: LookupdAddresses, address: tuple[str, int], steps: list[Step]
) -> None:
    errors = ErrorRecords()
    logging.getLogger("trionsq").addHandler(errors)
    try:
        for step, way in itertools.product(steps, WAYS):
            await drop_at(address, step, way)
            await lookupd_still_serves(lookupd)
            assert errors.records == [], (step.name, way, errors.records[0].getMessage())
    finally:
        logging.getLogger("trionsq").removeHandler(errors)


async def lookupd_identified(sock: trio.socket.SocketType) -> None:
    await sock.send(b"  V1" + LOOKUPD_IDENTIFY)
    await read_until(sock, b"}")


async def lookupd_registered(sock: trio.socket.SocketType) -> None:
    await lookupd_identified(sock)
    await sock.send(b"REGISTER dropped c\n")
    await read_until(sock, b"OK")


LOOKUPD_TCP_STEPS = [
    Step("connected, nothing sent", sending()),
    Step("part of the magic", sending(b"  V")),
    Step("after the magic", sending(b"  V1")),
    Step("mid IDENTIFY's body", sending(b"  V1" + LOOKUPD_IDENTIFY[:-10])),
    Step("after IDENTIFY, its answer unread", sending(b"  V1" + LOOKUPD_IDENTIFY)),
    Step("after IDENTIFY's answer", lookupd_identified),
    Step("mid REGISTER", sending(b"  V1" + LOOKUPD_IDENTIFY + b"REGISTER t")),
    Step("after REGISTER, its OK unread", sending(b"  V1" + LOOKUPD_IDENTIFY + b"REGISTER t c\n")),
    Step("registered", lookupd_registered),
    Step("a bad magic, its error unread", sending(b"  V9")),
]


async def test_lookupd_tcp_connections_dropped_at_every_step(nursery: trio.Nursery) -> None:
    lookupd = await start_lookupd(nursery)
    await lookupd_drop_everywhere(lookupd, lookupd.tcp, LOOKUPD_TCP_STEPS)


async def test_lookupd_http_connections_dropped_at_every_step(nursery: trio.Nursery) -> None:
    lookupd = await start_lookupd(nursery)
    head = b"POST /topic/create?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    steps = [
        Step("connected, nothing sent", sending()),
        Step("mid head", sending(head[:25])),
        Step("mid body", sending(head + b"x" * 40)),
        Step("after a request, its answer unread", sending(head + b"x" * 100)),
        Step(
            "after a /lookup, its answer unread", sending(b"GET /lookup?topic=t HTTP/1.1\r\n\r\n")
        ),
        Step("mid the second request of a keep-alive", answered_then_half_a_second),
    ]
    await lookupd_drop_everywhere(lookupd, lookupd.http, steps)
