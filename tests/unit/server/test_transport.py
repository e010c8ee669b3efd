"""The connection's byte layers without sockets: a client SSLObject on memory BIOs
talks to :class:`TlsLayer`; compression round-trips through :class:`Transport`."""

from __future__ import annotations

import ssl
import zlib

import pytest
import trustme

from trionsq.protocol.compression import (
    CompressionError,
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
)
from trionsq.server.tls import cipher_suite_name, peer_common_name, tls_version_name
from trionsq.server.transport import MAX_DECODED, TlsLayer, Transport


class Peer:
    """The client's end of a TLS session in memory."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")

    def read(self, data: bytes) -> bytes:
        self.incoming.write(data)
        out = b""
        while True:
            try:
                out += self.tls.read(65536)
            except ssl.SSLWantReadError:
                return out


@pytest.fixture(scope="module")
def authority() -> trustme.CA:
    return trustme.CA()


def _contexts(authority: trustme.CA) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("localhost").configure_cert(server)
    client = ssl.create_default_context()
    authority.configure_trust(client)
    return server, client


def _handshake(layer: TlsLayer, peer: Peer) -> None:
    for _ in range(10):
        try:
            peer.tls.do_handshake()
            client_done = True
        except ssl.SSLWantReadError:
            client_done = False
        layer.feed(peer.outgoing.read())
        server_done = layer.handshake()
        peer.incoming.write(layer.outgoing())
        if client_done and server_done:
            return
    raise AssertionError("handshake did not finish")


def test_tls_round_trip_and_names(authority: trustme.CA) -> None:
    server, client = _contexts(authority)
    layer, peer = TlsLayer(server), Peer(client)
    _handshake(layer, peer)
    assert peer.read(layer.encrypt(b"OK" * 50_000)) == b"OK" * 50_000
    peer.tls.write(b"PUB t\n")
    assert layer.decrypt(peer.outgoing.read()) == b"PUB t\n"
    assert layer.decrypt(b"") == b""  # nothing new, nothing held
    assert layer.version == "TLS1.3"
    assert layer.cipher_suite.startswith("Unknown 48")  # 0x13xx: nsqd names no TLS 1.3 suite
    assert (layer.negotiated_protocol, layer.peer_common_name) == ("", "")
    assert not layer.peer_closed
    with pytest.raises(ssl.SSLWantReadError):
        peer.tls.unwrap()  # close_notify, then it waits for ours
    assert layer.decrypt(peer.outgoing.read()) == b""
    assert layer.peer_closed


def test_garbage_fails_the_handshake(authority: trustme.CA) -> None:
    layer = TlsLayer(_contexts(authority)[0])
    layer.feed(b"GET / HTTP/1.1\r\n\r\n")
    with pytest.raises(ssl.SSLError):
        layer.handshake()


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
def test_compression_both_ways(codec: str) -> None:
    transport = Transport()
    if codec == "snappy":
        transport.compress_snappy()
        encoder: SnappyEncoder | DeflateEncoder = SnappyEncoder()
        decoder: SnappyDecoder | DeflateDecoder = SnappyDecoder()
    else:
        transport.compress_deflate(3)
        encoder, decoder = DeflateEncoder(3), DeflateDecoder()
    assert transport.compressed
    payload = b"MPUB t\n" + bytes(range(256)) * 1000
    wire = encoder.encode(payload)
    received = transport.decode(wire[:10]) + transport.decode(wire[10:])
    while transport.pending:
        received += transport.decode(b"")
    assert received == payload
    assert decoder.decode(transport.encode(b"OK")) == b"OK"
    assert decoder.decode(transport.encode(b"again")) == b"again"  # one flush per write
    assert transport.encode(b"") == b""


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
def test_output_is_bounded_and_drained(codec: str) -> None:
    """A small bomb comes out in pieces of about two plain reads, drained by decode(b"")."""
    transport = Transport()
    size = 20_000_000
    if codec == "snappy":
        transport.compress_snappy()
        bomb = SnappyEncoder().encode(b"\0" * size)
    else:
        transport.compress_deflate(6)
        compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
        bomb = compressor.compress(b"\0" * size) + compressor.flush(zlib.Z_SYNC_FLUSH)
    pieces = [transport.decode(bomb)]
    while transport.pending:
        pieces.append(transport.decode(b""))
    assert max(len(p) for p in pieces) <= MAX_DECODED
    assert sum(len(p) for p in pieces) == size
    assert len(pieces) >= size // MAX_DECODED


def test_corrupt_compressed_input_raises() -> None:
    transport = Transport()
    transport.compress_snappy()
    with pytest.raises(CompressionError):
        transport.decode(b"\x07\x00\x00\x00")


def test_tls_then_compression(authority: trustme.CA) -> None:
    """Outbound: compress, then encrypt; inbound the reverse."""
    server, client = _contexts(authority)
    layer, peer = TlsLayer(server), Peer(client)
    _handshake(layer, peer)
    transport = Transport()
    transport.tls = layer
    transport.compress_snappy()
    peer.tls.write(SnappyEncoder().encode(b"NOP\n"))
    assert transport.decode(peer.outgoing.read()) == b"NOP\n"
    assert SnappyDecoder().decode(peer.read(transport.encode(b"OK"))) == b"OK"
    assert not transport.wants_write


def test_names_as_nsqd_prints_them() -> None:
    assert tls_version_name("TLSv1.2") == "TLS1.2"
    assert tls_version_name("TLSv1") == "TLS1.0"
    assert tls_version_name("SSLv3") == "Unknown 768"
    assert tls_version_name(None) == ""
    assert (
        cipher_suite_name("ECDHE-RSA-AES128-GCM-SHA256") == "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
    )
    assert cipher_suite_name("AES128-SHA") == "TLS_RSA_WITH_AES_128_CBC_SHA"
    assert cipher_suite_name("TLS_AES_256_GCM_SHA384") == "Unknown 4866"
    assert cipher_suite_name(None) == ""
    subject = ((("countryName", "NL"),), (("commonName", "worker-7"),))
    assert peer_common_name({"subject": subject}) == "worker-7"
    assert peer_common_name({}) == ""
