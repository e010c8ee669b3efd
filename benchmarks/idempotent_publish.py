"""What ``##idempotency_key`` costs the broker: MPUB_EXT throughput with keys, without
keys and plain MPUB, and the broker's RSS growth per 1,000,000 keys remembered.

Starts its own ``trionsq serve`` (durable, in a temporary directory, so the log holds
only its tail cache in memory and RSS growth is the keys' table) pinned to CPU 0,
and publishes from this process pinned to CPU 1 over one raw socket: batches of 200
messages with 200-byte bodies, encoded before the clock starts, ``--window``
batches in flight. Phases, each run ``--rounds`` times in turn:

- ``mpub``: plain MPUB to a plain topic;
- ``ext``: MPUB_EXT whose headers carry no key (``{"row":"<25 chars>"}``, the size of
  a keyed header);
- ``ext+key``: MPUB_EXT with a fresh ``##idempotency_key`` per message;
- ``ext+key replay``: the keyed batches of the round again: every message is a
  duplicate and nothing is stored (what a replayed Spark micro-batch costs).

Each phase also gives the broker's CPU time per message (/proc), what compares on
a shared machine. Then RSS: 1,000,000 unkeyed, then 1,000,000 keyed messages to two fresh ext topics,
VmRSS read from ``/proc`` around each. Prints numbers; not a test::

    .venv/bin/python benchmarks/idempotent_publish.py
    .venv/bin/python benchmarks/idempotent_publish.py --batches 500 --rounds 5 --no-pin
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Final

import orjson

from trionsq.protocol.client import encode_command
from trionsq.protocol.commands import ExtMessage, Mpub, MpubExt

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

BATCH: Final = 200
BODY: Final = b"b" * 200
LISTENING: Final = re.compile(r"(TCP|HTTP): listening on (\S+)")
_FRAME: Final = struct.Struct(">ii")


def start_broker(data: str, pin: bool) -> tuple[subprocess.Popen[bytes], str, str]:
    """A durable ``trionsq serve`` on ports the kernel picks (read back from its log)."""
    log_path = Path(data) / "broker.log"
    command = [
        sys.executable,
        "-c",
        "from trionsq.cli import main; main()",
        "serve",
        f"--data-path={data}",
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
    ]
    if pin:
        command = ["taskset", "-c", "0", *command]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)  # noqa: S603
    deadline = time.monotonic() + 30
    while True:
        found = {m[1]: m[2] for m in LISTENING.finditer(log_path.read_text())}
        if "TCP" in found and "HTTP" in found:
            return process, found["TCP"], found["HTTP"]
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the broker did not start: {log_path.read_text()}")
        time.sleep(0.02)


def http(address: str, path: str, method: str = "POST", **query: str) -> bytes:
    url = f"http://{address}{path}?{urllib.parse.urlencode(query)}"
    request = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
        body: bytes = response.read()
        return body


def message_count(address: str, topic: str) -> int:
    stats = orjson.loads(http(address, "/stats", "GET", format="json", topic=topic))
    (found,) = [t for t in stats["topics"] if t["topic_name"] == topic]
    count: int = found["message_count"]
    return count


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit("no VmRSS")


def batches(topic: str, key_name: str | None, tag: str, count: int) -> Iterator[bytes]:
    """``count`` encoded batches to ``topic``; ``key_name`` None: plain MPUB."""
    if key_name is None:
        plain = encode_command(Mpub(topic, (BODY,) * BATCH))
        for _ in range(count):
            yield plain
        return
    for number in range(count):
        messages = tuple(
            ExtMessage(orjson.dumps({key_name: f"bench-{tag}-{number:06d}-{n:03d}"}), BODY)
            for n in range(BATCH)
        )
        yield encode_command(MpubExt(topic, messages))


class Publisher:
    """One raw connection: pipelined batches, each answered ``OK``."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(b"  V2")
        self.buffer = bytearray()

    def send_all(self, encoded: Iterable[bytes], window: int) -> int:
        """Send every batch with at most ``window`` unanswered; returns how many."""
        outstanding = sent = 0
        for data in encoded:
            while outstanding >= window:
                outstanding -= self._answers()
            self.sock.sendall(data)
            outstanding += 1
            sent += 1
        while outstanding:
            outstanding -= self._answers()
        return sent

    def _answers(self) -> int:
        """Read what has come; returns how many OKs (heartbeats are answered)."""
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise SystemExit("the broker closed the connection")
        buffer = self.buffer
        buffer += chunk
        done = position = 0
        while len(buffer) - position >= 8:
            size, kind = _FRAME.unpack_from(buffer, position)
            if len(buffer) - position < 4 + size:
                break
            data = bytes(buffer[position + 8 : position + 4 + size])
            position += 4 + size
            if kind != 0:
                raise SystemExit(f"error frame: {data!r}")
            if data == b"_heartbeat_":
                self.sock.sendall(b"NOP\n")
            elif data == b"OK":
                done += 1
        del buffer[:position]
        return done

    def close(self) -> None:
        self.sock.close()


