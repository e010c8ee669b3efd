"""trionsq.client through IDENTIFY's upgrades (spec tcp-protocol §4.1, §7): TLS,
snappy, deflate and their combinations carry publishes and deliveries both ways;
a broker that requires TLS refuses a plain client; AUTH goes through the layers;
and the handshake hands the bytes after each frame to the next layer."""

from __future__ import annotations

import json
import random
import ssl
import struct
from collections import Counter
from typing import TYPE_CHECKING, Unpack

import attrs
import pytest
import trio
import trustme

import trionsq.client as client_api
from trionsq import NsqdConfig, serve_nsqd
from trionsq.client import (
    ConnectionOptions,
    NsqError,
    open_connection,
    open_consumer,
    open_producer,
)
from trionsq.client.layers import Codec, HandshakeBuffer
from trionsq.config import TlsRequired
from trionsq.protocol.compression import (
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
)
from trionsq.protocol.errors import ProtocolError
from trionsq.protocol.frames import response_frame
from trionsq.protocol.identify import IdentifyRequest
from trionsq.testing import wait_until

from ..auth_server import grant, start_auth_server

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.client import Consumer
    from trionsq.config import NsqdOptions
    from trionsq.nursery_tree import BoundAddresses
    from trionsq.server.tcp import ClientSession

OK_FRAME = response_frame(b"OK")
HEARTBEAT_FRAME = response_frame(b"_heartbeat_")


@attrs.frozen
class Pki:
    """A CA and the broker's certificate (for localhost and 127.0.0.1) as files."""

    ca: trustme.CA
    cert_file: str
    key_file: str

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        return context


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory: Path = tmp_path_factory.mktemp("client-pki")
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    server.cert_chain_pems[0].write_to_path(str(cert_file))
    server.private_key_pem.write_to_path(str(key_file))
    return Pki(ca, str(cert_file), str(key_file))


@pytest.fixture
def nsqd_config(pki: Pki, request: pytest.FixtureRequest) -> NsqdConfig:
    """A broker with a certificate; indirect parametrization adds changes."""
    options: NsqdOptions = {"tls_cert": pki.cert_file, "tls_key": pki.key_file}
    changes: NsqdOptions = getattr(request, "param", options)
    options.update(changes)
    return NsqdConfig.loopback(**options)


def tcp(addresses: BoundAddresses) -> str:
    return f"{addresses.tcp[0]}:{addresses.tcp[1]}"


def options(pki: Pki, agent: str, **identify: bool | int) -> ConnectionOptions:
    request = IdentifyRequest(user_agent=agent, **identify)  # type: ignore[arg-type]
    return ConnectionOptions(request, tls=pki.client_context())


def layers_of(addresses: BoundAddresses, agent: str) -> set[tuple[bool, bool, bool]]:
    """(tls, snappy, deflate) of every broker session that identified as ``agent``."""
    seen = set()
    for client in addresses.broker.clients.values():
        session: ClientSession = client  # type: ignore[assignment]
        if session.protocol.negotiated.user_agent == agent:
            stats = session.statistics()
            seen.add((stats.tls, stats.snappy, stats.deflate))
    return seen


async def take(consumer: Consumer, count: int) -> list[bytes]:
    """The next ``count`` bodies, each finished."""
    bodies = []
    with trio.fail_after(30):
        async for message in consumer:
            bodies.append(message.body)
            message.finish()
            if len(bodies) == count:
                break
    return bodies


def thousand_bodies() -> list[bytes]:
    """Small and 3 KB bodies, compressible and not, and one of 1 MB: 1,000 in all."""
    rng = random.Random(16)
    small = [b"pub-%d" % i for i in range(50)]
    batch = [
        (b"%04d" % i) + (rng.randbytes(3000) if i % 3 else bytes([i % 251]) * 3000)
        for i in range(949)
    ]
    return [*small, *batch, rng.randbytes(1_000_000)]


