"""The byte layers IDENTIFY may put on a connection: TLS, then snappy or deflate.

Sans-IO, so the connection keeps reading and writing its descriptor directly
(design §8: the plain path pays nothing for this module). Inbound raw bytes go
TLS-decrypt -> decompress -> protocol; outbound bytes go compress (one flush per
write, deflate sync-flushed) -> TLS-encrypt -> socket, as nsqd stacks its
``tls.Conn`` under its snappy/flate readers and writers (spec §4.1, §7).

TLS runs on :class:`ssl.SSLObject` over two :class:`ssl.MemoryBIO`: the caller feeds
what it read and writes what :meth:`TlsLayer.outgoing` hands back. A connection
without layers has no :class:`Transport` at all.

Memory and work stay bounded per read: TLS turns at most one read into plaintext,
and snappy or deflate hand back at most :data:`MAX_DECODED` bytes per call (about
what two plain reads bring); the rest waits compressed in the decoder
(:attr:`Transport.pending`) until drained with ``decode(b"")``. The caller yields
between drains and reads no more from the socket until nothing is pending, so a
small compressed write that expands into millions of commands is parsed a bounded
piece at a time while the other connections are served.
"""

from __future__ import annotations

import ssl
from typing import Final

from ..protocol.compression import (
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
)
from .tls import cipher_suite_name, peer_common_name, tls_version_name

__all__ = ["MAX_DECODED", "TlsLayer", "Transport"]

_TLS_READ: Final = 65536
MAX_DECODED: Final = 131072
"""Most decompressed bytes one :meth:`Transport.decode` returns: two plain reads' worth.
Measured: 64 KiB cost deflate MPUB ~8% throughput (more compressor flushes and split
bodies); 128 KiB costs nothing measurable, and a piece of ``NOP``s parses in ~40 ms."""
Buffer = bytes | bytearray | memoryview


class TlsLayer:
    """A server-side TLS session over memory buffers: feed ciphertext, read plaintext."""

    __slots__ = ("_incoming", "_outgoing", "_ssl", "peer_closed")

    def __init__(self, context: ssl.SSLContext) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.peer_closed = False
        """The client ended the session (close_notify): its stream is at EOF."""

    def feed(self, data: Buffer) -> None:
        """Ciphertext read from the socket."""
        self._incoming.write(data)

    def handshake(self) -> bool:
        """Advance the handshake; True once done. Raises :class:`ssl.SSLError`."""
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            return False
        return True

    def outgoing(self) -> bytes:
        """Ciphertext to send (handshake flights, records, alerts, tickets)."""
        return self._outgoing.read()

    @property
    def wants_write(self) -> bool:
        """TLS produced bytes of its own while reading (e.g. a key update reply)."""
        return self._outgoing.pending > 0

    def decrypt(self, data: Buffer) -> bytes:
        """Feed ``data`` (may be empty) and return every plaintext byte now readable."""
        if data:
            self._incoming.write(data)
        read = self._ssl.read
        pieces: list[bytes] = []
        while True:
            try:
                piece = read(_TLS_READ)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.peer_closed = True
                break
            if not piece:
                self.peer_closed = True
                break
            pieces.append(piece)
        if len(pieces) == 1:
            return pieces[0]
        return b"".join(pieces)

    def encrypt(self, data: Buffer) -> bytes:
        """Records for ``data``, after anything TLS already had to send."""
        view = memoryview(data)
        write = self._ssl.write
        sent = 0
        while sent < len(view):
            sent += write(view[sent:])
        return self._outgoing.read()

    # ---- what /stats and AUTH want to know

    @property
    def version(self) -> str:
        return tls_version_name(self._ssl.version())

    @property
    def cipher_suite(self) -> str:
        cipher = self._ssl.cipher()
        return cipher_suite_name(cipher[0] if cipher else None)

    @property
    def negotiated_protocol(self) -> str:
        return self._ssl.selected_alpn_protocol() or ""

    @property
    def peer_common_name(self) -> str:
        return peer_common_name(self._ssl.getpeercert())  # type: ignore[arg-type]


class Transport:
    """The layers negotiated on one connection, applied in nsqd's order."""

    __slots__ = ("_decoder", "_encoder", "tls")

    def __init__(self) -> None:
        self.tls: TlsLayer | None = None
        self._decoder: SnappyDecoder | DeflateDecoder | None = None
        self._encoder: SnappyEncoder | DeflateEncoder | None = None

    @property
    def compressed(self) -> bool:
        return self._encoder is not None

    def compress_snappy(self) -> None:
        """Everything after this is a snappy framed stream, both ways."""
        self._decoder, self._encoder = SnappyDecoder(MAX_DECODED), SnappyEncoder()

    def compress_deflate(self, level: int) -> None:
        """Everything after this is raw DEFLATE at ``level``, both ways."""
        self._decoder, self._encoder = DeflateDecoder(MAX_DECODED), DeflateEncoder(level)

    def decode(self, data: Buffer) -> bytes:
        """Raw bytes read (``b""``: nothing new, drain what is held) -> plaintext.

        Raises :class:`ssl.SSLError` or :class:`~..protocol.compression.CompressionError`
        for bytes that are not a valid stream; the connection must then close.
        """
        tls = self.tls
        plain = tls.decrypt(data) if tls is not None else bytes(data)
        decoder = self._decoder
        if decoder is not None and (plain or self.pending):
            return decoder.decode(plain)
        return plain

    @property
    def pending(self) -> bool:
        """Decompressed output was held back by the per-call bound: call ``decode(b"")``."""
        decoder = self._decoder
        return decoder is not None and decoder.pending

    @property
    def wants_write(self) -> bool:
        """The layers have bytes of their own to send."""
        return self.tls is not None and self.tls.wants_write

    @property
    def peer_closed(self) -> bool:
        """The client ended its TLS session: treat as EOF."""
        return self.tls is not None and self.tls.peer_closed

    def encode(self, data: Buffer) -> bytes:
        """One buffered write -> the bytes to put on the socket (one compressor flush)."""
        encoder = self._encoder
        out = encoder.encode(data) if encoder is not None else bytes(data)
        tls = self.tls
        if tls is not None:
            return tls.encrypt(out)
        return out
