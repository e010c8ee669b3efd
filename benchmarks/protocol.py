"""Throughput of the sans-IO protocol core: commands/s and frames/s.

Run: ``.venv/bin/python benchmarks/protocol.py`` (or ``make bench``); ``--quick`` for a
short run. Prints, per case, the best rate over several repetitions, MB/s, the p50/p99
time of one batch (one ``receive_data`` of a 64 KiB chunk, or one encode batch) and
the issue's target next to it; at the end the peak RSS. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import resource
import struct
import sys
import time
from typing import TYPE_CHECKING, Final

from trionsq.protocol import (
    MAGIC_V2,
    Message,
    Mpub,
    ServerConnection,
    encode_message_frame,
    encode_message_frames,
    hex_id,
)

if TYPE_CHECKING:
    from collections.abc import Callable

CHUNK: Final = 65536
BODY: Final = b"x" * 200
I32: Final = struct.Struct(">i")


def sized(body: bytes) -> bytes:
    return I32.pack(len(body)) + body


def chunks(stream: bytes) -> list[bytes]:
    """The stream cut the way a socket read of 64 KiB would cut it."""
    return [stream[i : i + CHUNK] for i in range(0, len(stream), CHUNK)]


class Result:
    """Best rate over the repetitions, plus the batch-time distribution of all of them."""

    def __init__(self, units: int, payload_bytes: int) -> None:
        self.units = units
        self.payload_bytes = payload_bytes
        self.best_seconds = float("inf")
        self.batch_seconds: list[float] = []

    def rate(self) -> float:
        return self.units / self.best_seconds

    def mb_per_second(self) -> float:
        return self.payload_bytes / self.best_seconds / 1e6

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.batch_seconds)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def run(batches: list[Callable[[], int]], units: int, payload: int, repeats: int) -> Result:
    """Time ``batches`` (each returns how many units it did) ``repeats`` times."""
    result = Result(units, payload)
    for _ in range(repeats):
        done = 0
        start = time.perf_counter()
        for batch in batches:
            t0 = time.perf_counter()
            done += batch()
            result.batch_seconds.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - start
        if done != units:
            raise RuntimeError(f"expected {units} units, got {done}")
        result.best_seconds = min(result.best_seconds, elapsed)
    return result


def decode_batches(stream: bytes, count: Callable[[list[object]], int]) -> list[Callable[[], int]]:
    """One batch per 64 KiB chunk, all on one connection created when the run starts."""
    parts = chunks(stream)
    state: dict[str, ServerConnection] = {}

    def first() -> int:
        state["conn"] = ServerConnection()
        state["conn"].receive_data(MAGIC_V2)
        return 0

    def make(chunk: bytes) -> Callable[[], int]:
        def batch() -> int:
            return count(list(state["conn"].receive_data(chunk)))

        return batch

    return [first, *(make(chunk) for chunk in parts)]


def case_pub(n: int, repeats: int) -> Result:
    stream = (b"PUB bench_topic\n" + sized(BODY)) * n
    return run(decode_batches(stream, len), n, n * len(BODY), repeats)


def case_mpub(n_commands: int, repeats: int) -> Result:
    parts = 200
    body = I32.pack(parts) + sized(BODY) * parts
    stream = (b"MPUB bench_topic\n" + sized(body)) * n_commands

    def count(events: list[object]) -> int:
        return sum(len(e.bodies) for e in events if isinstance(e, Mpub))

    total = n_commands * parts
    return run(decode_batches(stream, count), total, total * len(BODY), repeats)


def case_fin(n: int, repeats: int) -> Result:
    stream = b"SUB bench_topic ch\n" + b"".join(b"FIN " + hex_id(i) + b"\n" for i in range(n))
    return run(decode_batches(stream, len), n + 1, 0, repeats)


def case_pub_ext(n: int, repeats: int) -> Result:
    header = b'{"##client_dispatch_tag":"tagA","k":"v"}'
    body = struct.pack(">H", len(header)) + header + BODY
    stream = (b"PUB_EXT bench_topic 0\n" + sized(body)) * n
    return run(decode_batches(stream, len), n, n * len(BODY), repeats)


def case_encode_one(n: int, repeats: int) -> Result:
    ids = [hex_id(i) for i in range(n)]
    ts = time.time_ns()

    def batch() -> int:
        for message_id in ids:
            encode_message_frame(ts, 1, message_id, BODY)
        return n

    return run([batch], n, n * len(BODY), repeats)


def case_encode_batch(n: int, repeats: int) -> Result:
    ts = time.time_ns()
    messages = [Message(ts, 1, hex_id(i), BODY) for i in range(n)]
    groups = [messages[i : i + 200] for i in range(0, n, 200)]

    def make(group: list[Message]) -> Callable[[], int]:
        def batch() -> int:
            encode_message_frames(group)
            return len(group)

        return batch

    return run([make(g) for g in groups], n, n * len(BODY), repeats)


def report(name: str, unit: str, result: Result, target: float | None) -> None:
    verdict = ""
    if target is not None:
        verdict = f"target {target:>12,.0f}  {'PASS' if result.rate() >= target else 'BELOW'}"
    print(
        f"{name:<38} {result.rate():>12,.0f} {unit:<9} {result.mb_per_second():>8.1f} MB/s"
        f"  batch p50 {result.percentile(0.5) * 1e6:>7.0f} us"
        f"  p99 {result.percentile(0.99) * 1e6:>7.0f} us  {verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short run with fewer repetitions")
    args = parser.parse_args()
    scale, repeats = (1, 3) if args.quick else (5, 7)
    print(f"trionsq protocol benchmark (python {sys.version.split()[0]}, 200-byte bodies)")
    report("decode PUB (64 KiB reads)", "cmds/s", case_pub(40_000 * scale, repeats), 400_000)
    report("decode MPUB x200 (64 KiB reads)", "parts/s", case_mpub(200 * scale, repeats), 1_500_000)
    report("decode FIN (hex ids)", "cmds/s", case_fin(40_000 * scale, repeats), None)
    report("decode PUB_EXT (JSON header)", "cmds/s", case_pub_ext(20_000 * scale, repeats), None)
    report(
        "encode message frame, one by one",
        "frames/s",
        case_encode_one(40_000 * scale, repeats),
        1_000_000,
    )
    report(
        "encode message frames, batches of 200",
        "frames/s",
        case_encode_batch(40_000 * scale, repeats),
        1_000_000,
    )
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak RSS {peak_kib / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
