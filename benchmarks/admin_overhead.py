"""What watching costs, two ways (``--mode``).

``throughput`` (the default): MPUB batch 200 and consume (RDY 2500) with 10 admin
stream subscribers attached, against none, on one broker (issue 18: at most 5%
slower). A fresh ``trionsq serve`` (durable, default flags, its data in a temp
folder) runs pinned to CPU 0; ``loadgen.py`` and the subscribers' process run on
CPU 1. Rounds go none, 10, 10, none, none, 10 ... so a drift of the machine falls on
both sides; each round publishes to its own topic for ``--seconds`` and then consumes
it for as long. The subscribers take the default subscription (every event kind, a
snapshot a second, which is a /stats of the loaded topics each time) and read
everything::

    .venv/bin/python benchmarks/admin_overhead.py [--rounds 4] [--seconds 5]

Prints each round, then the medians and the ratio (with / without) per workload.

``snapshots`` (issue 30): what snapshots cost a broker with ``--topics`` topics of
``--channels`` channels each (300 x 3 = 900 channels by default) when ``--watchers``
subscribers (20) take a snapshot every ``--interval-ms`` (100): the broker's CPU (a
fraction of one core, from /proc over ``--seconds``) and the /ping latency (p50, p99)
of a keep-alive client asking every 10 ms, with the subscribers and without, rounds
alternating. The subscribers read the raw bytes and parse nothing, so they keep up::

    .venv/bin/python benchmarks/admin_overhead.py --mode snapshots [--rounds 2] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from http.client import HTTPConnection
from pathlib import Path

from loadgen import BrokerProbe

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
    parser.add_argument("--mode", choices=("throughput", "snapshots"), default="throughput")
    parser.add_argument("--rounds", type=int, default=None, help="pairs of rounds (4; 2)")
    parser.add_argument("--seconds", type=float, default=None, help="per workload (5; 10)")
    parser.add_argument("--watchers", type=int, default=None, help="subscribers (10; 20)")
    parser.add_argument("--topics", type=int, default=300, help="snapshots: topics (300)")
    parser.add_argument("--channels", type=int, default=3, help="snapshots: per topic (3)")
    parser.add_argument("--interval-ms", type=int, default=100, help="snapshots: (100)")
    parser.add_argument("--subscribers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--raw-subscribers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.subscribers:
        subscribers_main(args.url, args.subscribers)
        return
    if args.raw_subscribers:
        raw_subscribers_main(args.url, args.raw_subscribers, args.seconds)
        return
    if args.mode == "snapshots":
        snapshot_cost(args)
        return
    args.rounds = args.rounds or 4
    args.seconds = args.seconds or 5.0
    args.watchers = args.watchers or 10
    throughput(args)


def throughput(args: argparse.Namespace) -> None:
    """MPUB and consume with ``args.watchers`` subscribers and without."""
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


# ---------------------------------------------------------------------- snapshots


def raw_subscribers_main(url: str, count: int, seconds: float) -> None:
    """The snapshot subscribers' process: ``count`` websockets on ``url``, their bytes
    read and thrown away (no parsing: the reader must not be the bottleneck); prints
    ``ready``, then after ``seconds`` the bytes and snapshots received per second (a
    snapshot's first frame is counted; one cut between two reads is missed)."""
    parts = urllib.parse.urlsplit(url)
    target = f"{parts.path}?{parts.query}".encode()
    upgrade = (
        b"GET %s HTTP/1.1\r\nHost: bench\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ) % target
    sockets = [socket.create_connection((parts.hostname, parts.port)) for _ in range(count)]
    for sock in sockets:
        sock.sendall(upgrade)
        answer = sock.recv(65536)
        if not answer.startswith(b"HTTP/1.1 101"):
            raise SystemExit(f"the stream refused a subscriber: {answer[:200]!r}")
        sock.setblocking(False)
    print("ready", flush=True)
    selector = selectors.DefaultSelector()
    for sock in sockets:
        selector.register(sock, selectors.EVENT_READ, sock)
    buffer = bytearray(1 << 20)
    received = snapshots = 0
    started = time.monotonic()
    while (left := started + seconds - time.monotonic()) > 0:
        for key, _ in selector.select(left):
            try:
                size = key.data.recv_into(buffer)
            except BlockingIOError:
                continue
            if not size:
                raise SystemExit("the broker closed a subscriber")
            received += size
            snapshots += buffer.count(b'{"type":"snapshot","seq":', 0, size)
    rates = {"bytes_per_s": received / seconds, "snapshots_per_s": snapshots / seconds / count}
    print(json.dumps(rates), flush=True)


def ping_latencies(http: str, seconds: float, every: float = 0.01) -> list[float]:
    """``GET /ping`` on one keep-alive connection every ``every`` seconds, timed."""
    host, port = http.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            sock.sendall(b"GET /ping HTTP/1.1\r\nHost: bench\r\n\r\n")
            answer = b""
            while not answer.endswith(b"\r\n\r\nOK"):
                chunk = sock.recv(4096)
                if not chunk:
                    raise SystemExit("the broker closed the /ping connection")
                answer += chunk
            latencies.append(time.perf_counter() - started)
            time.sleep(every)
    finally:
        sock.close()
    return latencies


def create_topics(http: str, topics: int, channels: int) -> None:
    """``topics`` topics of ``channels`` channels, over one keep-alive connection."""
    host, port = http.rsplit(":", 1)
    connection = HTTPConnection(host, int(port))
    try:
        for topic in range(topics):
            paths = [f"/topic/create?topic=t{topic:03d}"]
            paths += [f"/channel/create?topic=t{topic:03d}&channel=c{c}" for c in range(channels)]
            for path in paths:
                connection.request("POST", path)
                answer = connection.getresponse()
                answer.read()
                if answer.status != 200:
                    raise SystemExit(f"{path}: HTTP {answer.status}")
    finally:
        connection.close()


def snapshot_round(
    http: str, broker_pid: int, watchers: int, interval_ms: int, seconds: float
) -> tuple[float, list[float], dict[str, float]]:
    """Broker CPU (fraction of a core), /ping latencies and what the subscribers got
    (bytes/s, snapshots/s each) for one round with ``watchers`` subscribers (none:
    the broker idle but for /ping)."""
    subscribers = None
    if watchers:
        url = f"ws://{http}/admin/stream?snapshot_interval_ms={interval_ms}"
        command = [sys.executable, __file__, "--raw-subscribers", str(watchers)]
        command += ["--url", url, "--seconds", str(seconds + 2)]
        subscribers = subprocess.Popen(pinned(1, command), stdout=subprocess.PIPE, text=True)  # noqa: S603 - this script
        if subscribers.stdout is None or subscribers.stdout.readline().strip() != "ready":
            raise SystemExit("the subscribers did not connect")
        time.sleep(1.0)  # past the first snapshots, which every subscriber gets at once
    probe = BrokerProbe(broker_pid)
    before = probe.sample()
    latencies = ping_latencies(http, seconds)
    after = probe.sample()
    cpu = (after.cpu_seconds - before.cpu_seconds) / (after.at - before.at)
    got: dict[str, float] = {}
    if subscribers is not None and subscribers.stdout is not None:
        got = json.loads(subscribers.stdout.readline())
        subscribers.wait()
    return cpu, latencies, got


def snapshot_cost(args: argparse.Namespace) -> None:
    """Broker CPU and /ping latency with snapshot subscribers and without."""
    rounds = args.rounds or 2
    seconds = args.seconds or 10.0
    watchers = args.watchers or 20
    os.sched_setaffinity(0, {1})  # /ping's client beside the subscribers, off the broker's CPU
    data = tempfile.mkdtemp(prefix="admin-overhead-")
    tcp, http = "127.0.0.1:14350", "127.0.0.1:14351"
    broker = start_broker(tcp, http, data)
    try:
        wait_for_ping(http)
        create_topics(http, args.topics, args.channels)
        print(
            f"{args.topics} topics x {args.channels} channels; {watchers} subscribers at "
            f"{args.interval_ms} ms; {seconds:g} s per round",
            flush=True,
        )
        results: dict[int, list[tuple[float, list[float], dict[str, float]]]] = {
            0: [],
            watchers: [],
        }
        for count in ([0, watchers, watchers, 0] * rounds)[: rounds * 2]:
            cpu, latencies, got = snapshot_round(http, broker.pid, count, args.interval_ms, seconds)
            results[count].append((cpu, latencies, got))
            print(f"  {count:2d} subscribers: {describe(cpu, latencies, got)}", flush=True)
        print()
        for count, rows in results.items():
            cpu = statistics.median(row[0] for row in rows)
            latencies = [value for row in rows for value in row[1]]
            got = {key: statistics.median(row[2][key] for row in rows) for key in rows[0][2]}
            print(f"{count:2d} subscribers, all rounds: {describe(cpu, latencies, got)}")
    finally:
        stop_broker(broker, data)


def describe(cpu: float, latencies: list[float], got: dict[str, float]) -> str:
    ordered = sorted(latencies)
    p50 = ordered[len(ordered) // 2] * 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    text = f"broker CPU {cpu:.1%} of a core; /ping p50 {p50:.2f} ms p99 {p99:.2f} ms"
    text += f" ({len(ordered)} pings)"
    if got:
        text += f"; subscribers read {got['bytes_per_s'] / 1e6:.1f} MB/s"
        text += f", {got['snapshots_per_s']:.1f} snapshots/s each"
    return text


if __name__ == "__main__":
    main()
