"""Snappy framing and raw deflate codecs for NSQ's compression upgrades."""

from __future__ import annotations

import os
import random
import zlib

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trionsq.protocol.compression import (
    MAX_SNAPPY_CHUNK_DATA,
    SNAPPY_STREAM_IDENTIFIER,
    CompressionError,
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
)

# --- a reference CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) for hand-built chunks


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def chunk(chunk_type: int, body: bytes) -> bytes:
    return bytes([chunk_type]) + len(body).to_bytes(3, "little") + body


def stored_chunk(data: bytes, crc: int | None = None) -> bytes:
    crc = masked_crc(data) if crc is None else crc
    return chunk(0x01, crc.to_bytes(4, "little") + data)


def compressed_chunk(data: bytes) -> bytes:
    body = bytes(cramjam.snappy.compress_raw(data))
    return chunk(0x00, masked_crc(data).to_bytes(4, "little") + body)


def chunks_of(stream: bytes) -> list[tuple[int, bytes]]:
    out = []
    pos = 0
    while pos < len(stream):
        length = int.from_bytes(stream[pos + 1 : pos + 4], "little")
        out.append((stream[pos], stream[pos + 4 : pos + 4 + length]))
        pos += 4 + length
    assert pos == len(stream)
    return out


def feed(decoder: SnappyDecoder | DeflateDecoder, stream: bytes, cuts: list[int]) -> bytes:
    out = []
    last = 0
    for cut in [*sorted(cuts), len(stream)]:
        out.append(decoder.decode(stream[last:cut]))
        last = cut
    return b"".join(out)


def test_reference_crc32c_known_vector() -> None:
    assert crc32c(b"123456789") == 0xE3069283


# --- snappy


def test_snappy_stream_identifier_leads_first_write_only() -> None:
    enc = SnappyEncoder()
    first = enc.encode(b"OK")
    second = enc.encode(b"more")
    assert first.startswith(SNAPPY_STREAM_IDENTIFIER)
    assert not second.startswith(SNAPPY_STREAM_IDENTIFIER)
    assert SnappyDecoder().decode(first + second) == b"OKmore"


def test_snappy_empty_write_is_empty() -> None:
    enc = SnappyEncoder()
    assert enc.encode(b"") == b""
    dec = SnappyDecoder()
    assert dec.decode(b"") == b""
    stream = enc.encode(b"x") + enc.encode(b"") + enc.encode(b"y")
    assert dec.decode(stream) == b"xy"


def test_snappy_chunk_kinds() -> None:
    compressible = SnappyEncoder().encode(b"a" * 1000)
    assert [t for t, _ in chunks_of(compressible)] == [0xFF, 0x00]
    random_data = os.urandom(1000)
    incompressible = SnappyEncoder().encode(random_data)
    kinds = chunks_of(incompressible)
    assert [t for t, _ in kinds] == [0xFF, 0x01]
    assert kinds[1][1] == masked_crc(random_data).to_bytes(4, "little") + random_data