async def publish_and_consume(
    addresses: BoundAddresses, opts: ConnectionOptions, layers: tuple[bool, bool, bool]
) -> None:
    """Every body published through ``open_producer`` comes back once through
    ``open_consumer`` and is finished, the last FINs as the consumer closes (a send
    cut short there would strand them in flight); the broker's sessions have ``layers``."""
    bodies = thousand_bodies()
    agent = opts.identify.user_agent
    async with open_producer(tcp(addresses), options=opts) as producer:
        async with trio.open_nursery() as publishers:
            for body in bodies[:50]:
                publishers.start_soon(producer.publish, "t", body)
        await producer.publish_many("t", bodies[50:-1])  # ~2.8 MB in one command
        await producer.publish("t", bodies[-1])
        assert layers_of(addresses, agent) == {layers}
    async with open_consumer("t", "c", tcp(addresses), max_in_flight=250, options=opts) as consumer:
        received = await take(consumer, len(bodies))
        assert layers_of(addresses, agent) == {layers}
    assert Counter(received) == Counter(bodies)
    (channel,) = addresses.broker.find_channel("t", "c")
    await wait_until(lambda: channel.depth == len(channel.in_flight) == 0, "every FIN handled")


UPGRADES: dict[str, dict[str, bool | int]] = {
    "tls+snappy": {"tls_v1": True, "snappy": True},
    "tls+deflate": {"tls_v1": True, "deflate": True, "deflate_level": 6},
    "snappy": {"snappy": True},
    "deflate": {"deflate": True, "deflate_level": 1},
    "tls": {"tls_v1": True},
}


@pytest.mark.parametrize("name", list(UPGRADES))
async def test_publish_and_consume_through_each_upgrade(
    name: str, pki: Pki, nsqd: BoundAddresses
) -> None:
    """1,000 messages (a 2.8 MB MPUB, a 1 MB body) each way; the broker's sessions
    show the layers the client asked for."""
    asked = UPGRADES[name]
    layers = ("tls_v1" in asked, "snappy" in asked, "deflate" in asked)
    await publish_and_consume(nsqd, options(pki, name, **asked), layers)


async def test_tls_asked_without_a_context_uses_the_default_one(nsqd: BoundAddresses) -> None:
    """The system's CAs do not know the test CA: the handshake fails, and says why."""
    plain = ConnectionOptions(IdentifyRequest(tls_v1=True, snappy=True))
    async with open_producer(tcp(nsqd), options=plain) as producer:
        with pytest.raises(client_api.NsqTlsError) as failed:
            await producer.publish("t", b"x")
    assert isinstance(failed.value.__cause__, ssl.SSLCertVerificationError)


async def test_a_certificate_that_does_not_verify_is_a_tls_error_caused_by_the_ssl_error(
    nsqd: BoundAddresses,
) -> None:
    """Issue 31, item 3: the consumer's nursery used to drop the cause (an empty
    BrokenResourceError); the producer's too must say it is TLS."""
    plain = ConnectionOptions(IdentifyRequest(tls_v1=True))
    with pytest.raises(Exception) as failed:  # noqa: PT011 - the class is what is checked
        async with open_consumer("t", "c", tcp(nsqd), options=plain):
            pass
    assert isinstance(failed.value.__cause__, ssl.SSLCertVerificationError), repr(failed.value)
    assert isinstance(failed.value, client_api.NsqTlsError)
    assert isinstance(failed.value, client_api.NsqSecurityError)
    assert isinstance(failed.value, client_api.NsqClientError)
    assert "certificate verify failed" in str(failed.value)
    async with open_producer(tcp(nsqd), options=plain) as producer:
        with pytest.raises(client_api.NsqTlsError) as publish_failed:
            await producer.publish("t", b"x")
    assert isinstance(publish_failed.value.__cause__, ssl.SSLCertVerificationError)


async def test_the_certificate_is_checked_against_tls_server_name(
    pki: Pki, nsqd: BoundAddresses
) -> None:
    wrong = attrs.evolve(options(pki, "wrong", tls_v1=True), tls_server_name="other.example")
    async with open_producer(tcp(nsqd), options=wrong) as producer:
        with pytest.raises(client_api.NsqTlsError) as failed:
            await producer.publish("t", b"x")
    assert "other.example" in str(failed.value.__cause__)
    named = attrs.evolve(options(pki, "named", tls_v1=True), tls_server_name="localhost")
    async with open_producer(tcp(nsqd), options=named) as producer:
        await producer.publish("t", b"x")
        assert layers_of(nsqd, "named") == {(True, False, False)}


