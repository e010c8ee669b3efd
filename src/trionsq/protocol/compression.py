"""Stream codecs for NSQ's ``snappy`` and ``deflate`` connection upgrades (sans-IO).

Both directions of an upgraded connection carry one continuous compressed stream; the
broker encodes each buffered write and decodes whatever bytes a socket read returns.

**Snappy** is the snappy *framing format*: a stream identifier chunk
(``\\xff\\x06\\x00\\x00sNaPpY``), then chunks of a one-byte type, a three-byte
little-endian length and a body. Data chunks (``0x00`` compressed, ``0x01`` stored) start
with the masked CRC-32C of their uncompressed bytes and hold at most 65536 uncompressed
bytes. Chunks ``0x80``-``0xfe`` (skippable, padding) are ignored; ``0x02``-``0x7f`` are
reserved and fatal. The framing is parsed here, so input may be split at any byte;
complete data chunks are handed to cramjam (snappy's Rust implementation), which checks
each CRC and decompresses. Each chunk's lengths are checked before any work is done
(at most 65536 bytes out per chunk, roughly 22 bytes out per byte in), and one call
decompresses chunks only up to a cap on its output; complete chunks past it stay
compressed in the decoder until drained, as with deflate.

**Deflate** is raw DEFLATE (RFC 1951, no zlib header or trailer) with a sync flush after
every write, so the peer can decode each write as soon as it arrives. The decoder caps
the bytes one :meth:`DeflateDecoder.decode` call returns (a deflate stream can expand
about 1000 times); input it could not yet expand is kept and drained by later calls,
``decode(b"")`` included, while :attr:`DeflateDecoder.pending` is true.

The cap matters for time as much as for memory: whoever parses the output does work
in proportion to it, so a server that yields between calls stays responsive while a
small compressed write expands into millions of commands.

Any malformed input raises :class:`CompressionError`; a decoder that raised is broken
for good (the connection must be closed).
"""

from __future__ import annotations

import zlib
from typing import Final

import cramjam

__all__ = [
    "DEFAULT_MAX_INFLATE_OUTPUT",
    "MAX_SNAPPY_CHUNK_DATA",
    "SNAPPY_STREAM_IDENTIFIER",
    "CompressionError",
    "DeflateDecoder",
    "DeflateEncoder",
    "SnappyDecoder",
    "SnappyEncoder",
]

SNAPPY_STREAM_IDENTIFIER: Final = b"\xff\x06\x00\x00sNaPpY"
"""The chunk that opens every snappy framed stream."""
MAX_SNAPPY_CHUNK_DATA: Final = 65_536
"""Most uncompressed bytes one snappy data chunk may hold."""
DEFAULT_MAX_INFLATE_OUTPUT: Final = 4 * 1024 * 1024
"""Default cap on the bytes one ``decode`` call returns (both decoders)."""

_CHUNK_HEADER: Final = 4
_CRC_SIZE: Final = 4
_TYPE_COMPRESSED: Final = 0x00
_TYPE_UNCOMPRESSED: Final = 0x01
_TYPE_STREAM_IDENTIFIER: Final = 0xFF
_FIRST_SKIPPABLE: Final = 0x80
_IDENTIFIER_BODY: Final = SNAPPY_STREAM_IDENTIFIER[_CHUNK_HEADER:]
# Worst case of snappy's raw compressor for a full block: 32 + n + n / 6.
_MAX_COMPRESSED_BLOCK: Final = 32 + MAX_SNAPPY_CHUNK_DATA + MAX_SNAPPY_CHUNK_DATA // 6
_MAX_CHUNK_LENGTH: Final = {
    _TYPE_COMPRESSED: _CRC_SIZE + _MAX_COMPRESSED_BLOCK,
    _TYPE_UNCOMPRESSED: _CRC_SIZE + MAX_SNAPPY_CHUNK_DATA,
}
_RAW_DEFLATE_WBITS: Final = -15


class CompressionError(ValueError):
    """The peer sent bytes that are not a valid stream for the negotiated codec."""


