"""Go nsqd and trionsq side by side, in one run, measured with NSQ's own bench tools.

What it measures, each workload on a fresh broker per broker per round, Go nsqd first
and trionsq right after it, so a machine whose speed drifts (a shared 2-core VM) treats
both alike:

- ``mpub``: ``bench_writer`` (MPUB of 200 bodies of 200 bytes, one batch per round trip
  on each of GOMAXPROCS connections) for ``--seconds``; msgs/s.
- ``consume``: ``bench_writer`` writes a backlog for ``--backlog-seconds`` (default twice
  ``--seconds``, so neither broker drains it), the topic's message count is left to
  settle, then ``bench_reader`` (RDY 2500, FIN every message) for ``--seconds``; msgs/s.
  A channel left at depth 0 afterwards means the backlog ran out and the figure is a floor.
- ``loadgen-consume`` (only with ``--loadgen``): the same backlog consumed by this repo's
  ``benchmarks/loadgen.py consume`` at RDY 2500 (its defaults otherwise: one connection,
  lean parser, channel ``loadgen``) for ``--seconds``; msgs/s from its ``--json`` line.
- ``pub``: ``bench_pub`` (one PUB per round trip on each connection); msgs/s, and the
  round trips' p50/p99.
- ``http-pub``: ``wrk -t2 -c16 --latency`` POSTing 200-byte bodies to ``/pub``; requests/s
  (checked against the topic's message count afterwards) and p50/p99.
- ``rss``: the broker's peak RSS (its process tree, ``/proc/<pid>/status`` VmRSS every
  50 ms, and VmHWM at the end) while ``bench_writer`` MPUBs a backlog for a fixed 12 s to a
  topic with no channel; also its idle RSS just before (the runtime's floor) and the
  growth from there to the peak (what the backlog costs), shown without a goal.

Why: issue 19 asks for figures taken the way users will take them, with go-nsq's access
pattern (NSQ's bench tools are go-nsq clients), against the real Go nsqd on the same
machine in the same run, instead of this repo's Python load generator against
remembered Go numbers. Each broker runs with its default flags on fresh loopback ports
and a fresh data directory: trionsq is durable (every message goes to its log), Go nsqd
keeps up to ``--mem-queue-size`` (10,000) messages per queue in memory. That is the point:
the comparison is what each one does out of the box. The table prints trionsq/nsqd for
each workload against the goal set in issue 19; ``--rounds N`` prints every round and the
worst ratio. The exit status is 1 only when a measurement failed, not for a missed goal.

The Go binaries are not in this repo and never committed. To build them locally,
without a network beyond Debian's packages:

1. ``apt-get install golang-go`` (Go 1.19 on Debian 12) and the Debian Go source packages
   for toml, semver, snappy, httprouter, x/sys and go-spew (``golang-github-...-dev``).
2. Bring the sources of github.com/nsqio/nsq at tag v1.3.0, nsqio/go-nsq v1.1.0,
   nsqio/go-diskqueue v1.1.0, bitly/go-hostpool, bitly/timer_metrics, bmizerany/perks,
   mreiferson/go-svc and mreiferson/go-options into sibling directories, next to copies of
   the Debian ones (``/usr/share/gocode/src/...``).
3. In nsq's go.mod add a ``replace <module> => ../<dir>`` line for each dependency
   (``go mod edit -replace=...``; a local change, never committed anywhere), then with
   ``GOPROXY=off GOSUMDB=off GOFLAGS=-mod=mod``: ``go build -o bin/nsqd ./apps/nsqd``,
   ``go build -o bin/bench_writer ./bench/bench_writer``, and the same for
   ``bench/bench_reader``.
4. ``bench_pub`` is a copy of ``bench/bench_writer`` in its own module (same go.mod
   ``replace`` lines) whose connections each send one ``PUB``, flush, and read the reply
   before the next one: one message per round trip, as an application publishing one
   message per call does. It takes bench_writer's flags (``--batch-size`` is ignored) plus
   ``--workers`` (connections; default GOMAXPROCS, as bench_writer), and after its
   ``duration:`` line prints ``latency: p50 <x>us - p99 <y>us - max <z>us`` over every
   round trip (each timed from before its write to after its reply is read).

``wrk`` is Debian's (``apt-get install wrk``). Then::

    .venv/bin/python benchmarks/vs_nsqd.py --nsqd ~/nsq/bin/nsqd \\
        --bench-writer ~/nsq/bin/bench_writer --bench-reader ~/nsq/bin/bench_reader \\
        --bench-pub ~/nsq/bin/bench_pub --seconds 10 [--loadgen] [--rounds 3] [--json]

A workload whose tool is missing is skipped with a note. Temporary data (the backlogs
reach a few GB) goes to ``$TMPDIR``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs

from bench_brokers import (  # sibling scripts: benchmarks/ is on sys.path
    BenchError,
    Broker,
    channel_depth,
    go_seconds,
    message_count,
    run_tool,
    running_broker,
    wait_settled,
)

if TYPE_CHECKING:
    from collections.abc import Callable

BROKERS: Final = ("nsqd", "trionsq")
WORKLOADS: Final = ("mpub", "consume", "loadgen-consume", "pub", "http-pub", "rss")
GOALS: Final[dict[str, tuple[str, float] | None]] = {
    "mpub": (">=", 1.5),
    "consume": (">=", 1.0),
    "loadgen-consume": (">=", 1.0),
    "pub": (">=", 0.75),
    "http-pub": (">=", 0.6),
    "rss peak": ("<=", 1.0),
    "rss VmHWM": ("<=", 1.0),
    "rss idle": None,
    "rss growth": None,
}
"""Issue 19's goals for trionsq/nsqd, issue 37's for pub and http-pub (loadgen-consume
has none of its own: consume's);
None: shown for understanding, no goal (the idle RSS is the runtime's floor, the growth
is what the backlog itself costs)."""
ROWS: Final = {"rss": ("rss peak", "rss VmHWM", "rss idle", "rss growth")}
"""Workloads that give more than one row (the others give one, named after them)."""
SIZE: Final = 200
BATCH: Final = 200
RDY: Final = 2500
RSS_SECONDS: Final = 12.0
RSS_SAMPLE_SECONDS: Final = 0.05
LOADGEN: Final = Path(__file__).with_name("loadgen.py")

_BENCH_LINE: Final = re.compile(
    r"duration: (?P<duration>\S+) - (?P<mbs>[\d.]+)mb/s - (?P<ops>[\d.]+)ops/s - (?P<us>[\d.]+)us/op"
)
LATENCY_LINE: Final = re.compile(r"latency: p50 ([\d.]+)us - p99 ([\d.]+)us")
"""bench_pub's second line: the round trips' median and 99th percentile."""
WRK_PERCENTILE: Final = re.compile(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", re.MULTILINE)
"""A line of ``wrk --latency``'s distribution."""
TO_US: Final = {"us": 1.0, "ms": 1e3, "s": 1e6}
_WRK_RATE: Final = re.compile(r"Requests/sec:\s+([\d.]+)")
_WRK_COUNT: Final = re.compile(r"(\d+) requests in ([\d.]+)(\w+)")
_WRK_NON_2XX: Final = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)")
_WRK_SOCKET_ERRORS: Final = re.compile(r"Socket errors: (.*)")
_WRK_LUA: Final = f'wrk.method = "POST"\nwrk.body = string.rep("a", {SIZE})\n'


