"""Throughput of the connection codecs: snappy framing and raw deflate (levels 1 and 6).

Run: ``.venv/bin/python benchmarks/compression.py`` (``--quick`` for a short run,
``--seconds N`` for the timed budget of each case).

The workload is what a consumer connection carries: a stream of message frames with
200-byte bodies, written in 64 KiB buffered writes. Encode feeds each write to the
encoder (one sync flush per write for deflate); decode feeds the encoded stream to the
decoder in 64 KiB socket reads. MB/s counts uncompressed bytes; the ratio line gives
compressed size over uncompressed. Each case runs once to warm up, then repeats until
its budget is spent (at least three times); the best repetition is reported. A
benchmark, not a test: nothing fails on a slow figure.
"""

from __future__ import annotations

import argparse
import functools
import os
import struct
import time
from typing import TYPE_CHECKING, Final, Protocol

from trionsq.protocol.compression import (
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
)

if TYPE_CHECKING:
    from collections.abc import Callable

WRITE: Final = 65_536
"""One buffered write, and one socket read on the decode side."""
BODY_SIZE: Final = 200
STREAM_BYTES: Final = 16 * 1024 * 1024
MIN_REPEATS: Final = 3


class _Encoder(Protocol):
    def encode(self, data: bytes) -> bytes: ...


class _Decoder(Protocol):
    def decode(self, data: bytes) -> bytes: ...


def message_frame(seq: int, body: bytes) -> bytes:
    """A FrameTypeMessage frame: size, type 2, timestamp, attempts, 16-byte id, body."""
    msg_id = f"{seq:016x}".encode()
    payload = struct.pack(">iqH", 2, time.time_ns() + seq, 1) + msg_id + body
    return struct.pack(">i", len(payload)) + payload


def build_writes(total: int) -> list[bytes]:
    """64 KiB writes of message frames; bodies are half text, half random bytes."""
    text = b"".join(b"%08d:" % i + b"event=click user=" + b"%06d " % (i * 7) for i in range(8))
    frames = bytearray()
    seq = 0
    while len(frames) < total:
        body = (text[: BODY_SIZE // 2] + os.urandom(BODY_SIZE // 2))[:BODY_SIZE]
        frames += message_frame(seq, body)
        seq += 1
    return [bytes(frames[i : i + WRITE]) for i in range(0, len(frames), WRITE)]


def split_reads(stream: bytes) -> list[bytes]:
    return [stream[i : i + WRITE] for i in range(0, len(stream), WRITE)]


def timed(run: Callable[[], None], budget: float) -> float:
    """Best wall time of one run over a budget."""
    run()  # warm-up
    best = float("inf")
    start = time.perf_counter()
    repeats = 0
    while repeats < MIN_REPEATS or time.perf_counter() - start < budget:
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
        repeats += 1
    return best


def bench(
    name: str,
    make_encoder: Callable[[], _Encoder],
    make_decoder: Callable[[], _Decoder],
    writes: list[bytes],
    budget: float,
) -> None:
    raw = sum(len(w) for w in writes)
    encoder = make_encoder()
    stream = b"".join(encoder.encode(w) for w in writes)
    reads = split_reads(stream)

    def encode() -> None:
        enc = make_encoder()
        for w in writes:
            enc.encode(w)

    def decode() -> None:
        dec = make_decoder()
        got = 0
        for r in reads:
            got += len(dec.decode(r))
        if got != raw:  # pragma: no cover - a codec bug
            raise AssertionError(f"{name}: decoded {got} of {raw} bytes")

    enc_s = timed(encode, budget)
    dec_s = timed(decode, budget)
    mb = raw / 1e6
    print(
        f"{name:<10} encode {mb / enc_s:8.1f} MB/s   decode {mb / dec_s:8.1f} MB/s   "
        f"ratio {len(stream) / raw:.3f}   ({mb:.1f} MB in {len(writes)} writes)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run")
    parser.add_argument("--seconds", type=float, default=2.0, help="budget per case")
    args = parser.parse_args()
    budget = 0.2 if args.quick else args.seconds
    writes = build_writes(STREAM_BYTES // 8 if args.quick else STREAM_BYTES)
    print(f"{BODY_SIZE}-byte message frames, {WRITE}-byte writes and reads")
    bench("snappy", SnappyEncoder, SnappyDecoder, writes, budget)
    for level in (1, 6):
        encoder = functools.partial(DeflateEncoder, level)
        bench(f"deflate-{level}", encoder, DeflateDecoder, writes, budget)


if __name__ == "__main__":
    main()
