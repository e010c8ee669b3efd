"""Which partition a keyed message goes to: murmur3 (32-bit, seed 0) of the key,
modulo the partition count, as Youzan's producers hash a sharding id (their
``config.Hasher = murmur3.New32()``), so keyed messages of a mixed Go and Python
fleet land on the same partition and stay in order there."""

from __future__ import annotations

from typing import Final

from .errors import NsqConfigError

__all__ = ["murmur3_32", "partition_for_key"]

_C1: Final = 0xCC9E2D51
_C2: Final = 0x1B873593
_MASK: Final = 0xFFFFFFFF


def _rotl(value: int, shift: int) -> int:
    return ((value << shift) | (value >> (32 - shift))) & _MASK


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit of ``data``, unsigned."""
    length = len(data)
    h = seed & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (_rotl((k * _C1) & _MASK, 15) * _C2) & _MASK
        h = (_rotl(h ^ k, 13) * 5 + 0xE6546B64) & _MASK
    tail = data[whole:]
    if tail:
        k = int.from_bytes(tail, "little")
        h ^= (_rotl((k * _C1) & _MASK, 15) * _C2) & _MASK
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    return h ^ (h >> 16)


def partition_for_key(key: bytes | str, partition_count: int) -> int:
    """The partition of ``partition_count`` that ``key``'s messages always go to."""
    if partition_count < 1:
        raise NsqConfigError("a topic has at least one partition")
    raw = key.encode() if isinstance(key, str) else key
    return murmur3_32(raw) % partition_count
