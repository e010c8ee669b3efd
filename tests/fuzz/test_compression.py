"""Fuzz the snappy and deflate stream decoders: any bytes, or a valid stream mutated,
split anywhere, give bytes or :class:`CompressionError` (after which the decoder
stays broken); every call returns at most its cap (snappy: plus one chunk), and
what is held stays about what was fed."""

from __future__ import annotations

from hypothesis import given
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

from .mutations import cuts, fuzz_settings, mutated, split

CAP = 4096


def drain(decoder: SnappyDecoder | DeflateDecoder, reads: list[bytes]) -> None:
    slack = MAX_SNAPPY_CHUNK_DATA if isinstance(decoder, SnappyDecoder) else 0
    fed = 0
    for data in reads:
        fed += len(data)
        try:
            out = decoder.decode(data)
            assert len(out) <= CAP + slack
            while decoder.pending:
                out = decoder.decode(b"")
                assert len(out) <= CAP + slack
        except CompressionError:
            try:
                decoder.decode(b"x")
            except CompressionError:
                return
            assert isinstance(decoder, DeflateDecoder), "snappy stays broken after an error"
            return
        if isinstance(decoder, SnappyDecoder):
            assert decoder.buffered <= fed


plain = st.one_of(
    st.binary(max_size=3000),
    st.binary(max_size=40).flatmap(lambda unit: st.integers(1, 2000).map(lambda n: unit * n)),
)


@fuzz_settings
@given(data=st.binary(max_size=3000), identifier=st.booleans(), cut_at=cuts)
def test_snappy_arbitrary_bytes(data: bytes, identifier: bool, cut_at: list[int]) -> None:
    stream = (SNAPPY_STREAM_IDENTIFIER if identifier else b"") + data
    drain(SnappyDecoder(CAP), split(stream, cut_at))


@fuzz_settings
@given(data=st.data(), writes=st.lists(plain, max_size=4), cut_at=cuts)
def test_snappy_mutated_streams(
    data: st.DataObject, writes: list[bytes], cut_at: list[int]
) -> None:
    encoder = SnappyEncoder()
    stream = data.draw(mutated(b"".join(encoder.encode(w) for w in writes)))
    drain(SnappyDecoder(CAP), split(stream, cut_at))


@fuzz_settings
@given(data=st.binary(max_size=3000), cut_at=cuts)
def test_deflate_arbitrary_bytes(data: bytes, cut_at: list[int]) -> None:
    drain(DeflateDecoder(CAP), split(data, cut_at))


@fuzz_settings
@given(data=st.data(), writes=st.lists(plain, max_size=4), level=st.integers(0, 9), cut_at=cuts)
def test_deflate_mutated_streams(
    data: st.DataObject, writes: list[bytes], level: int, cut_at: list[int]
) -> None:
    encoder = DeflateEncoder(level)
    stream = data.draw(mutated(b"".join(encoder.encode(w) for w in writes)))
    drain(DeflateDecoder(CAP), split(stream, cut_at))