# ---------------------------------------------------------------------- figures


@attrs.frozen
class Figure:
    """One broker's result for one workload."""

    value: float
    """The compared figure: msgs/s, requests/s, or MB for RSS."""
    unit: str
    details: dict[str, float | str] = attrs.field(factory=dict)
    """Whatever else the run showed (duration, MB/s, messages written ...)."""


@attrs.define
class Row:
    """One workload in one round: both brokers' figures and what went wrong."""

    workload: str
    round: int
    figures: dict[str, Figure] = attrs.field(factory=dict)
    errors: dict[str, str] = attrs.field(factory=dict)

    def ratio(self) -> float | None:
        """trionsq/nsqd, or None when either side has no figure."""
        nsqd, trionsq = self.figures.get("nsqd"), self.figures.get("trionsq")
        if nsqd is None or trionsq is None or nsqd.value == 0:
            return None
        return round(trionsq.value / nsqd.value, 4)


def met(workload: str, ratio: float | None) -> str:
    """``yes``, ``NO``, or ``?`` without a ratio."""
    target = GOALS[workload]
    if target is None:
        return "-"
    if ratio is None:
        return "?"
    direction, goal = target
    ok = ratio >= goal if direction == ">=" else ratio <= goal
    return "yes" if ok else "NO"


# ---------------------------------------------------------------------- tools