@pytest.mark.parametrize(
    "nsqd_config",
    [{"tls_required": TlsRequired.YES}, {"tls_required": TlsRequired.EXCEPT_HTTP}],
    indirect=True,
)
async def test_a_broker_that_requires_tls_refuses_a_plain_client(
    pki: Pki, nsqd: BoundAddresses
) -> None:
    plain = options(pki, "plain")
    async with open_producer(tcp(nsqd), options=plain) as producer:
        with pytest.raises(NsqError) as refused:
            await producer.publish("t", b"x")
    assert refused.value.code == "E_INVALID"
    assert str(refused.value) == "E_INVALID cannot PUB in current state (TLS required)"
    with pytest.raises(NsqError) as not_subscribed:  # raised as itself, not in a group
        async with open_consumer("t", "c", tcp(nsqd), options=plain):
            pass
    assert str(not_subscribed.value) == "E_INVALID cannot SUB in current state (TLS required)"

    tls = options(pki, "tls", tls_v1=True)
    async with open_producer(tcp(nsqd), options=tls) as producer:
        await producer.publish_many("t", [b"a", b"b"])
    async with open_consumer("t", "c", tcp(nsqd), options=tls) as consumer:
        assert sorted(await take(consumer, 2)) == [b"a", b"b"]


# --- AUTH -------------------------------------------------------------------------


async def start_broker(
    nursery: trio.Nursery, pki: Pki, **changes: Unpack[NsqdOptions]
) -> BoundAddresses:
    options: NsqdOptions = {"tls_cert": pki.cert_file, "tls_key": pki.key_file}
    options.update(changes)
    config = NsqdConfig.loopback(**options)
    addresses: BoundAddresses = await nursery.start(serve_nsqd, config)
    return addresses


async def test_auth_secret_lets_the_client_publish_and_consume(
    pki: Pki, nursery: trio.Nursery
) -> None:
    server = await start_auth_server(nursery, {"s3cret": grant()})
    addresses = await start_broker(nursery, pki, auth_http_addresses=(server.address,))
    opts = ConnectionOptions(auth_secret=b"s3cret")
    async with open_producer(tcp(addresses), options=opts) as producer:
        await producer.publish_many("t", [b"one", b"two"])
    async with open_consumer("t", "c", tcp(addresses), options=opts) as consumer:
        assert sorted(await take(consumer, 2)) == [b"one", b"two"]
    assert server.secrets_seen() == ["s3cret", "s3cret"]


async def test_without_a_secret_the_client_refuses_before_any_command(
    pki: Pki, nursery: trio.Nursery
) -> None:
    server = await start_auth_server(nursery, {"s3cret": grant()})
    addresses = await start_broker(nursery, pki, auth_http_addresses=(server.address,))
    async with open_producer(tcp(addresses)) as producer:
        with pytest.raises(NsqError) as refused:
            await producer.publish("t", b"x")
    assert refused.value.code == "E_AUTH_REQUIRED"
    with pytest.raises(NsqError) as not_subscribed:
        async with open_consumer("t", "c", tcp(addresses)):
            pass
    assert not_subscribed.value.code == "E_AUTH_REQUIRED"
    assert server.requests == []
    assert isinstance(not_subscribed.value, client_api.NsqAuthError)
    assert isinstance(not_subscribed.value, client_api.NsqSecurityError)


async def test_auth_goes_through_tls_and_snappy(pki: Pki, nursery: trio.Nursery) -> None:
    server = await start_auth_server(nursery, {"s3cret": grant()})
    addresses = await start_broker(nursery, pki, auth_http_addresses=(server.address,))
    opts = attrs.evolve(options(pki, "authed", tls_v1=True, snappy=True), auth_secret=b"s3cret")
    await publish_and_consume(addresses, opts, (True, True, False))
    assert {request.params["tls"] for request in server.requests} == {"true"}


# --- the handshake's frames, one at a time ------------------------------------------


def test_a_frame_is_handed_out_only_when_whole_and_the_rest_is_held() -> None:
    held = HandshakeBuffer(max_frame_size=1024)
    json_frame = response_frame(b'{"snappy":true}')
    held.feed(json_frame[:3])
    assert held.next_frame() is None  # not even the size yet
    held.feed(json_frame[3:-1])
    assert held.next_frame() is None
    held.feed(json_frame[-1:] + b"\xff\x06")  # the next layer's first bytes
    assert held.next_frame() == json_frame
    assert held.next_frame() is None
    assert held.take_rest() == b"\xff\x06"
    assert len(held) == 0