def test_snappy_large_payload_spans_several_chunks() -> None:
    data = os.urandom(3 * MAX_SNAPPY_CHUNK_DATA // 2) + b"z" * (2 * MAX_SNAPPY_CHUNK_DATA + 17)
    stream = SnappyEncoder().encode(data)
    kinds = chunks_of(stream)
    assert len(kinds) >= 5  # identifier + at least four data chunks
    assert SnappyDecoder().decode(stream) == data
    assert bytes(cramjam.snappy.decompress(stream)) == data


def test_snappy_one_byte_at_a_time() -> None:
    enc = SnappyEncoder()
    data = [b"hello " * 50, os.urandom(300), b"", b"tail"]
    stream = b"".join(enc.encode(d) for d in data)
    dec = SnappyDecoder()
    out = b"".join(dec.decode(stream[i : i + 1]) for i in range(len(stream)))
    assert out == b"".join(data)
    assert dec.buffered == 0


@settings(max_examples=150, deadline=None)
@given(
    writes=st.lists(st.binary(max_size=3000), max_size=8),
    repeat=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_snappy_round_trip_random_splits(writes: list[bytes], repeat: int, seed: int) -> None:
    writes = [w * repeat for w in writes]
    enc = SnappyEncoder()
    stream = b"".join(enc.encode(w) for w in writes)
    rng = random.Random(seed)
    cuts = [rng.randrange(len(stream) + 1) for _ in range(rng.randrange(10))]
    assert feed(SnappyDecoder(), stream, cuts) == b"".join(writes)
    if stream:
        assert bytes(cramjam.snappy.decompress(stream)) == b"".join(writes)


@settings(max_examples=50, deadline=None)
@given(data=st.binary(max_size=200_000), seed=st.integers(0, 2**32 - 1))
def test_snappy_decodes_cramjam_framed_output(data: bytes, seed: int) -> None:
    stream = bytes(cramjam.snappy.compress(data))
    rng = random.Random(seed)
    cuts = [rng.randrange(len(stream) + 1) for _ in range(5)]
    assert feed(SnappyDecoder(), stream, cuts) == data


def test_snappy_decodes_cramjam_output_large() -> None:
    data = b"".join(os.urandom(50) * 4 for _ in range(2000))  # 400 KB, compressible
    stream = bytes(cramjam.snappy.compress(data))
    assert SnappyDecoder().decode(stream) == data


def test_snappy_hand_built_chunks_and_repeated_identifier() -> None:
    stream = (
        SNAPPY_STREAM_IDENTIFIER
        + stored_chunk(b"abc")
        + compressed_chunk(b"d" * 100)
        + SNAPPY_STREAM_IDENTIFIER
        + stored_chunk(b"")
        + stored_chunk(b"e")
    )
    assert SnappyDecoder().decode(stream) == b"abc" + b"d" * 100 + b"e"


@pytest.mark.parametrize("chunk_type", [0x80, 0x9A, 0xFD, 0xFE])
def test_snappy_skippable_and_padding_chunks_ignored(chunk_type: int) -> None:
    stream = (
        SNAPPY_STREAM_IDENTIFIER
        + chunk(chunk_type, b"\x00" * 70_000)
        + stored_chunk(b"data")
        + chunk(chunk_type, b"")
    )
    dec = SnappyDecoder()
    assert feed(dec, stream, [5, 100, 70_003, 70_010]) == b"data"
    assert dec.buffered == 0


@pytest.mark.parametrize("chunk_type", [0x02, 0x10, 0x7F])
def test_snappy_reserved_unskippable_chunk_is_error(chunk_type: int) -> None:
    dec = SnappyDecoder()
    assert dec.decode(SNAPPY_STREAM_IDENTIFIER) == b""
    with pytest.raises(CompressionError, match="reserved unskippable"):
        dec.decode(chunk(chunk_type, b"xxxx"))


def test_snappy_reserved_chunk_rejected_from_header_alone() -> None:
    dec = SnappyDecoder()
    assert dec.decode(SNAPPY_STREAM_IDENTIFIER + b"\x05\xff\xff") == b""  # header partial
    with pytest.raises(CompressionError, match="reserved"):
        dec.decode(b"\xff")  # header complete, body (16 MiB claimed) never needed


@pytest.mark.parametrize("compressed", [False, True])
def test_snappy_corrupted_crc_is_error(compressed: bool) -> None:
    data = b"payload " * 20
    good = compressed_chunk(data) if compressed else stored_chunk(data)
    bad = bytearray(good)
    bad[5] ^= 0x40  # inside the CRC
    assert SnappyDecoder().decode(SNAPPY_STREAM_IDENTIFIER + good) == data
    dec = SnappyDecoder()
    with pytest.raises(CompressionError, match="checksum"):
        dec.decode(SNAPPY_STREAM_IDENTIFIER + bytes(bad))
    with pytest.raises(CompressionError, match="already failed"):
        dec.decode(b"")


def test_snappy_corrupted_data_is_error() -> None:
    stream = bytearray(SnappyEncoder().encode(os.urandom(500)))
    stream[-1] ^= 1  # stored chunk data: CRC no longer matches
    with pytest.raises(CompressionError):
        SnappyDecoder().decode(bytes(stream))


@pytest.mark.parametrize(
    "start",
    [
        b"\xff\x06\x00\x00sNaPpZ",  # wrong body
        b"\xff\x07\x00\x00sNaPpY!",  # wrong length
        b"\xff\x06\x00\x00SNAPPY",
        stored_chunk(b"no identifier first"),
        chunk(0xFE, b"padding before identifier"),
    ],
)
def test_snappy_bad_stream_identifier_is_error(start: bytes) -> None:
    with pytest.raises(CompressionError, match="identifier"):
        SnappyDecoder().decode(start)


def test_snappy_bad_identifier_detected_before_complete() -> None:
    dec = SnappyDecoder()
    with pytest.raises(CompressionError, match="identifier"):
        dec.decode(b"\xff\x06\x00\x00sX")


def test_snappy_oversized_chunk_refused_from_header() -> None:
    dec = SnappyDecoder()
    dec.decode(SNAPPY_STREAM_IDENTIFIER)
    with pytest.raises(CompressionError, match="over the format's maximum"):
        dec.decode(b"\x01" + (MAX_SNAPPY_CHUNK_DATA + 5).to_bytes(3, "little"))
    dec = SnappyDecoder()
    dec.decode(SNAPPY_STREAM_IDENTIFIER)
    with pytest.raises(CompressionError, match="over the format's maximum"):
        dec.decode(b"\x00\xff\xff\xff")


def test_snappy_stored_chunk_at_maximum_is_accepted() -> None:
    data = os.urandom(MAX_SNAPPY_CHUNK_DATA)
    assert SnappyDecoder().decode(SNAPPY_STREAM_IDENTIFIER + stored_chunk(data)) == data


def test_snappy_compressed_chunk_claiming_too_much_is_error() -> None:
    data = b"q" * (MAX_SNAPPY_CHUNK_DATA + 1)
    body = bytes(cramjam.snappy.compress_raw(data))
    bad = chunk(0x00, masked_crc(data).to_bytes(4, "little") + body)
    with pytest.raises(CompressionError, match="claims"):
        SnappyDecoder().decode(SNAPPY_STREAM_IDENTIFIER + bad)


def test_snappy_short_data_chunk_is_error() -> None:
    with pytest.raises(CompressionError, match="too short"):
        SnappyDecoder().decode(SNAPPY_STREAM_IDENTIFIER + chunk(0x01, b"ab"))


def test_snappy_garbage_compressed_body_is_error() -> None:
    with pytest.raises(CompressionError):
        SnappyDecoder().decode(SNAPPY_STREAM_IDENTIFIER + chunk(0x00, b"\x00" * 4 + b"\xff" * 9))


# --- deflate


@pytest.mark.parametrize("level", [0, 1, 6, 9])
def test_deflate_round_trip_each_write_decodable_at_once(level: int) -> None:
    enc = DeflateEncoder(level)
    dec = DeflateDecoder()
    for payload in [b"OK", b"hello " * 1000, os.urandom(5000), b"x"]:
        assert dec.decode(enc.encode(payload)) == payload
    assert not dec.pending


def test_deflate_empty_write() -> None:
    enc = DeflateEncoder(6)
    assert enc.encode(b"") == b""
    dec = DeflateDecoder()
    assert dec.decode(b"") == b""
    assert dec.decode(enc.encode(b"a") + enc.encode(b"") + enc.encode(b"b")) == b"ab"


@pytest.mark.parametrize("level", [-1, 10])
def test_deflate_bad_level(level: int) -> None:
    with pytest.raises(ValueError, match="level"):
        DeflateEncoder(level)


def test_deflate_output_is_raw_and_sync_flushed() -> None:
    out = DeflateEncoder(6).encode(b"hello hello hello")
    assert out.endswith(b"\x00\x00\xff\xff")  # sync flush marker
    # no zlib header: a zlib decoder refuses it, a raw inflater accepts it
    with pytest.raises(zlib.error):
        zlib.decompressobj().decompress(out)
    assert zlib.decompressobj(-15).decompress(out) == b"hello hello hello"


@settings(max_examples=100, deadline=None)
@given(
    writes=st.lists(st.binary(max_size=2000), max_size=8),
    repeat=st.integers(1, 30),
    level=st.integers(1, 9),
    seed=st.integers(0, 2**32 - 1),
)
def test_deflate_round_trip_random_splits(
    writes: list[bytes], repeat: int, level: int, seed: int
) -> None:
    writes = [w * repeat for w in writes]
    enc = DeflateEncoder(level)
    stream = b"".join(enc.encode(w) for w in writes)
    rng = random.Random(seed)
    cuts = [rng.randrange(len(stream) + 1) for _ in range(rng.randrange(10))]
    assert feed(DeflateDecoder(), stream, cuts) == b"".join(writes)


def test_deflate_one_byte_at_a_time() -> None:
    enc = DeflateEncoder(1)
    data = b"message body " * 500
    stream = enc.encode(data)
    dec = DeflateDecoder()
    assert b"".join(dec.decode(stream[i : i + 1]) for i in range(len(stream))) == data


@pytest.mark.parametrize("level", [1, 6])
def test_deflate_interop_with_zlib(level: int) -> None:
    data = [b"first", b"second " * 300, os.urandom(2000)]
    # theirs -> ours: zlib raw deflate with a sync flush after each write
    theirs = zlib.compressobj(level, zlib.DEFLATED, -15)
    dec = DeflateDecoder()
    for d in data:
        assert dec.decode(theirs.compress(d) + theirs.flush(zlib.Z_SYNC_FLUSH)) == d
    # ours -> theirs
    enc = DeflateEncoder(level)
    inflater = zlib.decompressobj(-15)
    for d in data:
        assert inflater.decompress(enc.encode(d)) == d


def test_deflate_accepts_a_finished_stream() -> None:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    stream = compressor.compress(b"end") + compressor.flush()
    assert DeflateDecoder().decode(stream) == b"end"


def test_deflate_data_after_end_is_error() -> None:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    stream = compressor.compress(b"end") + compressor.flush()
    with pytest.raises(CompressionError, match="after the end"):
        DeflateDecoder().decode(stream + b"junk")


def test_deflate_garbage_is_error() -> None:
    with pytest.raises(CompressionError, match="deflate"):
        DeflateDecoder().decode(b"\xff" * 32)


def test_deflate_bomb_output_bounded_per_call() -> None:
    bomb_size = 50 * 1024 * 1024
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    stream = compressor.compress(b"\x00" * bomb_size) + compressor.flush(zlib.Z_SYNC_FLUSH)
    assert len(stream) < 100_000
    limit = 1024 * 1024
    dec = DeflateDecoder(max_output=limit)
    first = dec.decode(stream)
    assert len(first) == limit
    assert dec.pending
    total = len(first)
    calls = 1
    while dec.pending:
        out = dec.decode(b"")
        assert len(out) <= limit
        total += len(out)
        calls += 1
    assert total == bomb_size
    assert calls >= bomb_size // limit


def test_deflate_pending_drained_before_new_input() -> None:
    enc = DeflateEncoder(6)
    dec = DeflateDecoder(max_output=100)
    out = dec.decode(enc.encode(b"a" * 1000))
    out += dec.decode(enc.encode(b"b" * 10))  # new input queues behind the held-back tail
    while dec.pending:
        out += dec.decode(b"")
    assert out == b"a" * 1000 + b"b" * 10


def test_deflate_bad_max_output() -> None:
    with pytest.raises(ValueError, match="max_output"):
        DeflateDecoder(max_output=0)


# --- snappy output bound


def test_snappy_bomb_output_bounded_per_call() -> None:
    """Complete chunks past the cap stay compressed until drained with decode(b"")."""
    size = 10 * 1024 * 1024
    stream = SnappyEncoder().encode(b"NOP\n" * (size // 4))
    limit = 200_000
    dec = SnappyDecoder(max_output=limit)
    first = dec.decode(stream)
    assert limit <= len(first) < limit + MAX_SNAPPY_CHUNK_DATA
    assert dec.pending
    assert dec.buffered < len(stream)
    total, calls = len(first), 1
    while dec.pending:
        out = dec.decode(b"")
        assert len(out) < limit + MAX_SNAPPY_CHUNK_DATA
        total += len(out)
        calls += 1
    assert total == size
    assert calls >= size // (limit + MAX_SNAPPY_CHUNK_DATA)
    assert dec.buffered == 0


def test_snappy_new_input_queues_behind_held_chunks() -> None:
    enc = SnappyEncoder()
    dec = SnappyDecoder(max_output=1)
    out = dec.decode(enc.encode(b"a" * 200_000))
    out += dec.decode(enc.encode(b"b" * 10))
    while dec.pending:
        out += dec.decode(b"")
    assert out == b"a" * 200_000 + b"b" * 10


def test_snappy_bad_max_output() -> None:
    with pytest.raises(ValueError, match="max_output"):
        SnappyDecoder(max_output=0)
