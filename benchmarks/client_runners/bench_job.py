"""What the four client runners share: the command line of one phase, how a count is
split, and the one JSON line each prints for ``benchmarks/client.py``.

A runner is a script that measures one phase of one client in a process of its own
(the parent pins it), so the JSON line is the whole interface: messages, seconds,
round-trip percentiles when taken, and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from array import array

PHASES: Final = ("pub", "mpub", "consume")
CHANNEL: Final = "bench"
"""The channel every consumer reads; the parent creates it before filling the topic."""


@dataclass(frozen=True)
class Job:
    """One phase to measure, as the parent asked for it."""

    phase: str
    address: str
    topic: str
    count: int
    size: int
    concurrency: int
    batch: int
    max_in_flight: int

    @property
    def body(self) -> bytes:
        return b"x" * self.size


_CPU_AT_JOB_START: list[float] = []
"""The runner's CPU time when its job was parsed: after the interpreter and the client
library were loaded, so the phase's CPU figure leaves their start-up out."""


def parse_job(description: str) -> Job:
    _CPU_AT_JOB_START.append(time.process_time())
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("phase", choices=PHASES)
    parser.add_argument("--nsqd-tcp-address", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--max-in-flight", type=int, default=2500)
    arguments = parser.parse_args()
    return Job(
        phase=arguments.phase,
        address=arguments.nsqd_tcp_address,
        topic=arguments.topic,
        count=arguments.count,
        size=arguments.size,
        concurrency=arguments.concurrency,
        batch=arguments.batch,
        max_in_flight=arguments.max_in_flight,
    )


def shares(total: int, parts: int) -> list[int]:
    """``total`` over ``parts`` publishers, the first ones one more, so that every
    client publishes exactly the count whatever the concurrency."""
    base, extra = divmod(total, parts)
    return [base + 1 if index < extra else base for index in range(parts)]


def batches(total: int, batch: int) -> list[int]:
    """MPUB sizes for ``total`` messages: full batches, then what is left."""
    full, rest = divmod(total, batch)
    return [batch] * full + ([rest] if rest else [])


def _percentile_ms(ordered: list[int], fraction: float) -> float:
    """Nearest rank, as ``loadgen.py`` reports it."""
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1] / 1e6


def peak_rss_kib() -> int:
    """``VmHWM``: the high-water mark of this program's own memory. Not ``ru_maxrss``,
    which Linux carries over ``fork`` and ``exec``, so that a runner would report
    the parent's RSS whenever the parent was the larger."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def report(messages: int, seconds: float, samples: array[int] | None = None) -> None:
    """Print the phase's result; peak RSS is taken last so it covers the whole phase."""
    result: dict[str, float | int | None] = {
        "messages": messages,
        "seconds": seconds,
        "p50_ms": None,
        "p99_ms": None,
        "peak_rss_kib": peak_rss_kib(),
        "cpu_seconds": time.process_time() - _CPU_AT_JOB_START[0],
    }
    if samples:
        ordered = sorted(samples)
        result["p50_ms"] = _percentile_ms(ordered, 0.50)
        result["p99_ms"] = _percentile_ms(ordered, 0.99)
    print(json.dumps(result), flush=True)