class SnappyEncoder:
    """Encode writes as one snappy framed stream; the stream identifier leads the first."""

    __slots__ = ("_started",)

    def __init__(self) -> None:
        self._started = False

    def encode(self, data: bytes | bytearray | memoryview) -> bytes:
        """Return the framed chunks for ``data`` (``b""`` for an empty write).

        Each chunk is compressed unless that would not save space, in which case it is
        stored; writes over 65536 bytes span several chunks.
        """
        if not data:
            return b""
        framed = bytes(cramjam.snappy.compress(bytes(data)))
        if not framed.startswith(SNAPPY_STREAM_IDENTIFIER):  # pragma: no cover - cramjam bug
            raise CompressionError("snappy framed compressor omitted the stream identifier")
        if self._started:
            return framed[len(SNAPPY_STREAM_IDENTIFIER) :]
        self._started = True
        return framed


class SnappyDecoder:
    """Decode a snappy framed stream fed in pieces split at any byte.

    :meth:`decode` returns the data of the chunks completed so far, up to
    ``max_output`` bytes (always at least one complete chunk), and keeps the rest,
    compressed, for the next call: complete chunks past the cap (:attr:`pending`
    is then true) and a partial chunk (at most one chunk header plus ~76 KiB).
    """

    __slots__ = ("_buffer", "_failed", "_more", "_started", "max_output")

    def __init__(self, max_output: int = DEFAULT_MAX_INFLATE_OUTPUT) -> None:
        if max_output < 1:
            raise ValueError(f"max_output must be positive, got {max_output}")
        self.max_output = max_output
        self._buffer = bytearray()
        self._started = False
        self._more = False
        self._failed: CompressionError | None = None

    @property
    def buffered(self) -> int:
        """Compressed bytes held: chunks past the cap, and one not yet complete."""
        return len(self._buffer)

    @property
    def pending(self) -> bool:
        """Complete chunks were held back by :attr:`max_output`: call ``decode(b"")``."""
        return self._more

    def decode(self, data: bytes | bytearray | memoryview) -> bytes:
        """Feed ``data``; return the uncompressed bytes of the chunks it completed,
        up to :attr:`max_output` (one chunk may take a call past it by < 64 KiB)."""
        if self._failed is not None:
            raise CompressionError(f"snappy: stream already failed: {self._failed}")
        try:
            return self._decode(data)
        except CompressionError as exc:
            self._failed = exc
            self._buffer = bytearray()
            raise

    def _decode(self, data: bytes | bytearray | memoryview) -> bytes:
        buffer = self._buffer
        buffer += data
        view = memoryview(buffer)
        size = len(buffer)
        pos = 0
        chunks: list[memoryview] = []
        room = self.max_output
        self._more = False
        try:
            while size - pos >= _CHUNK_HEADER:
                if room <= 0:
                    self._more = True  # the rest waits, compressed, for the next call
                    break
                chunk_type = buffer[pos]
                length = buffer[pos + 1] | buffer[pos + 2] << 8 | buffer[pos + 3] << 16
                body_start = pos + _CHUNK_HEADER
                end = body_start + length
                self._check_chunk(chunk_type, length, view[body_start : min(end, size)])
                if end > size:
                    break
                if chunk_type == _TYPE_STREAM_IDENTIFIER:
                    self._started = True  # its body was checked complete just above
                elif chunk_type < _FIRST_SKIPPABLE:
                    if chunk_type == _TYPE_COMPRESSED:
                        room -= _check_compressed_length(view[body_start + _CRC_SIZE : end])
                    else:
                        room -= length - _CRC_SIZE
                    chunks.append(view[pos:end])
                pos = end
            out = _decode_chunks(chunks) if chunks else b""
        finally:
            chunks.clear()
            view.release()
        del buffer[:pos]
        return out

    def _check_chunk(self, chunk_type: int, length: int, body: memoryview) -> None:
        """Reject a chunk as soon as its header (and the body received so far) show it bad."""
        if not self._started and chunk_type != _TYPE_STREAM_IDENTIFIER:
            raise CompressionError(
                f"snappy: stream must start with the stream identifier, got chunk type "
                f"0x{chunk_type:02x}"
            )
        if chunk_type == _TYPE_STREAM_IDENTIFIER:
            if length != len(_IDENTIFIER_BODY) or body != _IDENTIFIER_BODY[: len(body)]:
                raise CompressionError("snappy: bad stream identifier")
        elif chunk_type in _MAX_CHUNK_LENGTH:
            if length < _CRC_SIZE:
                raise CompressionError(f"snappy: chunk length {length} too short for its CRC")
            limit = _MAX_CHUNK_LENGTH[chunk_type]
            if length > limit:
                raise CompressionError(
                    f"snappy: chunk length {length} over the format's maximum {limit} "
                    f"for chunk type 0x{chunk_type:02x}"
                )
        elif chunk_type < _FIRST_SKIPPABLE:
            raise CompressionError(f"snappy: reserved unskippable chunk type 0x{chunk_type:02x}")


