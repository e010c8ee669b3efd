"""What watching costs: MPUB batch 200 and consume (RDY 2500) with 10 admin stream
subscribers attached, against none, on one broker (issue 18: at most 5% slower).

A fresh ``trionsq serve`` (durable, default flags, its data in a temp folder) runs
pinned to CPU 0; ``loadgen.py`` and the subscribers' process run on CPU 1. Rounds
go none, 10, 10, none, none, 10 ... so a drift of the machine falls on both sides; each
round publishes to its own topic for ``--seconds`` and then consumes it for as long.
The subscribers take the default subscription (every event kind, a snapshot a
second, which is a /stats of the loaded topics each time) and read everything::

    .venv/bin/python benchmarks/admin_overhead.py [--rounds 4] [--seconds 5]

Prints each round, then the medians and the ratio (with / without) per workload.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def pinned(cpu: int, command: list[str]) -> list[str]:
    return ["taskset", "-c", str(cpu), *command] if shutil.which("taskset") else command


def wait_for_ping(http: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{http}/ping", timeout=1) as answer:
                if answer.read() == b"OK":
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"the broker at {http} did not answer /ping")


def loadgen(
    mode: str, tcp: str, topic: str, seconds: float, broker_pid: int, *extra: str
) -> dict[str, object]:
    command = pinned(
        1,
        [
            sys.executable,
            str(ROOT / "benchmarks" / "loadgen.py"),
            mode,
            "--nsqd-tcp-address",
            tcp,
            "--topic",
            topic,
            "--seconds",
            str(seconds),
            "--broker-pid",
            str(broker_pid),
            "--json",
            *extra,
        ],
    )
    done = subprocess.run(command, check=True, capture_output=True, text=True)  # noqa: S603 - loadgen
    out = done.stdout
    line = [text for text in out.splitlines() if text.startswith("{")][-1]
    figures: dict[str, object] = json.loads(line)
    return figures


def subscribers_main(url: str, count: int) -> None:
    """The subscribers' process: ``count`` websockets reading everything until killed."""
    import trio
    from trio_websocket import open_websocket_url

    received = [0] * count

    async def follow(index: int, ready: trio.Event, opened: list[int]) -> None:
        async with open_websocket_url(url, max_message_size=64 * 1024 * 1024) as ws:
            await ws.get_message()  # hello
            opened[0] += 1
            if opened[0] == count:
                ready.set()
            while True:
                await ws.get_message()
                received[index] += 1

    async def main() -> None:
        ready = trio.Event()
        opened = [0]
        async with trio.open_nursery() as nursery:
            for index in range(count):
                nursery.start_soon(follow, index, ready, opened)
            await ready.wait()
            print("ready", flush=True)

    trio.run(main)


def start_subscribers(http: str, count: int) -> subprocess.Popen[str]:
    command = pinned(
        1,
        [
            sys.executable,
            __file__,
            "--subscribers",
            str(count),
            "--url",
            f"ws://{http}/admin/stream",
        ],
    )
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)  # noqa: S603 - this script
    if process.stdout is None or process.stdout.readline().strip() != "ready":
        raise SystemExit("the subscribers did not connect")
    return process


def start_broker(tcp: str, http: str, data: str, *extra: str) -> subprocess.Popen[bytes]:
    """A fresh durable ``trionsq serve`` on CPU 0 (warnings only), data in ``data``."""
    command = [str(BIN / "trionsq"), "serve", "--tcp-address", tcp, "--http-address", http]
    command += ["--data-path", data, "--log-level", "warn", *extra]
    return subprocess.Popen(pinned(0, command))  # noqa: S603 - the broker under test


def print_peak_rss(pid: int) -> None:
    with open(f"/proc/{pid}/status") as status:
        peak = next(line for line in status if line.startswith("VmHWM"))
    print(f"broker peak RSS: {peak.split(':')[1].strip()}")


def stop_broker(broker: subprocess.Popen[bytes], data: str) -> None:
    broker.terminate()
    broker.wait()
    shutil.rmtree(data, ignore_errors=True)
    os.sync()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="pairs of rounds (default 4)")
    parser.add_argument("--seconds", type=float, default=5.0, help="per workload (default 5)")
    parser.add_argument("--watchers", type=int, default=10, help="subscribers (default 10)")
    parser.add_argument("--subscribers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.subscribers:
        subscribers_main(args.url, args.subscribers)
        return
    data = tempfile.mkdtemp(prefix="admin-overhead-")
    tcp, http = "127.0.0.1:14350", "127.0.0.1:14351"
    broker = start_broker(tcp, http, data)
    results: dict[int, dict[str, list[float]]] = {0: {}, args.watchers: {}}
    try:
        wait_for_ping(http)
        # 0, N, N, 0, 0, N ...: a drift of the machine (the log growing, caches) falls
        # on both sides alike instead of always on the second
        order = [0, args.watchers, args.watchers, 0] * args.rounds
        for round_number, watchers in enumerate(order[: args.rounds * 2]):
            subscribers = start_subscribers(http, watchers) if watchers else None
            topic = f"round{round_number}"
            try:
                mpub = loadgen("mpub", tcp, topic, args.seconds, broker.pid)
                consume = loadgen("consume", tcp, topic, args.seconds, broker.pid, "--rdy", "2500")
            finally:
                if subscribers is not None:
                    subscribers.kill()
                    subscribers.wait()
            row = results[watchers]
            for name, figures in (("mpub", mpub), ("consume", consume)):
                row.setdefault(name, []).append(float(figures["msgs_per_s"]))  # type: ignore[arg-type]
                row.setdefault(f"{name}_cpu", []).append(float(figures.get("broker_cpu_pct", 0)))  # type: ignore[arg-type]
            print(
                f"round {round_number + 1}: {watchers:2d} subscribers  "
                f"MPUB b200 {mpub['msgs_per_s']:>9,} msg/s (broker CPU {mpub.get('broker_cpu_pct')}%)  "
                f"consume RDY 2500 {consume['msgs_per_s']:>9,} msg/s "
                f"(broker CPU {consume.get('broker_cpu_pct')}%)",
                flush=True,
            )
        print()
        for name in ("mpub", "consume"):
            without = statistics.median(results[0][name])
            with_watchers = statistics.median(results[args.watchers][name])
            print(
                f"{name:8s} median without {without:>10,.0f} msg/s   with {args.watchers} "
                f"subscribers {with_watchers:>10,.0f} msg/s   ratio {with_watchers / without:.3f}"
            )
        print_peak_rss(broker.pid)
    finally:
        stop_broker(broker, data)


if __name__ == "__main__":
    main()