def bench_tool(tool: str, broker: Broker, seconds: float, *flags: str) -> Figure:
    """Run one of NSQ's bench tools and parse its one ``duration: ... ops/s`` line."""
    argv = [
        tool,
        f"--nsqd-tcp-address={broker.tcp_address}",
        f"--runfor={seconds:g}s",
        f"--size={SIZE}",
        *flags,
    ]
    done = run_tool(argv, seconds)
    match = _BENCH_LINE.search(done.stderr) or _BENCH_LINE.search(done.stdout)
    if match is None:
        raise BenchError(f"{Path(tool).name}: no result line in {done.stderr.strip()[-300:]!r}")
    duration = go_seconds(match["duration"])
    ops = float(match["ops"])
    details: dict[str, float | str] = {
        "duration_s": round(duration, 3),
        "mb_per_s": float(match["mbs"]),
        "us_per_op": float(match["us"]),
        "messages": round(ops * duration),
    }
    if latency := LATENCY_LINE.search(done.stderr):  # bench_pub's
        details.update(p50_us=float(latency[1]), p99_us=float(latency[2]))
    return Figure(ops, "msg/s", details)


def write_backlog(tools: Tools, broker: Broker, topic: str, seconds: float) -> int:
    """MPUB a backlog to ``topic`` for ``seconds``, then wait for the count to settle."""
    writer = bench_tool(
        tools.writer_or_fail(), broker, seconds, f"--batch-size={BATCH}", f"--topic={topic}"
    )
    settled = wait_settled(broker, topic)
    print(
        f"    {broker.name}: backlog {settled:,} messages"
        f" (bench_writer {writer.value:,.0f} msg/s for {seconds:g} s)"
    )
    return settled


def drained_warning(broker: Broker, topic: str, channel: str, warnings: list[str]) -> int | None:
    """The channel's depth after a consumer; a warning when it reached 0."""
    depth = channel_depth(broker, topic, channel)
    if depth == 0:
        warnings.append(
            f"{broker.name}: channel {topic}/{channel} was drained (depth 0):"
            " the backlog ran out, so the figure is a floor; raise --backlog-seconds"
        )
    return depth


# ---------------------------------------------------------------------- workloads


@attrs.frozen
class Tools:
    """Paths of the load tools (None: not available)."""

    writer: str | None
    reader: str | None
    pub: str | None
    wrk: str | None

    def writer_or_fail(self) -> str:
        if self.writer is None:
            raise BenchError("bench_writer is needed for this workload")
        return self.writer


@attrs.frozen
class Settings:
    """What every workload needs besides the broker."""

    tools: Tools
    seconds: float
    backlog_seconds: float


def measure_mpub(settings: Settings, broker: Broker, warnings: list[str]) -> dict[str, Figure]:
    """bench_writer, MPUB x200, for ``--seconds``."""
    flags = (f"--batch-size={BATCH}", "--topic=mpub_bench")
    return {"mpub": bench_tool(settings.tools.writer_or_fail(), broker, settings.seconds, *flags)}


def measure_consume(settings: Settings, broker: Broker, warnings: list[str]) -> dict[str, Figure]:
    """A backlog, then bench_reader at RDY 2500 for ``--seconds``."""
    if settings.tools.reader is None:
        raise BenchError("no bench_reader")
    backlog = write_backlog(settings.tools, broker, "sub_bench", settings.backlog_seconds)
    figure = bench_tool(
        settings.tools.reader,
        broker,
        settings.seconds,
        f"--rdy={RDY}",
        "--topic=sub_bench",
        "--channel=ch",
    )
    depth = drained_warning(broker, "sub_bench", "ch", warnings)
    figure.details.update(backlog=backlog, depth_after=-1 if depth is None else depth)
    return {"consume": figure}