def _check_compressed_length(block: memoryview) -> int:
    """The length a compressed block claims; refused if over one chunk's worth."""
    try:
        claimed = cramjam.snappy.decompress_raw_len(block)
    except cramjam.DecompressionError as exc:
        raise CompressionError(f"snappy: corrupt compressed chunk: {exc}") from None
    if claimed > MAX_SNAPPY_CHUNK_DATA:
        raise CompressionError(
            f"snappy: compressed chunk claims {claimed} bytes, over the maximum "
            f"{MAX_SNAPPY_CHUNK_DATA}"
        )
    return int(claimed)


def _decode_chunks(chunks: list[memoryview]) -> bytes:
    """Decompress complete, pre-checked data chunks; cramjam verifies every CRC."""
    stream = b"".join([SNAPPY_STREAM_IDENTIFIER, *chunks])
    try:
        return bytes(cramjam.snappy.decompress(stream))
    except cramjam.DecompressionError as exc:
        raise CompressionError(str(exc)) from None


class DeflateEncoder:
    """Raw DEFLATE at ``level`` (0-9), sync-flushed after every write."""

    __slots__ = ("_compressor", "level")

    def __init__(self, level: int = 6) -> None:
        if not 0 <= level <= 9:
            raise ValueError(f"deflate level must be 0..9, got {level}")
        self.level = level
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, _RAW_DEFLATE_WBITS)

    def encode(self, data: bytes | bytearray | memoryview) -> bytes:
        """Return ``data`` compressed and sync-flushed (``b""`` for an empty write)."""
        if not data:
            return b""
        compressor = self._compressor
        return compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)


class DeflateDecoder:
    """Inflate a raw DEFLATE stream fed in pieces, returning at most ``max_output`` a call.

    Input that would expand past the cap is kept (compressed) inside the decoder;
    :attr:`pending` is then true and the caller drains it with further calls, e.g.
    ``decode(b"")``, before or while feeding more. Memory held is thus the compressed
    input not yet expanded plus zlib's 32 KiB window, never the expanded excess.
    """

    __slots__ = ("_decompressor", "_full", "_tail", "max_output")

    def __init__(self, max_output: int = DEFAULT_MAX_INFLATE_OUTPUT) -> None:
        if max_output < 1:
            raise ValueError(f"max_output must be positive, got {max_output}")
        self.max_output = max_output
        self._decompressor = zlib.decompressobj(_RAW_DEFLATE_WBITS)
        self._tail = b""
        self._full = False

    @property
    def pending(self) -> bool:
        """Whether more output may be ready without new input.

        True when input was held back, or when the last call filled :attr:`max_output`
        exactly (zlib may hold the rest of a match it was copying).
        """
        return self._full or bool(self._tail)

    def decode(self, data: bytes | bytearray | memoryview) -> bytes:
        """Feed ``data``; return up to :attr:`max_output` inflated bytes."""
        tail = self._tail + data if self._tail else bytes(data)
        if not tail and not self._full:
            return b""
        decompressor = self._decompressor
        try:
            out = decompressor.decompress(tail, self.max_output)
        except zlib.error as exc:
            raise CompressionError(f"deflate: {exc}") from None
        self._tail = decompressor.unconsumed_tail
        self._full = len(out) >= self.max_output
        if decompressor.eof and (decompressor.unused_data or self._tail):
            raise CompressionError("deflate: data after the end of the deflate stream")
        return out