def cpu_seconds(pid: int) -> float:
    """The broker's CPU time so far (user + system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(publisher: Publisher, encoded: list[bytes], window: int, pid: int) -> tuple[float, float]:
    """Messages per second for sending ``encoded``, and the broker's CPU µs a message
    (the figure that compares on a shared machine)."""
    start, cpu = time.perf_counter(), cpu_seconds(pid)
    sent = publisher.send_all(encoded, window) * BATCH
    return sent / (time.perf_counter() - start), (cpu_seconds(pid) - cpu) / sent * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=1000, help="batches per phase and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=int, default=8, help="batches in flight")
    parser.add_argument("--rss-messages", type=int, default=1_000_000)
    parser.add_argument("--no-pin", action="store_true", help="run without taskset")
    arguments = parser.parse_args()
    pin = not arguments.no_pin
    if pin:
        os.sched_setaffinity(0, {1})
    with tempfile.TemporaryDirectory(prefix="trionsq-idempotence-bench-") as data:
        process, tcp, web = start_broker(data, pin)
        try:
            run(arguments, process.pid, tcp, web)
        finally:
            process.terminate()
            process.wait(timeout=30)


def run(arguments: argparse.Namespace, pid: int, tcp: str, web: str) -> None:
    count, rounds, window = arguments.batches, arguments.rounds, arguments.window
    for topic in ("ext", "keyed"):
        http(web, "/topic/create", topic=topic, ext="true")
    http(web, "/topic/create", topic="plain")
    publisher = Publisher(tcp)
    results: dict[str, list[tuple[float, float]]] = {
        "mpub": [],
        "ext": [],
        "ext+key": [],
        "ext+key replay": [],
    }
    plain = list(batches("plain", None, "", count))
    unkeyed = list(batches("ext", "row", "x", count))
    publisher.send_all(plain[:50], window)  # warm-up: connections, first appends
    publisher.send_all(unkeyed[:50], window)
    for round_number in range(rounds):
        keyed = list(batches("keyed", "##idempotency_key", f"r{round_number}", count))
        results["mpub"].append(timed(publisher, plain, window, pid))
        results["ext"].append(timed(publisher, unkeyed, window, pid))
        results["ext+key"].append(timed(publisher, keyed, window, pid))
        results["ext+key replay"].append(timed(publisher, keyed, window, pid))
    expected = rounds * count * BATCH
    stored = message_count(web, "keyed")
    print(f"MPUB batches of {BATCH}, {len(BODY)}-byte bodies, one connection, {window} in flight")
    print(
        f"{count * BATCH:,} messages per phase, {rounds} rounds; msg/s median (min-max),"
        " broker CPU µs a message median (min-max):"
    )
    for name, figures in results.items():
        rates = [rate for rate, _ in figures]
        costs = [cost for _, cost in figures]
        print(
            f"  {name:16} {statistics.median(rates):>10,.0f}  ({min(rates):,.0f}-{max(rates):,.0f})"
            f"  {statistics.median(costs):5.2f} µs ({min(costs):.2f}-{max(costs):.2f})"
        )
    print(
        f"  keyed topic holds {stored:,} messages (expected {expected:,}: replays stored nothing)"
    )
    if stored != expected:
        raise SystemExit("duplicates were stored")
    rss(arguments.rss_messages, pid, web, publisher, window)
    publisher.close()


def rss(total: int, pid: int, web: str, publisher: Publisher, window: int) -> None:
    """RSS growth for ``total`` unkeyed, then ``total`` keyed messages."""
    count = total // BATCH
    growth: dict[str, int] = {}
    for name, key_name in (("unkeyed", "row"), ("keyed", "##idempotency_key")):
        topic = f"rss-{name}"
        http(web, "/topic/create", topic=topic, ext="true")
        time.sleep(1.0)
        before = rss_kib(pid)
        publisher.send_all(batches(topic, key_name, "rss", count), window)
        time.sleep(1.0)
        growth[name] = rss_kib(pid) - before
    per_key = (growth["keyed"] - growth["unkeyed"]) * 1024 / (count * BATCH)
    print(f"RSS growth for {count * BATCH:,} messages to a fresh ext topic (durable log):")
    print(f"  without keys {growth['unkeyed'] / 1024:8.1f} MiB")
    print(f"  with keys    {growth['keyed'] / 1024:8.1f} MiB")
    print(
        f"  the keys' table: {per_key:.0f} bytes per key,"
        f" {per_key * 1_000_000 / 2**20:.0f} MiB per 1,000,000 keys"
    )


if __name__ == "__main__":
    main()