@pytest.mark.parametrize("codec_name", ["snappy", "deflate"])
def test_bytes_held_when_compression_starts_are_decompressed(codec_name: str) -> None:
    """The compressed OK read together with the JSON answer, a heartbeat after it,
    and the rest of the stream fed later in small pieces."""
    encoder: SnappyEncoder | DeflateEncoder
    if codec_name == "snappy":
        encoder, decoder = SnappyEncoder(), SnappyDecoder()
    else:
        encoder, decoder = DeflateEncoder(6), DeflateDecoder()  # type: ignore[assignment]
    json_frame = response_frame(b'{"snappy":true}')
    compressed = encoder.encode(OK_FRAME + HEARTBEAT_FRAME[:5])
    later = encoder.encode(HEARTBEAT_FRAME[5:])
    held = HandshakeBuffer(max_frame_size=1024)
    held.feed(json_frame + compressed[:7])
    assert held.next_frame() == json_frame
    held.start_codec(Codec(codec_name, encoder, decoder))
    held.feed(compressed[7:])
    assert held.next_frame() == OK_FRAME
    assert held.next_frame() is None  # a heartbeat's first 5 bytes
    for i in range(len(later)):
        held.feed(later[i : i + 1])
    assert held.next_frame() == HEARTBEAT_FRAME
    assert held.take_rest() == b""


@pytest.mark.parametrize("size", [-1, 3, 1025])
def test_an_impossible_frame_size_is_the_parsers_error(size: int) -> None:
    held = HandshakeBuffer(max_frame_size=1024)
    held.feed(struct.pack(">i", size) + b"\x00" * 8)
    with pytest.raises(ProtocolError) as bad:
        held.next_frame()
    assert bad.value.code == "E_BAD_FRAME"


def test_the_codec_hands_out_bounded_pieces_and_never_an_empty_one() -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    codec = Codec("deflate", DeflateEncoder(6), DeflateDecoder(max_output=100_000))
    pieces = list(codec.decode(DeflateEncoder(6).encode(data)))
    assert len(pieces) == 11
    assert all(0 < len(piece) <= 100_000 for piece in pieces)
    assert b"".join(pieces) == data


@pytest.mark.parametrize("codec_name", ["snappy", "deflate"])
async def test_what_follows_the_last_ok_in_one_write_reaches_the_reader(
    codec_name: str, nursery: trio.Nursery
) -> None:
    """A broker (faked here) that sends the JSON answer, the compressed OK and a
    heartbeat in one write: the client answers the heartbeat with a compressed NOP."""
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    answer = {
        "max_rdy_count": 2500,
        "version": "1.3.0",
        "max_msg_timeout": 900000,
        "msg_timeout": 60000,
        "tls_v1": False,
        "deflate": codec_name == "deflate",
        "deflate_level": 3,
        "max_deflate_level": 6,
        "snappy": codec_name == "snappy",
        "sample_rate": 0,
        "auth_required": False,
        "output_buffer_size": 16384,
        "output_buffer_timeout": 250,
    }
    heard: list[bytes] = []

    async def fake_broker() -> None:
        async with listener:
            stream = await listener.accept()
        encoder: SnappyEncoder | DeflateEncoder
        decoder: SnappyDecoder | DeflateDecoder
        if codec_name == "snappy":
            encoder, decoder = SnappyEncoder(), SnappyDecoder()
        else:
            encoder, decoder = DeflateEncoder(3), DeflateDecoder()
        async with stream:
            received = b""
            while len(received) < 17:  # magic, IDENTIFY\n, size
                received += await stream.receive_some(65536)
            (size,) = struct.unpack_from(">i", received, 13)
            while len(received) < 17 + size:
                received += await stream.receive_some(65536)
            assert json.loads(received[17 : 17 + size])[codec_name] is True
            json_frame = response_frame(json.dumps(answer).encode())
            await stream.send_all(json_frame + encoder.encode(OK_FRAME + HEARTBEAT_FRAME))
            plain = decoder.decode(received[17 + size :])
            while plain != b"NOP\n":
                plain += decoder.decode(await stream.receive_some(65536))
            heard.append(plain)

    nursery.start_soon(fake_broker)
    request = IdentifyRequest(**{codec_name: True})  # type: ignore[arg-type]
    with trio.fail_after(10):
        async with open_connection(f"127.0.0.1:{port}", ConnectionOptions(request)) as connection:
            assert connection.identified is not None
            await connection.wait_closed()
    assert heard == [b"NOP\n"]
