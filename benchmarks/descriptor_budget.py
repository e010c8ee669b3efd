"""What the descriptor budget costs (issue 30, 3b): PUB throughput round robin over
2,000 topics under an open-file limit of 1,024, against one hot topic under the same
limit and 2,000 topics with no limit to speak of.

Each scenario gets a fresh durable ``trionsq serve`` (its data in a temp folder,
default flags) pinned to CPU 0, started with RLIMIT_NOFILE (limit, limit) so it
cannot raise it; ``loadgen.py pub`` runs on CPU 1 with ``--inflight`` PUBs
outstanding. Under 1,024 descriptors about 920 segment files fit, so round robin
over 2,000 topics closes one file and opens another for nearly every PUB. Every
topic gets its first message before the clock starts (creating 2,000 topics is not
what is measured)::

    .venv/bin/python benchmarks/descriptor_budget.py [--seconds 10] [--rounds 2]

Prints per round msgs/s, PUB round-trip percentiles, the broker's RSS and CPU, and
what /stats says of its descriptors (files open, evictions, reopens); then the
median msgs/s per scenario. Rounds alternate the scenarios, so a drift of the
machine falls on all of them.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import tempfile
import urllib.request
from typing import Final

from admin_overhead import BIN, loadgen, pinned, wait_for_ping  # a sibling script

TCP: Final = "127.0.0.1:14360"
HTTP: Final = "127.0.0.1:14361"
SCENARIOS: Final = (
    ("hot topic, limit 1,024", 1, 1024),
    ("2,000 topics, limit 1,024", 2000, 1024),
    ("2,000 topics, the hard limit", 2000, None),
)
"""Name, topics, open-file limit (None: the hard limit this script runs under)."""


def start_broker(data: str, limit: int | None) -> subprocess.Popen[bytes]:
    """A fresh durable broker on CPU 0 that cannot raise its open-file limit."""

    def limited() -> None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        ceiling = hard if limit is None or hard < limit else limit
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, ceiling))

    command = [str(BIN / "trionsq"), "serve", "--tcp-address", TCP, "--http-address", HTTP]
    command += ["--data-path", data, "--log-level", "warn"]
    return subprocess.Popen(pinned(0, command), preexec_fn=limited)  # noqa: S603


def descriptor_figures() -> dict[str, int]:
    with urllib.request.urlopen(f"http://{HTTP}/stats?format=json", timeout=10) as answer:
        figures: dict[str, int] = json.loads(answer.read())["descriptors"]
    return figures


def run(topics: int, limit: int | None, seconds: float, inflight: int) -> dict[str, object]:
    data = tempfile.mkdtemp(prefix="descriptor-budget-")
    broker = start_broker(data, limit)
    try:
        wait_for_ping(HTTP)
        rotation = ["--topics", str(topics), "--inflight", str(inflight)]
        # every topic made and holding a message before the clock starts
        loadgen("pub", TCP, "rr", 60, broker.pid, *rotation, "--count", str(topics))
        before = descriptor_figures()
        figures = loadgen("pub", TCP, "rr", seconds, broker.pid, *rotation)
        after = descriptor_figures()
        figures["limit"] = after["limit"]
        figures["files_open"] = after["files_open"]
        figures["pool"] = after["pool"]
        figures["evictions"] = after["evictions"] - before["evictions"]
        figures["reopens"] = after["reopens"] - before["reopens"]
        return figures
    finally:
        broker.terminate()
        broker.wait()
        shutil.rmtree(data, ignore_errors=True)


def number(figures: dict[str, object], key: str) -> float:
    return float(str(figures.get(key, 0)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per round (default 10)")
    parser.add_argument("--rounds", type=int, default=2, help="of every scenario (default 2)")
    parser.add_argument("--inflight", type=int, default=32, help="PUBs outstanding (default 32)")
    args = parser.parse_args()
    rates: dict[str, list[float]] = {}
    for round_number in range(args.rounds):
        order = SCENARIOS if round_number % 2 == 0 else tuple(reversed(SCENARIOS))
        for name, topics, limit in order:
            figures = run(topics, limit, args.seconds, args.inflight)
            rates.setdefault(name, []).append(number(figures, "msgs_per_s"))
            messages = max(number(figures, "messages"), 1)
            print(
                f"round {round_number + 1}  {name:29s} {number(figures, 'msgs_per_s'):>8,.0f} msg/s"
                f"  PUB p50 {number(figures, 'latency_p50_us') / 1000:6.2f} ms"
                f"  p99 {number(figures, 'latency_p99_us') / 1000:6.2f} ms"
                f"  max {number(figures, 'latency_max_us') / 1000:7.2f} ms"
                f"  broker CPU {number(figures, 'broker_cpu_pct'):3.0f}%"
                f"  RSS {number(figures, 'broker_rss_after_kib') / 1024:6.1f} MiB"
                f"  limit {figures['limit']}  files open {figures['files_open']}/{figures['pool']}"
                f"  reopens {number(figures, 'reopens') / messages:.2f} per PUB",
                flush=True,
            )
    print()
    for name, values in rates.items():
        print(f"{name:29s} median {statistics.median(values):>8,.0f} msg/s  ({len(values)} rounds)")


if __name__ == "__main__":
    main()
