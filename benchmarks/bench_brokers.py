"""The brokers and tools of ``vs_nsqd.py`` and ``request_cost.py``: start a broker on
fresh loopback ports and a fresh data directory, read its ``/stats``, run a load tool.

Split out of ``vs_nsqd.py`` (issue 37) so both scripts share them.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs

from startup import free_port, ping_ok  # a sibling script: benchmarks/ is on sys.path

if TYPE_CHECKING:
    from collections.abc import Iterator

READY_LIMIT: Final = 30.0
"""Seconds a broker may take to answer ``/ping`` before the run gives up on it."""
STOP_GRACE: Final = 10.0
"""Seconds between SIGTERM and SIGKILL."""
TOOL_SLACK: Final = 120.0
"""Seconds a tool may run past its ``--runfor`` before it counts as hung."""
SETTLE_LIMIT: Final = 120.0
_GO_DURATION: Final = re.compile(r"([\d.]+)(ns|us|µs|ms|s|m|h)")
_GO_UNITS: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


class BenchError(Exception):
    """A broker or a tool failed; the measurement has no figure."""


@attrs.define
class Broker:
    """A running broker: its process, ports and scratch directory."""

    name: str
    process: subprocess.Popen[bytes]
    tcp_port: int
    http_port: int
    workdir: Path
    """Holds ``data/``, ``broker.log`` and whatever a workload writes (wrk's script)."""

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    def log_tail(self, lines: int = 15) -> str:
        """The end of the broker's log, for error messages."""
        try:
            text = (self.workdir / "broker.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def running_broker(name: str, command: list[str], scratch: Path) -> Iterator[Broker]:
    """Start ``command`` on fresh loopback ports and a fresh data dir; stop it on exit.

    Ready when ``GET /ping`` answers OK. Stopped with SIGTERM, then SIGKILL after
    ``STOP_GRACE`` seconds; its directory is removed afterwards.

    Dirty pages are flushed (``sync``) before each start: the previous broker's
    gigabyte of writes, still being written back, otherwise throttles the next one's
    writes (MPUB figures drifted 320k-535k msg/s between rounds without it).
    """
    os.sync()
    workdir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=scratch))
    data = workdir / "data"
    data.mkdir()
    tcp_port, http_port = free_port(), free_port()
    argv = [
        *command,
        f"--tcp-address=127.0.0.1:{tcp_port}",
        f"--http-address=127.0.0.1:{http_port}",
        # unused without TLS, but both default to 0.0.0.0:4152: keep everything on loopback
        f"--https-address=127.0.0.1:{free_port()}",
        f"--data-path={data}",
    ]
    with (workdir / "broker.log").open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603
    broker = Broker(name, process, tcp_port, http_port, workdir)
    try:
        started = time.monotonic()
        while not ping_ok(http_port):
            if process.poll() is not None:
                raise BenchError(
                    f"{name} exited with {process.returncode} before /ping:\n{broker.log_tail()}"
                )
            if time.monotonic() - started > READY_LIMIT:
                raise BenchError(f"{name} did not answer /ping within {READY_LIMIT:.0f} s")
            time.sleep(0.01)
        yield broker
    finally:
        stop(process)
        shutil.rmtree(workdir, ignore_errors=True)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after ``STOP_GRACE`` seconds."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_GRACE)
    except subprocess.TimeoutExpired:
        print(f"  note: pid {process.pid} ignored SIGTERM for {STOP_GRACE:.0f} s; SIGKILL")
        process.kill()
        process.wait()


def get_json(port: int, path: str) -> dict[str, object]:
    """``GET path`` on the broker's HTTP port, decoded as a JSON object."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10.0)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()
    if response.status != 200:
        raise BenchError(f"GET {path}: HTTP {response.status} {body[:200]!r}")
    document = json.loads(body)
    if not isinstance(document, dict):
        raise BenchError(f"GET {path}: not a JSON object")
    # nsqd < 1.0 wrapped replies in {"status_code", "data"}; take either layout
    data = document.get("data")
    return data if isinstance(data, dict) else document


def topic_stats(broker: Broker, topic: str) -> dict[str, object] | None:
    """The topic's entry of ``/stats`` (nsqd's layout, which trionsq keeps), if any."""
    stats = get_json(broker.http_port, f"/stats?format=json&topic={topic}")
    topics = stats.get("topics")
    for entry in topics if isinstance(topics, list) else []:
        if isinstance(entry, dict) and entry.get("topic_name") == topic:
            return entry
    return None


def message_count(broker: Broker, topic: str) -> int:
    """The topic's ``message_count`` (0 when the topic does not exist yet)."""
    entry = topic_stats(broker, topic)
    count = entry.get("message_count") if entry else 0
    return count if isinstance(count, int) else 0


def channel_depth(broker: Broker, topic: str, channel: str) -> int | None:
    """The channel's ``depth``, None when the channel is not there."""
    entry = topic_stats(broker, topic)
    channels = entry.get("channels") if entry else None
    for item in channels if isinstance(channels, list) else []:
        if isinstance(item, dict) and item.get("channel_name") == channel:
            depth = item.get("depth")
            return depth if isinstance(depth, int) else None
    return None


def wait_settled(broker: Broker, topic: str) -> int:
    """Poll the topic's message count until two reads 0.5 s apart agree; return it."""
    started = time.monotonic()
    last = -1
    while time.monotonic() - started < SETTLE_LIMIT:
        count = message_count(broker, topic)
        if count == last and count > 0:
            return count
        last = count
        time.sleep(0.5)
    raise BenchError(f"{broker.name}: {topic}'s message count still moving after {SETTLE_LIMIT} s")


def run_tool(argv: list[str], seconds: float) -> subprocess.CompletedProcess[str]:
    """Run a load tool to completion; raise unless it exits 0 within its slack."""
    try:
        done = subprocess.run(  # noqa: S603 - the tools under test
            argv, capture_output=True, text=True, timeout=seconds + TOOL_SLACK, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"{Path(argv[0]).name} still running {TOOL_SLACK:.0f} s late") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise BenchError(f"{Path(argv[0]).name} exited with {done.returncode}: {' | '.join(tail)}")
    return done


def go_seconds(text: str) -> float:
    """A Go ``time.Duration`` string (``5.0091s``, ``1m0.5s``, ``950ms``) in seconds."""
    parts = _GO_DURATION.findall(text)
    if not parts:
        raise BenchError(f"not a Go duration: {text!r}")
    return sum(float(number) * _GO_UNITS[unit] for number, unit in parts)
