"""IDENTIFY's TLS, snappy and deflate upgrades on real sockets with real certificates
(spec tcp-protocol §4.1, §7): every combination nsqd accepts carries publishes and
deliveries; the refusals and failures are nsqd's."""

from __future__ import annotations

import json
import ssl
import struct
from typing import TYPE_CHECKING

import attrs
import pytest
import trio
import trio.testing
import trustme

from trionsq.config import TlsRequired
from trionsq.protocol import MAGIC_V2, Auth, Fin, IdentifyRequest, Mpub, Pub, Rdy, Sub
from trionsq.protocol.client import (
    ErrorReply,
    MessageFrame,
    Response,
    encode_commands,
    encode_identify,
)
from trionsq.protocol.compression import (
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
)

from ..auth_server import grant, start_auth_server
from .raw import LOCAL, Clients, next_frame, start
from .upgraded import UpgradedClient

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq import NsqdConfig
    from trionsq.nursery_tree import BoundAddresses
    from trionsq.server.tcp import ClientSession


@attrs.frozen
class Pki:
    """A CA, the server's certificate files, and client contexts that trust the CA."""

    ca: trustme.CA
    ca_file: str
    cert_file: str
    key_file: str

    def client_context(self, *, with_cert: str | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        if with_cert is not None:
            self.ca.issue_cert("client.example", common_name=with_cert).configure_cert(context)
        return context

    def config(self, **changes: object) -> NsqdConfig:
        with_tls = attrs.evolve(LOCAL, tls_cert=self.cert_file, tls_key=self.key_file)
        return attrs.evolve(with_tls, **changes)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory: Path = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    ca_file, cert_file, key_file = (directory / n for n in ("ca.pem", "cert.pem", "key.pem"))
    ca.cert_pem.write_to_path(str(ca_file))
    server.cert_chain_pems[0].write_to_path(str(cert_file))
    server.private_key_pem.write_to_path(str(key_file))
    return Pki(ca, str(ca_file), str(cert_file), str(key_file))


def _session(addresses: BoundAddresses, user_agent: str) -> ClientSession:
    """The broker's session of the client that identified with ``user_agent``."""
    for client in addresses.broker.clients.values():
        session: ClientSession = client  # type: ignore[assignment]
        if session.protocol.negotiated.user_agent == user_agent:
            return session
    raise AssertionError(f"no session for {user_agent}")


COMBINATIONS: dict[str, dict[str, bool | int]] = {
    "plain": {},
    "tls": {"tls_v1": True},
    "snappy": {"snappy": True},
    "deflate": {"deflate": True, "deflate_level": 1},
    "tls+snappy": {"tls_v1": True, "snappy": True},
    "tls+deflate": {"tls_v1": True, "deflate": True},
}


@pytest.mark.parametrize("name", list(COMBINATIONS))
async def test_publish_and_consume_through_every_combination(
    name: str, pki: Pki, nursery: trio.Nursery
) -> None:
    """PUB, a large MPUB (several snappy chunks, many TLS records) and deliveries
    all pass both ways; /stats shows the layers as nsqd names them."""
    addresses = await start(nursery, pki.config())
    options = COMBINATIONS[name]
    request = IdentifyRequest(user_agent=f"producer-{name}", **options)  # type: ignore[arg-type]
    producer = await UpgradedClient.connect(addresses.tcp, request, tls=pki.client_context())
    bodies = [b"first", *(bytes([i % 251]) * 3000 for i in range(100)), b"z" * 200_000]
    await producer.send(Pub("t", bodies[0]), Mpub("t", tuple(bodies[1:])))
    assert [f.is_ok for f in await producer.read(2)] == [True, True]  # type: ignore[union-attr]
    stats = _session(addresses, f"producer-{name}").statistics()
    tls = "tls_v1" in options
    assert (stats.tls, stats.snappy, stats.deflate) == (
        tls,
        "snappy" in options,
        "deflate" in options,
    )
    if tls:
        assert stats.tls_version == "TLS1.3"
        assert stats.tls_cipher_suite.startswith("Unknown 48")  # TLS 1.3 suites: nsqd has no name
        assert stats.tls_negotiated_protocol == ""
        assert stats.tls_negotiated_protocol_is_mutual
    else:
        assert (stats.tls_version, stats.tls_cipher_suite) == ("", "")
        assert not stats.tls_negotiated_protocol_is_mutual

    request = attrs.evolve(request, user_agent=f"consumer-{name}")
    consumer = await UpgradedClient.connect(addresses.tcp, request, tls=pki.client_context())
    await consumer.send(Sub("t", "c"), Rdy(200))
    assert (await consumer.read(1))[0].is_ok  # type: ignore[union-attr]
    received: list[bytes] = []
    while len(received) < len(bodies):
        frames = await consumer.read(1)
        assert frames, "server closed the connection"
        (frame,) = frames
        if isinstance(frame, MessageFrame):
            received.append(frame.message.body)
            await consumer.send(Fin(frame.message.id))
    assert received == bodies
    await producer.aclose()
    await consumer.aclose()


async def test_snappy_and_deflate_together_refused(nursery: trio.Nursery, clients: Clients) -> None:
    addresses = await start(nursery)
    client = await clients.connect(addresses.tcp)
    request = IdentifyRequest(feature_negotiation=True, snappy=True, deflate=True)
    await client.stream.send_all(encode_identify(request))
    frame = await next_frame(client)
    assert isinstance(frame, ErrorReply)
    assert frame.error.text == "E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"
    await client.wait_closed()


async def test_tls_not_offered_without_a_certificate(nursery: trio.Nursery) -> None:
    """tls_v1 asked of a server without a certificate: not negotiated, stays plain."""
    addresses = await start(nursery)
    client = await UpgradedClient.connect(addresses.tcp, IdentifyRequest(tls_v1=True))
    assert client.negotiated["tls_v1"] is False
    await client.send(Pub("t", b"x"))
    assert (await client.read(1))[0].is_ok  # type: ignore[union-attr]
    await client.aclose()


async def test_compression_switched_off_by_the_server(nursery: trio.Nursery) -> None:
    addresses = await start(nursery, attrs.evolve(LOCAL, snappy=False, deflate=False))
    request = IdentifyRequest(snappy=True)
    client = await UpgradedClient.connect(addresses.tcp, request)
    assert (client.negotiated["snappy"], client.negotiated["deflate"]) == (False, False)
    await client.send(Pub("t", b"x"))
    assert (await client.read(1))[0].is_ok  # type: ignore[union-attr]
    await client.aclose()


@pytest.mark.parametrize(("asked", "effective"), [(9, 3), (2, 2), (0, 3)])
async def test_deflate_level_capped_by_max_deflate_level(
    asked: int, effective: int, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery, attrs.evolve(LOCAL, max_deflate_level=3))
    request = IdentifyRequest(deflate=True, deflate_level=asked)
    client = await UpgradedClient.connect(addresses.tcp, request)
    assert (client.negotiated["deflate_level"], client.negotiated["max_deflate_level"]) == (
        effective,
        3,
    )
    await client.send(Pub("t", b"x" * 10_000))
    assert (await client.read(1))[0].is_ok  # type: ignore[union-attr]
    await client.aclose()


@pytest.mark.parametrize("required", [TlsRequired.YES, TlsRequired.EXCEPT_HTTP])
async def test_tls_required_refuses_a_client_that_does_not_upgrade(
    required: TlsRequired, pki: Pki, nursery: trio.Nursery, clients: Clients
) -> None:
    addresses = await start(nursery, pki.config(tls_required=required))
    client = await clients.connect(addresses.tcp)
    await client.stream.send_all(encode_identify(IdentifyRequest(feature_negotiation=True)))
    reply = await next_frame(client)
    assert isinstance(reply, Response)
    assert json.loads(reply.data)["tls_v1"] is False
    await client.send(Pub("t", b"x"))
    frame = await next_frame(client)
    assert isinstance(frame, ErrorReply)
    assert frame.error.text == "E_INVALID cannot PUB in current state (TLS required)"
    await client.wait_closed()

    upgraded = await UpgradedClient.connect(
        addresses.tcp, IdentifyRequest(tls_v1=True), tls=pki.client_context()
    )
    await upgraded.send(Pub("t", b"x"))
    assert (await upgraded.read(1))[0].is_ok  # type: ignore[union-attr]
    await upgraded.aclose()


async def test_client_certificate_required_and_verified(pki: Pki, nursery: trio.Nursery) -> None:
    """require-verify: a certificate from the CA is let in and its CN kept for AUTH;
    a client without one fails the handshake and is closed."""
    config = pki.config(tls_client_auth_policy="require-verify", tls_root_ca_file=pki.ca_file)
    addresses = await start(nursery, config)
    request = IdentifyRequest(tls_v1=True, user_agent="with-cert")
    client = await UpgradedClient.connect(
        addresses.tcp, request, tls=pki.client_context(with_cert="worker-7")
    )
    await client.send(Pub("t", b"x"))
    assert (await client.read(1))[0].is_ok  # type: ignore[union-attr]
    assert _session(addresses, "with-cert").tls_common_name == "worker-7"
    await client.aclose()

    # TLS 1.3: the client finishes its side first; the refusal (an alert) comes
    # instead of the OK
    with pytest.raises(trio.BrokenResourceError):
        await UpgradedClient.connect(
            addresses.tcp, IdentifyRequest(tls_v1=True), tls=pki.client_context()
        )


async def _identify_raw(address: tuple[str, int], request: IdentifyRequest) -> trio.SocketStream:
    """Connect and IDENTIFY by hand; the JSON reply is read and checked."""
    stream = await trio.open_tcp_stream(*address)
    await stream.send_all(
        MAGIC_V2 + encode_identify(attrs.evolve(request, feature_negotiation=True))
    )
    header = await _receive_exactly(stream, 8)
    size, frame_type = struct.unpack(">ii", header)
    assert frame_type == 0
    await _receive_exactly(stream, size - 4)
    return stream


async def _receive_exactly(stream: trio.SocketStream, count: int) -> bytes:
    data = b""
    with trio.fail_after(10):
        while len(data) < count:
            chunk = await stream.receive_some(count - len(data))
            assert chunk, "closed early"
            data += chunk
    return data


async def _receive_all(stream: trio.SocketStream) -> bytes:
    data = b""
    with trio.fail_after(10):
        while chunk := await stream.receive_some(65536):
            data += chunk
    return data


async def test_garbage_instead_of_tls_fails_identify(pki: Pki, nursery: trio.Nursery) -> None:
    addresses = await start(nursery, pki.config())
    stream = await _identify_raw(addresses.tcp, IdentifyRequest(tls_v1=True))
    await stream.send_all(b"this is not a TLS client hello\n" * 4)
    rest = await _receive_all(stream)
    assert b"E_IDENTIFY_FAILED IDENTIFY failed tls: " in rest
    await stream.aclose()


async def test_tls_handshake_deadline(
    pki: Pki, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """A client that never starts its handshake is dropped after nsqd's 5 seconds."""
    autojump_clock.autojump_threshold = 0.1  # real sockets: never jump while bytes are in flight
    addresses = await start(nursery, pki.config())
    stream = await _identify_raw(addresses.tcp, IdentifyRequest(tls_v1=True))
    start_time = trio.current_time()
    rest = await _receive_all(stream)
    assert 4.9 <= trio.current_time() - start_time <= 5.5
    assert rest.endswith(b"E_IDENTIFY_FAILED IDENTIFY failed tls: handshake timed out")
    await stream.aclose()


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
async def test_corrupt_compressed_stream_closes_quietly(codec: str, nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    request = IdentifyRequest(snappy=codec == "snappy", deflate=codec == "deflate")
    client = await UpgradedClient.connect(addresses.tcp, request)
    client.codec = None  # send raw bytes that are not a valid stream for the codec
    await client.stream.send_all(b"\x07\xff\xff\xffcorrupt" * 100)
    assert await client.read(1) == []  # closed, no frame
    await client.aclose()


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
async def test_commands_in_the_identify_read_are_decompressed(
    codec: str, nursery: trio.Nursery
) -> None:
    """A client that sends compressed commands right behind IDENTIFY (one write):
    the server hands them to the new layer after its OK."""
    addresses = await start(nursery)
    request = IdentifyRequest(
        feature_negotiation=True, snappy=codec == "snappy", deflate=codec == "deflate"
    )
    snappy = codec == "snappy"
    encoder = SnappyEncoder() if snappy else DeflateEncoder(6)
    commands = encoder.encode(encode_commands([Pub("t", b"a"), Pub("t", b"b")]))
    stream = await trio.open_tcp_stream(*addresses.tcp)
    await stream.send_all(MAGIC_V2 + encode_identify(request) + commands)
    client = UpgradedClient(stream, {})
    reply = await client.one_frame()
    assert json.loads(reply[4:])[codec] is True
    client.start_codec((encoder, SnappyDecoder() if snappy else DeflateDecoder()))
    frames = await client.read(3)
    assert [f.is_ok for f in frames] == [True, True, True]  # type: ignore[union-attr]
    await client.aclose()


async def test_client_hello_in_the_identify_read(pki: Pki, nursery: trio.Nursery) -> None:
    """TLS bytes right behind IDENTIFY are the handshake's first input."""
    addresses = await start(nursery, pki.config())
    context = pki.client_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    request = IdentifyRequest(feature_negotiation=True, tls_v1=True)
    stream = await trio.open_tcp_stream(*addresses.tcp)
    await stream.send_all(MAGIC_V2 + encode_identify(request) + hello)
    received = b""
    with trio.fail_after(10):
        while len(received) < 8 or len(received) < 4 + struct.unpack(">i", received[:4])[0]:
            received += await stream.receive_some(65536)
        size = struct.unpack(">i", received[:4])[0]
        assert json.loads(received[8 : 4 + size])["tls_v1"] is True
        incoming.write(received[4 + size :])
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            if outgoing.pending:
                await stream.send_all(outgoing.read())
            incoming.write(await stream.receive_some(65536))
        await stream.send_all(outgoing.read())
        plain = b""
        while len(plain) < 10:
            try:
                plain += tls.read(65536)
            except ssl.SSLWantReadError:
                incoming.write(await stream.receive_some(65536))
        assert plain == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
    await stream.aclose()


async def test_auth_over_tls_sends_tls_true_and_the_certificates_common_name(
    pki: Pki, nursery: trio.Nursery
) -> None:
    server = await start_auth_server(nursery, {"s": grant()})
    config = pki.config(
        tls_client_auth_policy="require-verify",
        tls_root_ca_file=pki.ca_file,
        auth_http_addresses=(server.address,),
    )
    addresses = await start(nursery, config)
    client = await UpgradedClient.connect(
        addresses.tcp,
        IdentifyRequest(tls_v1=True, snappy=True),
        tls=pki.client_context(with_cert="worker-7"),
    )
    await client.send(Auth(b"s"))
    (answer,) = await client.read(1)
    assert isinstance(answer, Response)
    assert b'"permission_count":1' in answer.data
    await client.send(Pub("t", b"x"))
    assert (await client.read(1))[0].is_ok  # type: ignore[union-attr]
    (request,) = server.requests
    assert (request.params["tls"], request.params["common_name"]) == ("true", "worker-7")
    await client.aclose()