def measure_loadgen_consume(
    settings: Settings, broker: Broker, warnings: list[str]
) -> dict[str, Figure]:
    """A backlog, then ``loadgen.py consume --rdy 2500`` (its defaults otherwise)."""
    backlog = write_backlog(settings.tools, broker, "sub_bench", settings.backlog_seconds)
    argv = [
        sys.executable,
        str(LOADGEN),
        "consume",
        f"--nsqd-tcp-address={broker.tcp_address}",
        "--topic=sub_bench",
        f"--rdy={RDY}",
        f"--seconds={settings.seconds:g}",
        "--json",
    ]
    done = run_tool(argv, settings.seconds)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise BenchError(f"loadgen printed no JSON: {done.stdout.strip()[-300:]!r}")
    summary = json.loads(lines[-1])
    rate = summary.get("msgs_per_s") if isinstance(summary, dict) else None
    if not isinstance(rate, int | float):
        raise BenchError(f"loadgen's JSON has no msgs_per_s: {lines[-1][:300]}")
    depth = drained_warning(broker, "sub_bench", "loadgen", warnings)
    details: dict[str, float | str] = {
        "backlog": backlog,
        "depth_after": -1 if depth is None else depth,
    }
    for key in ("elapsed_s", "messages", "payload_mb_per_s"):
        value = summary.get(key)
        if isinstance(value, int | float):
            details[key] = value
    return {"loadgen-consume": Figure(float(rate), "msg/s", details)}


def measure_pub(settings: Settings, broker: Broker, warnings: list[str]) -> dict[str, Figure]:
    """bench_pub, one PUB per round trip per connection, for ``--seconds``."""
    if settings.tools.pub is None:
        raise BenchError("no bench_pub")
    return {"pub": bench_tool(settings.tools.pub, broker, settings.seconds, "--topic=pub_bench")}


