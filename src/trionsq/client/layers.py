"""The layers IDENTIFY's answer puts on a client connection: TLS, then snappy or deflate.

nsqd upgrades in a fixed order (spec tcp-protocol §4.1): after the JSON answer, TLS
(then ``OK`` over TLS), then snappy or deflate (then ``OK`` compressed); AUTH and
everything else go through every layer. Each ``OK`` may arrive in the same read as
the frame before it, yet belongs to the next layer, so until the upgrades are done
frames are taken one at a time and whatever follows one is held back for the next
layer (:class:`HandshakeBuffer`, sans-IO). :class:`Layers` is the small IO part: it
owns the stream (the socket, or :class:`trio.SSLStream` over it) and the codec.

After the handshake, the connection reads and writes through :attr:`Layers.stream`
and :attr:`Layers.codec` itself; a connection without layers keeps its direct writes
to the descriptor.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

import trio

from ..protocol.errors import ProtocolError

if TYPE_CHECKING:
    import ssl
    from collections.abc import Iterator

    from ..protocol.compression import (
        DeflateDecoder,
        DeflateEncoder,
        SnappyDecoder,
        SnappyEncoder,
    )
    from ..protocol.identify import IdentifyResponse

__all__ = ["LOST", "Codec", "HandshakeBuffer", "Layers"]

READ_SIZE: Final = 65536
LOST: Final[tuple[type[Exception], ...]] = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    OSError,
    ProtocolError,
)
"""How a connection without compression is lost while it runs: TLS failures
included, and a frame the parser refuses (the stream cannot be resynchronised)."""
_SIZE: Final = struct.Struct(">i")
Buffer = bytes | bytearray | memoryview


class Codec:
    """The compression both directions share after snappy or deflate was negotiated."""

    __slots__ = ("decoder", "encoder", "name")

    def __init__(
        self,
        name: str,
        encoder: SnappyEncoder | DeflateEncoder,
        decoder: SnappyDecoder | DeflateDecoder,
    ) -> None:
        self.name = name
        self.encoder = encoder
        self.decoder = decoder

    @classmethod
    def negotiated(cls, answer: IdentifyResponse) -> Codec | None:
        """The codec the broker agreed to (nsqd never agrees to both), or None.

        The codecs (and cramjam, ~2 MiB) are imported only here, so clients that
        never compress do not carry them."""
        if not (answer.snappy or answer.deflate):
            return None
        from ..protocol import compression

        if answer.snappy:
            return cls("snappy", compression.SnappyEncoder(), compression.SnappyDecoder())
        encoder = compression.DeflateEncoder(answer.deflate_level)
        return cls("deflate", encoder, compression.DeflateDecoder())

    def encode(self, data: Buffer) -> bytes:
        """One write's bytes, compressed (and flushed, for deflate)."""
        return self.encoder.encode(data)

    def decode(self, data: Buffer) -> Iterator[bytes]:
        """The plain bytes of one read, in pieces no larger than the decoder's bound
        (it holds the rest compressed until drained); empty pieces are skipped, as
        ``b""`` means EOF to the frame parser."""
        decoder = self.decoder
        plain = decoder.decode(data)
        if plain:
            yield plain
        while decoder.pending:
            plain = decoder.decode(b"")
            if plain:
                yield plain


class HandshakeBuffer:
    """Plain bytes read during the handshake, handed out one whole frame at a time.

    Bytes fed after :meth:`start_codec` are decompressed first; the bytes held when
    it is called were read through the old layers but sent through the new one, so
    they are decompressed then.
    """

    __slots__ = ("_codec", "_held", "max_frame_size")

    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        self._held = bytearray()
        self._codec: Codec | None = None

    def __len__(self) -> int:
        return len(self._held)

    def feed(self, data: Buffer) -> None:
        """Bytes read from the stream (compressed once a codec was started)."""
        if self._codec is None:
            self._held += data
        else:
            for plain in self._codec.decode(data):
                self._held += plain

    def start_codec(self, codec: Codec) -> None:
        """Decompress from here on, the bytes already held included."""
        held, self._held = bytes(self._held), bytearray()
        self._codec = codec
        if held:
            self.feed(held)

    def next_frame(self) -> bytes | None:
        """The next whole frame (size field included), or None until more is fed.

        Raises:
            ProtocolError: the size field is impossible (as the frame parser says).
        """
        held = self._held
        if len(held) < 4:
            return None
        (size,) = _SIZE.unpack_from(held)
        if size > self.max_frame_size:
            raise ProtocolError("E_BAD_FRAME", f"frame size {size} > {self.max_frame_size}")
        if size < 4:
            raise ProtocolError("E_BAD_FRAME", f"frame size {size} < 4")
        end = 4 + size
        if len(held) < end:
            return None
        frame = bytes(held[:end])
        del held[:end]
        return frame

    def take_rest(self) -> bytes:
        """What followed the last frame taken: the start of the connection's stream."""
        rest, self._held = bytes(self._held), bytearray()
        return rest


class Layers:
    """The connection's stream while IDENTIFY's upgrades are applied."""

    def __init__(self, stream: trio.SocketStream, max_frame_size: int) -> None:
        self.socket = stream
        self.stream: trio.abc.Stream = stream
        """The socket, or TLS over it: what the connection reads and writes."""
        self.codec: Codec | None = None
        self.tls = False
        self.held = HandshakeBuffer(max_frame_size)

    @property
    def upgraded(self) -> bool:
        """Bytes must go through :attr:`stream` and :attr:`codec`, not the descriptor."""
        return self.tls or self.codec is not None

    @property
    def lost(self) -> tuple[type[Exception], ...]:
        """What reading or writing through these layers raises once the connection is
        gone: :data:`LOST`, and a corrupt compressed stream."""
        if self.codec is None:
            return LOST
        from ..protocol.compression import CompressionError

        return (*LOST, CompressionError)

    async def send(self, data: bytes) -> None:
        """Handshake bytes (MAGIC, IDENTIFY, AUTH) through the layers in place."""
        if self.codec is not None:
            data = self.codec.encode(data)
        await self.stream.send_all(data)

    async def next_frame(self) -> bytes | None:
        """The next whole frame (None if the broker closed the connection first);
        the bytes after it stay held."""
        while (frame := self.held.next_frame()) is None:
            data = await self.stream.receive_some(READ_SIZE)
            if not data:
                return None
            self.held.feed(data)
        return frame

    async def start_tls(self, context: ssl.SSLContext, server_hostname: str) -> None:
        """The TLS client handshake; the broker's ``OK`` comes through it.

        Raises:
            ProtocolError: the broker sent bytes before the handshake.
            trio.BrokenResourceError: the handshake failed (its ``__cause__`` is the
                :class:`ssl.SSLError`).
        """
        if self.held:
            raise ProtocolError(
                "E_IDENTIFY_FAILED", f"{len(self.held)} unexpected bytes before the TLS handshake"
            )
        ssl_stream = trio.SSLStream(self.socket, context, server_hostname=server_hostname)
        self.stream = ssl_stream
        self.tls = True
        await ssl_stream.do_handshake()

    def start_codec(self, codec: Codec) -> None:
        """Compress both ways from here on; what was read past the last frame is the
        start of the compressed stream."""
        self.codec = codec
        self.held.start_codec(codec)
