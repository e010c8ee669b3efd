"""Throughput of the sans-IO protocol core: commands/s, frames/s, MB/s, batch latency.

Run: ``.venv/bin/python benchmarks/protocol.py`` (or ``make bench``). Options:
``--quick`` for a short run, ``--seconds N`` for the timed budget of each case,
``--profile`` to add a cProfile of the PUB and MPUB decode cases.

Each case is run once to warm up, then repeated until its budget is spent (at least
three times). A line reports the best repetition's rate, MB/s of wire bytes (bytes
fed to ``receive_data``, or bytes an encoder produced), the p50/p99 time of one batch
over all timed repetitions (one ``receive_data`` call, or one encode batch of 200
frames), and the issue's target with PASS or BELOW. Only the protocol call is timed:
building inputs, counting and freeing events happen outside the clock. The last line
is the process's peak RSS. A benchmark, not a test: nothing fails on a slow figure.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import struct
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import attrs

from trionsq.protocol import (
    MAGIC_V2,
    Fin,
    Message,
    Mpub,
    ProtocolError,
    Pub,
    PubExt,
    Rdy,
    Req,
    ServerConnection,
    ServerSettings,
    Touch,
    encode_message_frame,
    encode_message_frames,
    hex_id,
)

if TYPE_CHECKING:
    from trionsq.protocol import Event

CHUNK: Final = 65_536
"""One socket read."""
BODY: Final = b"x" * 200
MPUB_PARTS: Final = 200
ENCODE_BATCH: Final = 200
TOPIC: Final = b"bench_topic"
MIN_REPEATS: Final = 3
MAX_REPEATS: Final = 1000
PUB_EXT_HEADER: Final = b'{"##client_dispatch_tag":"tagA","k":"v"}'

_I32: Final = struct.Struct(">i")
_U16: Final = struct.Struct(">H")


def sized(payload: bytes) -> bytes:
    """``[4-byte big-endian size][payload]``, as PUB and MPUB carry bodies."""
    return _I32.pack(len(payload)) + payload


def chunked(stream: bytes, size: int = CHUNK) -> list[bytes]:
    """The stream cut the way successive socket reads of ``size`` bytes would cut it."""
    return [stream[i : i + size] for i in range(0, len(stream), size)]


def percentile(ordered: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# ---------------------------------------------------------------------------- cases


@attrs.frozen
class Case:
    """One workload: ``run_once`` does one repetition and returns its batch times."""

    name: str
    unit: str
    target: float | None
    units: int
    """Commands, parts or frames done by one repetition."""
    wire_bytes: int
    """Bytes decoded or encoded by one repetition."""
    run_once: Callable[[], list[float]]


def decode_case(
    name: str,
    unit: str,
    target: float | None,
    preamble: bytes,
    stream: bytes,
    count: Callable[[list[Event]], int],
    units: int,
    *,
    chunk: int | None = CHUNK,
    settings: ServerSettings | None = None,
) -> Case:
    """Feed ``stream`` to a fresh connection (after ``preamble``, untimed).

    ``chunk=None`` feeds it as one buffer. ``count`` turns one call's events into
    units and raises on anything unexpected; it runs outside the clock.
    """
    feeds = [stream] if chunk is None else chunked(stream, chunk)
    server_settings = settings if settings is not None else ServerSettings()

    def run_once() -> list[float]:
        conn = ServerConnection(server_settings)
        for event in conn.receive_data(MAGIC_V2 + preamble):
            if isinstance(event, ProtocolError):
                raise RuntimeError(f"{name}: preamble refused: {event!r}")
        clock = time.perf_counter
        times: list[float] = []
        done = 0
        for feed in feeds:
            start = clock()
            events = conn.receive_data(feed)
            times.append(clock() - start)
            done += count(events)
            del events  # freeing the events is the caller's cost, not the parser's
        if done != units:
            raise RuntimeError(f"{name}: expected {units} {unit}, decoded {done}")
        return times

    return Case(name, unit, target, units, len(stream), run_once)


def only(kind: type[object]) -> Callable[[list[Event]], int]:
    """Count events that must all be of ``kind`` (a ProtocolError is a bug here)."""

    def count(events: list[Event]) -> int:
        for event in events:
            if type(event) is not kind:
                raise RuntimeError(f"unexpected event {event!r}")
        return len(events)

    return count


def count_mpub_parts(events: list[Event]) -> int:
    parts = 0
    for event in events:
        if type(event) is not Mpub:
            raise RuntimeError(f"unexpected event {event!r}")
        parts += len(event.bodies)
    return parts


def pub_stream(n: int) -> bytes:
    return (b"PUB " + TOPIC + b"\n" + sized(BODY)) * n


def mpub_stream(n_commands: int) -> bytes:
    body = _I32.pack(MPUB_PARTS) + sized(BODY) * MPUB_PARTS
    return (b"MPUB " + TOPIC + b"\n" + sized(body)) * n_commands


def case_pub(n: int, *, one_buffer: bool) -> Case:
    how = "one buffer" if one_buffer else "64 KiB reads"
    return decode_case(
        f"decode PUB ({how})",
        "cmds/s",
        400_000,
        b"",
        pub_stream(n),
        only(Pub),
        n,
        chunk=None if one_buffer else CHUNK,
    )


def case_mpub(n_commands: int, *, one_buffer: bool) -> Case:
    how = "one buffer" if one_buffer else "64 KiB reads"
    return decode_case(
        f"decode MPUB x{MPUB_PARTS} ({how})",
        "parts/s",
        None if one_buffer else 1_500_000,
        b"",
        mpub_stream(n_commands),
        count_mpub_parts,
        n_commands * MPUB_PARTS,
        chunk=None if one_buffer else CHUNK,
    )


def case_fin(n: int) -> Case:
    stream = b"".join(b"FIN " + hex_id(i) + b"\n" for i in range(n))
    return decode_case(
        "decode FIN (hex ids, after SUB)",
        "cmds/s",
        None,
        b"SUB " + TOPIC + b" ch\n",
        stream,
        only(Fin),
        n,
    )


def case_consumer_mix(n: int) -> Case:
    """What a busy consumer sends: mostly FIN, some REQ and TOUCH, a RDY now and then."""
    lines: list[bytes] = []
    for i in range(n):
        message_id = hex_id(i)
        if i % 100 == 99:
            lines.append(b"RDY 200\n")
        elif i % 50 == 7:
            lines.append(b"REQ " + message_id + b" 5000\n")
        elif i % 100 == 13:
            lines.append(b"TOUCH " + message_id + b"\n")
        else:
            lines.append(b"FIN " + message_id + b"\n")
    kinds = (Fin, Req, Touch, Rdy)

    def count(events: list[Event]) -> int:
        for event in events:
            if type(event) not in kinds:
                raise RuntimeError(f"unexpected event {event!r}")
        return len(events)

    return decode_case(
        "decode consumer mix (FIN/REQ/TOUCH/RDY)",
        "cmds/s",
        None,
        b"SUB " + TOPIC + b" ch\n",
        b"".join(lines),
        count,
        n,
    )


def case_pub_ext(n: int) -> Case:
    body = _U16.pack(len(PUB_EXT_HEADER)) + PUB_EXT_HEADER + BODY
    stream = (b"PUB_EXT " + TOPIC + b" 0\n" + sized(body)) * n
    return decode_case(
        "decode PUB_EXT (small JSON header)",
        "cmds/s",
        None,
        b"",
        stream,
        only(PubExt),
        n,
    )


def case_encode_one(n: int) -> Case:
    """``encode_message_frame`` per message; a batch is 200 consecutive calls."""
    ids = [hex_id(i) for i in range(n)]
    groups = [ids[i : i + ENCODE_BATCH] for i in range(0, n, ENCODE_BATCH)]
    timestamp = time.time_ns()
    frame_size = len(encode_message_frame(timestamp, 1, ids[0], BODY))

    def run_once() -> list[float]:
        clock = time.perf_counter
        encode = encode_message_frame
        body = BODY
        times: list[float] = []
        for group in groups:
            start = clock()
            for message_id in group:
                encode(timestamp, 1, message_id, body)
            times.append(clock() - start)
        return times

    return Case(
        f"encode message frame, one by one (x{ENCODE_BATCH})",
        "frames/s",
        1_000_000,
        n,
        n * frame_size,
        run_once,
    )


def case_encode_batch(n: int) -> Case:
    """``encode_message_frames`` on lists of 200 ``Message`` values."""
    timestamp = time.time_ns()
    messages = [Message(timestamp, 1, hex_id(i), BODY) for i in range(n)]
    groups = [messages[i : i + ENCODE_BATCH] for i in range(0, n, ENCODE_BATCH)]
    wire = sum(len(encode_message_frames(group)) for group in groups)

    def run_once() -> list[float]:
        clock = time.perf_counter
        encode = encode_message_frames
        times: list[float] = []
        for group in groups:
            start = clock()
            encode(group)
            times.append(clock() - start)
        return times

    return Case(
        f"encode message frames, batches of {ENCODE_BATCH}",
        "frames/s",
        1_000_000,
        n,
        wire,
        run_once,
    )


# ---------------------------------------------------------------------------- running


@attrs.define
class Result:
    case: Case
    repeats: int = 0
    best_seconds: float = float("inf")
    batch_seconds: list[float] = attrs.Factory(list)

    @property
    def rate(self) -> float:
        return self.case.units / self.best_seconds

    @property
    def mb_per_second(self) -> float:
        return self.case.wire_bytes / self.best_seconds / 1e6


def measure(case: Case, seconds: float) -> Result:
    """Warm up once, then repeat for ``seconds`` (at least MIN_REPEATS times)."""
    case.run_once()
    result = Result(case)
    deadline = time.perf_counter() + seconds
    while result.repeats < MIN_REPEATS or (
        result.repeats < MAX_REPEATS and time.perf_counter() < deadline
    ):
        times = case.run_once()
        result.repeats += 1
        result.best_seconds = min(result.best_seconds, sum(times))
        result.batch_seconds.extend(times)
    return result


def report(result: Result) -> None:
    case = result.case
    ordered = sorted(result.batch_seconds)
    if case.target is None:
        verdict = "(no target)"
    else:
        ok = "PASS" if result.rate >= case.target else "BELOW"
        verdict = f"target >= {case.target:>9,.0f}  {ok}"
    print(
        f"{case.name:<44} {result.rate:>11,.0f} {case.unit:<8} {result.mb_per_second:>7.1f} MB/s"
        f"  p50 {percentile(ordered, 0.50) * 1e6:>8.1f} us"
        f"  p99 {percentile(ordered, 0.99) * 1e6:>8.1f} us"
        f"  best of {result.repeats:<3}  {verdict}",
        flush=True,
    )


def profile(case: Case, lines: int) -> None:
    """cProfile one repetition of ``case``, top functions by own time."""
    case.run_once()
    profiler = cProfile.Profile()
    profiler.enable()
    case.run_once()
    profiler.disable()
    print(f"\n--- cProfile: {case.name} (one repetition, {case.units:,} units) ---")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(lines)


def peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller inputs, short budget")
    parser.add_argument(
        "--seconds",
        type=float,
        default=None,
        metavar="N",
        help="timed budget per case in seconds (default 2, or 0.3 with --quick)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="also cProfile the PUB and MPUB decode cases"
    )
    args = parser.parse_args()
    quick: bool = args.quick
    seconds: float = args.seconds if args.seconds is not None else (0.3 if quick else 2.0)
    scale = 1 if quick else 4

    print(
        f"trionsq protocol benchmark: python {sys.version.split()[0]}, {os.cpu_count()} CPUs,"
        f" {len(BODY)}-byte bodies, {seconds:g} s per case, batch = one receive_data call"
        f" or {ENCODE_BATCH} encodes"
    )
    pub_64k = case_pub(25_000 * scale, one_buffer=False)
    mpub_64k = case_mpub(100 * scale, one_buffer=False)
    cases = [
        pub_64k,
        case_pub(25_000 * scale, one_buffer=True),
        mpub_64k,
        case_mpub(100 * scale, one_buffer=True),
        case_encode_one(50_000 * scale),
        case_encode_batch(50_000 * scale),
        case_fin(25_000 * scale),
        case_consumer_mix(25_000 * scale),
        case_pub_ext(10_000 * scale),
    ]
    for case in cases:
        report(measure(case, seconds))
    if args.profile:
        profile(pub_64k, 15)
        profile(mpub_64k, 15)
    print(f"peak RSS {peak_rss_mib():.1f} MiB")


if __name__ == "__main__":
    main()