def measure_http_pub(settings: Settings, broker: Broker, warnings: list[str]) -> dict[str, Figure]:
    """wrk -t2 -c16 POSTing 200-byte bodies to ``/pub``; checked against the topic's count."""
    if settings.tools.wrk is None:
        raise BenchError("no wrk")
    script = broker.workdir / "pub.lua"
    script.write_text(_WRK_LUA)
    argv = [
        settings.tools.wrk,
        "-t2",
        "-c16",
        "--latency",
        f"-d{math.ceil(settings.seconds)}s",
        "-s",
        str(script),
        f"http://127.0.0.1:{broker.http_port}/pub?topic=http_bench",
    ]
    done = run_tool(argv, settings.seconds)
    rate = _WRK_RATE.search(done.stdout)
    count = _WRK_COUNT.search(done.stdout)
    if rate is None or count is None:
        raise BenchError(f"wrk: no Requests/sec in {done.stdout.strip()[-300:]!r}")
    requests = int(count[1])
    published = message_count(broker, "http_bench")
    details: dict[str, float | str] = {"requests": requests, "published": published}
    for quantile, value, unit in WRK_PERCENTILE.findall(done.stdout):
        details[f"p{quantile}_us"] = float(value) * TO_US[unit]
    if non_2xx := _WRK_NON_2XX.search(done.stdout):
        details["non_2xx"] = int(non_2xx[1])
        warnings.append(f"{broker.name}: wrk saw {non_2xx[1]} non-2xx/3xx responses")
    if errors := _WRK_SOCKET_ERRORS.search(done.stdout):
        details["socket_errors"] = errors[1].strip()
        warnings.append(f"{broker.name}: wrk socket errors: {errors[1].strip()}")
    # requests still in flight when wrk stops may be published but not counted by wrk
    if published == 0 or abs(published - requests) > max(100, requests // 100):
        warnings.append(
            f"{broker.name}: http_bench holds {published:,} messages"
            f" but wrk counted {requests:,} requests"
        )
    return {"http-pub": Figure(float(rate[1]), "req/s", details)}


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (``/proc/<pid>/task/*/children``)."""
    pids, index = [pid], 0
    while index < len(pids):
        tasks = Path(f"/proc/{pids[index]}/task")
        with contextlib.suppress(OSError):
            for task in tasks.iterdir():
                with contextlib.suppress(OSError):
                    pids.extend(int(child) for child in (task / "children").read_text().split())
        index += 1
    return pids


def status_kib(pid: int, field: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/status`` (0 when the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return 0
    return 0


def tree_kib(pid: int, field: str) -> int:
    """``field`` summed over the process tree."""
    return sum(status_kib(member, field) for member in process_tree(pid))


def measure_rss(settings: Settings, broker: Broker, warnings: list[str]) -> dict[str, Figure]:
    """Peak RSS while bench_writer MPUBs a backlog for 12 s to a topic with no channel,
    the idle RSS before it, and the growth between them."""
    pid = broker.process.pid
    idle = tree_kib(pid, "VmRSS")
    peak = [idle]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(RSS_SAMPLE_SECONDS):
            peak[0] = max(peak[0], tree_kib(pid, "VmRSS"))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        writer = bench_tool(
            settings.tools.writer_or_fail(),
            broker,
            RSS_SECONDS,
            f"--batch-size={BATCH}",
            "--topic=rss_bench",
        )
    finally:
        done.set()
        sampler.join()
    peak[0] = max(peak[0], tree_kib(pid, "VmRSS"))
    hwm = tree_kib(pid, "VmHWM")
    details: dict[str, float | str] = {
        "messages_written": writer.details["messages"],
        "writer_msgs_per_s": round(writer.value),
    }
    return {
        "rss peak": Figure(round(peak[0] / 1024, 1), "MB", details),
        "rss VmHWM": Figure(round(hwm / 1024, 1), "MB", details),
        "rss idle": Figure(round(idle / 1024, 1), "MB", details),
        "rss growth": Figure(round((peak[0] - idle) / 1024, 1), "MB", details),
    }


MEASURES: Final[dict[str, Callable[[Settings, Broker, list[str]], dict[str, Figure]]]] = {
    "mpub": measure_mpub,
    "consume": measure_consume,
    "loadgen-consume": measure_loadgen_consume,
    "pub": measure_pub,
    "http-pub": measure_http_pub,
    "rss": measure_rss,
}


# ---------------------------------------------------------------------- report


def fmt_value(figure: Figure | None, error: str | None) -> str:
    if figure is None:
        return "error" if error else "-"
    if figure.unit == "MB":
        return f"{figure.value:,.1f} MB"
    return f"{figure.value:,.0f}/s"


def table(rows: list[Row], rounds: int) -> list[list[str]]:
    """The printed rows: each round's, and with several rounds the worst ratio."""
    lines: list[list[str]] = []
    names = list(dict.fromkeys(row.workload for row in rows))
    for name in names:
        mine = [row for row in rows if row.workload == name]
        target = GOALS[name]
        direction, goal = target if target is not None else ("<=", math.nan)
        shown = "-" if target is None else f"{direction} {goal:g}"
        for row in mine:
            label = name if rounds == 1 else f"{name} #{row.round}"
            ratio = row.ratio()
            lines.append(
                [
                    label,
                    fmt_value(row.figures.get("nsqd"), row.errors.get("nsqd")),
                    fmt_value(row.figures.get("trionsq"), row.errors.get("trionsq")),
                    "-" if ratio is None else f"{ratio:.2f}",
                    shown,
                    met(name, ratio),
                ]
            )
        if rounds > 1:
            ratios = [r for r in (row.ratio() for row in mine) if r is not None]
            worst = None
            if ratios and len(ratios) == len(mine):
                worst = min(ratios) if direction == ">=" else max(ratios)
            label = f"{name} worst ({'min' if direction == '>=' else 'max'})"
            lines.append(
                [
                    label,
                    "",
                    "",
                    "-" if worst is None else f"{worst:.2f}",
                    shown,
                    met(name, worst),
                ]
            )
    return lines


def print_table(lines: list[list[str]]) -> None:
    header = ["workload", "nsqd", "trionsq", "trionsq/nsqd", "goal", "met"]
    widths = [max(len(cells[i]) for cells in [header, *lines]) for i in range(len(header))]
    for index, cells in enumerate([header, *lines]):
        first = cells[0].ljust(widths[0])
        rest = [cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True)]
        print("  ".join([first, *rest]))
        if index == 0:
            print("  ".join("-" * width for width in widths))


def version_of(argv: list[str]) -> str:
    """The first line ``argv`` prints (``--version`` or ``-v``), or why not."""
    try:
        done = subprocess.run(  # noqa: S603
            argv, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({exc})"
    text = (done.stdout or done.stderr).strip()
    return text.splitlines()[0] if text else f"(exit {done.returncode}, no output)"


# ---------------------------------------------------------------------- main


def executable(path: str | None, what: str) -> str | None:
    """``path`` when it is an executable file; None (with a note) otherwise."""
    if path is None:
        print(f"note: no {what} given; its workloads are skipped")
        return None
    if not os.access(path, os.X_OK) or not Path(path).is_file():
        print(f"note: {what} {path} is not an executable file; its workloads are skipped")
        return None
    return path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nsqd", required=True, metavar="PATH", help="Go nsqd")
    parser.add_argument("--bench-writer", metavar="PATH", help="nsq/bench/bench_writer")
    parser.add_argument("--bench-reader", metavar="PATH", help="nsq/bench/bench_reader")
    parser.add_argument("--bench-pub", metavar="PATH", help="bench_pub (see the docstring)")
    parser.add_argument(
        "--wrk", metavar="PATH", default=shutil.which("wrk"), help="wrk (default: from PATH)"
    )
    default_trionsq = str(Path(sys.executable).parent / "nsqd")
    parser.add_argument(
        "--trionsq",
        metavar="CMD",
        default=default_trionsq,
        help="trionsq's drop-in nsqd, a command line (default: %(default)s)",
    )
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="run time per workload (default 10)"
    )
    parser.add_argument(
        "--backlog-seconds",
        type=float,
        help="bench_writer time for the consume backlog (default: twice --seconds)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds (default 1)")
    parser.add_argument(
        "--only", metavar="W1,W2", help=f"comma list of workloads: {', '.join(WORKLOADS)}"
    )
    parser.add_argument(
        "--loadgen", action="store_true", help="also run loadgen-consume (this repo's loadgen.py)"
    )
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    parser.add_argument(
        "--keep-going", action="store_true", help="record a failed measurement and go on"
    )
    return parser


def chosen_workloads(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    if args.only:
        wanted = [name.strip() for name in args.only.split(",") if name.strip()]
        unknown = [name for name in wanted if name not in WORKLOADS]
        if unknown:
            parser.error(f"unknown workload(s) {', '.join(unknown)}; choose from {WORKLOADS}")
        return [name for name in WORKLOADS if name in wanted]
    return [name for name in WORKLOADS if name != "loadgen-consume" or args.loadgen]


def needs(workload: str, tools: Tools) -> str | None:
    """Why ``workload`` cannot run with ``tools``, or None."""
    missing = {
        "mpub": tools.writer is None and "bench_writer",
        "consume": (tools.writer is None or tools.reader is None) and "bench_writer/bench_reader",
        "loadgen-consume": tools.writer is None and "bench_writer",
        "pub": tools.pub is None and "bench_pub",
        "http-pub": tools.wrk is None and "wrk",
        "rss": tools.writer is None and "bench_writer",
    }[workload]
    return missing or None


def run_workload(
    workload: str,
    round_number: int,
    settings: Settings,
    commands: dict[str, list[str]],
    scratch: Path,
    warnings: list[str],
) -> list[Row]:
    """One workload on a fresh nsqd, then on a fresh trionsq; prints as it goes."""
    rows = {name: Row(name, round_number) for name in ROWS.get(workload, (workload,))}
    for broker_name in BROKERS:
        found: list[str] = []
        try:
            with running_broker(broker_name, commands[broker_name], scratch) as broker:
                figures = MEASURES[workload](settings, broker, found)
        except (BenchError, OSError, ValueError) as exc:
            print(f"  ERROR {broker_name}: {workload}: {exc}")
            for row in rows.values():
                row.errors[broker_name] = str(exc)
            continue
        for line in found:
            print(f"  warning: {line}")
        warnings.extend(f"round {round_number}: {line}" for line in found)
        for name, figure in figures.items():
            rows[name].figures[broker_name] = figure
            extra = ", ".join(
                f"{key} {value:,}" if isinstance(value, int) else f"{key} {value}"
                for key, value in figure.details.items()
            )
            print(f"  {broker_name:8} {name}: {fmt_value(figure, None)} ({extra})")
    return list(rows.values())


def main() -> int:
    parser = build_parser()
    args = parser.parse_args()
    if args.seconds <= 0 or args.rounds < 1:
        parser.error("--seconds must be > 0 and --rounds >= 1")
    started = time.monotonic()
    nsqd = executable(args.nsqd, "--nsqd")
    if nsqd is None:
        return 2
    trionsq = shlex.split(args.trionsq)
    tools = Tools(
        writer=executable(args.bench_writer, "--bench-writer"),
        reader=executable(args.bench_reader, "--bench-reader"),
        pub=executable(args.bench_pub, "--bench-pub"),
        wrk=executable(args.wrk, "--wrk"),
    )
    workloads = []
    for workload in chosen_workloads(args, parser):
        if reason := needs(workload, tools):
            print(f"note: {workload} skipped: no {reason}")
        else:
            workloads.append(workload)
    settings = Settings(tools, args.seconds, args.backlog_seconds or 2 * args.seconds)
    commands = {"nsqd": [nsqd], "trionsq": trionsq}
    versions = {
        "nsqd": f"{nsqd}: {version_of([nsqd, '--version'])}",
        "trionsq": f"{args.trionsq}: {version_of([*trionsq, '--version'])}",
        "wrk": f"{tools.wrk}: {version_of([tools.wrk, '-v'])}" if tools.wrk else "-",
        "bench tools": ", ".join(
            str(path) for path in (tools.writer, tools.reader, tools.pub) if path
        ),
    }
    for name, text in versions.items():
        print(f"{name}: {text}")
    print(
        f"{os.cpu_count()} CPUs; {args.seconds:g} s per workload, backlog"
        f" {settings.backlog_seconds:g} s, {args.rounds} round(s): {', '.join(workloads)}"
    )

    rows: list[Row] = []
    warnings: list[str] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="trionsq-vs-nsqd-") as scratch:
        for round_number in range(1, args.rounds + 1):
            for workload in workloads:
                print(f"round {round_number}: {workload}")
                done = run_workload(
                    workload, round_number, settings, commands, Path(scratch), warnings
                )
                rows.extend(done)
                if any(row.errors for row in done):
                    failed = True
                    if not args.keep_going:
                        break
            if failed and not args.keep_going:
                print("stopped at the first failure (--keep-going goes on)")
                break

    print()
    print_table(table(rows, args.rounds))
    if warnings:
        print("\nwarnings:")
        for line in warnings:
            print(f"  {line}")
    elapsed = time.monotonic() - started
    print(f"\ntotal {elapsed:.0f} s")
    if args.json:
        document = {
            "versions": versions,
            "seconds": args.seconds,
            "backlog_seconds": settings.backlog_seconds,
            "rounds": args.rounds,
            "goals": {
                name: f"{goal[0]} {goal[1]:g}" for name, goal in GOALS.items() if goal is not None
            },
            "rows": [
                {
                    "workload": row.workload,
                    "round": row.round,
                    "figures": {name: attrs.asdict(f) for name, f in row.figures.items()},
                    "errors": row.errors,
                    "ratio": row.ratio(),
                    "met": met(row.workload, row.ratio()),
                }
                for row in rows
            ],
            "warnings": warnings,
            "elapsed_s": round(elapsed, 1),
        }
        print(json.dumps(document))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
