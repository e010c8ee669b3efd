"""How fast the drop-in commands start: spawn -> first ``GET /ping`` answered ``OK``,
and ``--version`` from spawn to exit.

Client suites and users' test harnesses start a broker per test and call
``nsqd --version`` to choose features, so both add up. Each run spawns a fresh
process on free loopback ports with a fresh data directory, then polls ``/ping``
(a connect attempt every 1 ms) until it answers; the figure is the time from just
before ``Popen`` to the answer. Prints the median, the max and every run. Several
``--nsqd`` commands are measured in turn, run by run, so a machine whose speed drifts
(a shared VM) treats them alike::

    .venv/bin/python benchmarks/startup.py                       # trionsq's nsqd
    .venv/bin/python benchmarks/startup.py --nsqd .venv/bin/nsqd --nsqd /path/to/go/nsqd
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Final

PING: Final = b"GET /ping HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"


def free_port() -> int:
    """A port the kernel just handed out (released again for the broker to bind)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ping_ok(port: int) -> bool:
    """One ``GET /ping``; True when the answer is 200 ``OK``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(PING)
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
    except OSError:
        return False
    return answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"OK")


def spawn_to_ping(nsqd: str, limit: float) -> float:
    """Seconds from spawning ``nsqd`` on free ports to its first ``/ping`` OK."""
    http_port = free_port()
    with tempfile.TemporaryDirectory(prefix="trionsq-startup-") as data:
        command = [
            nsqd,
            f"--tcp-address=127.0.0.1:{free_port()}",
            f"--http-address=127.0.0.1:{http_port}",
            f"--https-address=127.0.0.1:{free_port()}",
            f"--data-path={data}",
        ]
        started = time.perf_counter()
        process = subprocess.Popen(  # noqa: S603 - the command under test
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            while not ping_ok(http_port):
                if process.poll() is not None:
                    raise SystemExit(f"{nsqd} exited with {process.returncode} before /ping")
                if time.perf_counter() - started > limit:
                    raise SystemExit(f"{nsqd} did not answer /ping within {limit} s")
                time.sleep(0.001)
            return time.perf_counter() - started
        finally:
            process.terminate()
            process.wait()


def spawn_version(nsqd: str) -> float:
    """Seconds from spawning ``nsqd --version`` to its exit."""
    started = time.perf_counter()
    subprocess.run([nsqd, "--version"], check=True, capture_output=True)  # noqa: S603
    return time.perf_counter() - started


def report(name: str, seconds: list[float]) -> None:
    """Median, max and every run, in milliseconds."""
    runs = " ".join(f"{s * 1000:.0f}" for s in seconds)
    print(
        f"{name}: median {statistics.median(seconds) * 1000:.1f} ms,"
        f" max {max(seconds) * 1000:.1f} ms over {len(seconds)} runs ({runs})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = shutil.which("nsqd", path=str(Path(__file__).parents[1] / ".venv" / "bin"))
    parser.add_argument(
        "--nsqd", action="append", help="a command to start, repeatable (default: .venv's)"
    )
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--limit", type=float, default=10.0, help="seconds before giving up")
    args = parser.parse_args()
    commands: list[str] = args.nsqd or ([default] if default else [])
    if not commands:
        raise SystemExit("no nsqd command: run `make test` once to build .venv, or pass --nsqd")
    print(f"{len(commands)} command(s), {args.runs} runs each, on {os.cpu_count()} CPUs")
    for command in commands:
        spawn_version(command)  # warm the page cache and any bytecode caches first
    versions: dict[str, list[float]] = {command: [] for command in commands}
    pings: dict[str, list[float]] = {command: [] for command in commands}
    for _ in range(args.runs):
        for command in commands:
            versions[command].append(spawn_version(command))
            pings[command].append(spawn_to_ping(command, args.limit))
    for command in commands:
        report(f"{command} --version", versions[command])
        report(f"{command} spawn -> /ping OK", pings[command])


if __name__ == "__main__":
    main()
