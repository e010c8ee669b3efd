"""Keys to partitions: murmur3 x86 32-bit (seed 0) as Youzan's producers hash them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.client.partitioning import murmur3_32, partition_for_key


@pytest.mark.parametrize(
    ("data", "seed", "expected"),
    [  # the reference implementation's published vectors
        (b"", 0, 0),
        (b"", 1, 0x514E28B7),
        (b"\xff\xff\xff\xff", 0, 0x76293B50),
        (b"!Ce\x87", 0, 0xF55B516B),
        (b"!Ce", 0, 0x7E4A8634),
        (b"!C", 0, 0xA0F7B07A),
        (b"!", 0, 0x72661CF4),
        (b"hello", 0, 613153351),
        (b"The quick brown fox jumps over the lazy dog", 0, 0x2E4FF723),
    ],
)
def test_murmur3_matches_the_reference_vectors(data: bytes, seed: int, expected: int) -> None:
    assert murmur3_32(data, seed) == expected


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=255))
def test_a_key_always_lands_on_the_same_valid_partition(key: bytes, count: int) -> None:
    partition = partition_for_key(key, count)
    assert 0 <= partition < count
    assert partition_for_key(key, count) == partition


def test_text_keys_hash_as_their_utf8_bytes_and_zero_partitions_is_refused() -> None:
    assert partition_for_key("order-42", 7) == partition_for_key(b"order-42", 7)
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for_key(b"k", 0)
