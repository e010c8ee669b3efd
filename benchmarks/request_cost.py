"""What one request costs: PUB round trips and HTTP ``/pub``, per broker, in alternating rounds.

For each round, each target in turn (Go nsqd, one or more trionsq command lines, the
Trio echo floor of ``trio_echo.py``) on a fresh process and data directory:

- ``pub``: ``bench_pub`` (one PUB per round trip on ``--workers`` connections): msgs/s,
  round-trip p50/p99 (bench_pub's ``latency:`` line);
- ``http``: ``wrk -t2 -c16 --latency`` POSTing 200-byte bodies to ``/pub``: requests/s,
  p50/p99 (a broker's topic count checked against wrk's; not for targets named ``*echo*``);

and for both the target's CPU time per request: utime+stime of its process tree from
``/proc/<pid>/stat`` before and after the tool ran, divided by the requests. On a
shared machine the rate swings with the neighbours' load; the CPU time per request
much less, so it is the figure to compare code by. Rounds alternate the targets, so a
drift treats them alike. Reuses ``vs_nsqd.py``'s broker and tool handling::

    .venv/bin/python benchmarks/request_cost.py --nsqd ~/nsq/bin/nsqd \\
        --bench-pub ~/nsq/bin/bench_pub --target before=/tmp/old/.venv/bin/nsqd \\
        --target after=.venv/bin/nsqd --floor --rounds 3 --seconds 8
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Final

from bench_brokers import (  # sibling scripts: benchmarks/ is on sys.path
    BenchError,
    Broker,
    go_seconds,
    message_count,
    run_tool,
    running_broker,
)
from vs_nsqd import (
    _BENCH_LINE,
    _WRK_LUA,
    _WRK_RATE,
    LATENCY_LINE,
    SIZE,
    TO_US,
    WRK_PERCENTILE,
    process_tree,
)

ECHO: Final = Path(__file__).with_name("trio_echo.py")
TICKS: Final = os.sysconf("SC_CLK_TCK")
_WRK_REQUESTS: Final = re.compile(r"(\d+) requests in")


def cpu_seconds(pid: int) -> float:
    """utime+stime of ``pid`` and its children still running, in seconds."""
    total = 0
    for member in process_tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / TICKS


def measure_pub(tool: str, broker: Broker, seconds: float, workers: int) -> dict[str, float]:
    argv = [
        tool,
        f"--nsqd-tcp-address={broker.tcp_address}",
        f"--runfor={seconds:g}s",
        f"--size={SIZE}",
        "--topic=pub_bench",
        f"--workers={workers}",
    ]
    before = cpu_seconds(broker.process.pid)
    done = run_tool(argv, seconds)
    used = cpu_seconds(broker.process.pid) - before
    rate, found = _BENCH_LINE.search(done.stderr), LATENCY_LINE.search(done.stderr)
    if rate is None:
        raise BenchError(f"bench_pub: no result line in {done.stderr.strip()[-300:]!r}")
    messages = float(rate["ops"]) * go_seconds(rate["duration"])
    return {
        "rate": float(rate["ops"]),
        "p50_us": float(found[1]) if found else math.nan,
        "p99_us": float(found[2]) if found else math.nan,
        "cpu_us": used / messages * 1e6 if messages else math.nan,
    }


def measure_http(wrk: str, broker: Broker, seconds: float, *, check: bool) -> dict[str, float]:
    script = broker.workdir / "pub.lua"
    script.write_text(_WRK_LUA)
    url = f"http://127.0.0.1:{broker.http_port}/pub?topic=http_bench"
    argv = [wrk, "-t2", "-c16", "--latency", f"-d{math.ceil(seconds)}s", "-s", str(script), url]
    before = cpu_seconds(broker.process.pid)
    done = run_tool(argv, seconds)
    used = cpu_seconds(broker.process.pid) - before
    rate, count = _WRK_RATE.search(done.stdout), _WRK_REQUESTS.search(done.stdout)
    if rate is None or count is None:
        raise BenchError(f"wrk: no Requests/sec in {done.stdout.strip()[-300:]!r}")
    requests = int(count[1])
    if check and abs(message_count(broker, "http_bench") - requests) > max(100, requests // 100):
        raise BenchError(f"{broker.name}: http_bench's count differs from wrk's {requests:,}")
    quantiles = {q: float(v) * TO_US[u] for q, v, u in WRK_PERCENTILE.findall(done.stdout)}
    return {
        "rate": float(rate[1]),
        "p50_us": quantiles.get("50", math.nan),
        "p99_us": quantiles.get("99", math.nan),
        "cpu_us": used / requests * 1e6 if requests else math.nan,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nsqd", metavar="PATH", help="Go nsqd (a target named nsqd)")
    parser.add_argument("--bench-pub", required=True, metavar="PATH", help="see vs_nsqd.py")
    parser.add_argument("--wrk", default="wrk", metavar="PATH")
    parser.add_argument(
        "--target", action="append", default=[], metavar="NAME=CMD", help="a trionsq nsqd"
    )
    parser.add_argument("--floor", action="store_true", help="also the Trio echo server")
    parser.add_argument("--workers", type=int, default=2, help="bench_pub connections")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=("pub", "http"), help="one workload only")
    return parser


def targets_of(args: argparse.Namespace) -> dict[str, list[str]]:
    targets: dict[str, list[str]] = {}
    if args.nsqd:
        targets["nsqd"] = [args.nsqd]
    for spec in args.target:
        name, _, command = spec.partition("=")
        targets[name] = shlex.split(command)
    if args.floor:
        targets["trio-echo"] = [sys.executable, str(ECHO)]
    return targets


def measure(args: argparse.Namespace, workload: str, name: str, broker: Broker) -> dict[str, float]:
    """One workload on one running target."""
    if workload == "pub":
        return measure_pub(args.bench_pub, broker, args.seconds, args.workers)
    return measure_http(args.wrk, broker, args.seconds, check="echo" not in name)


def fmt_row(row: dict[str, float]) -> str:
    return f"{row['rate']:9,.0f} {row['p50_us']:8.0f} {row['p99_us']:8.0f} {row['cpu_us']:10.1f}"


def main() -> int:
    args = build_parser().parse_args()
    targets = targets_of(args)
    workloads = [args.only] if args.only else ["pub", "http"]
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    print(
        f"{'round':5} {'workload':8} {'target':10} {'rate/s':>9} {'p50 µs':>8} {'p99 µs':>8}",
        end="",
    )
    print(f" {'CPU µs/req':>10}")
    with tempfile.TemporaryDirectory(prefix="trionsq-request-cost-") as scratch:
        for round_number in range(1, args.rounds + 1):
            for workload in workloads:
                for name, command in targets.items():
                    label = f"{round_number:<5} {workload:8} {name:10}"
                    try:
                        with running_broker(name, command, Path(scratch)) as broker:
                            row = measure(args, workload, name, broker)
                    except (BenchError, OSError) as exc:
                        print(f"{label} ERROR {exc}")
                        continue
                    results.setdefault((workload, name), []).append(row)
                    print(f"{label} {fmt_row(row)}", flush=True)
    print("\nmedians:")
    for (workload, name), rows in results.items():
        median = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
        print(f"      {workload:8} {name:10} {fmt_row(median)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
