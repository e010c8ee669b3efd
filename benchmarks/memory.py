"""The broker's memory under three loads (issue 14), against the real ``nsqd`` command.

- ``queued``: N messages of S bytes published over TCP to a topic whose channel has
  no reader yet, RSS before and after; then every message is consumed and checked
  (what the tail cache no longer holds comes back through cold reads).
- ``bursts``: B bursts of C connections that connect, send the magic, IDENTIFY and
  NOP, and close; RSS after each burst, once the broker has closed every socket.
  Passes when the last is within ``--burst-ratio`` of the first.
- ``idle``: C connections that send the magic and nothing else; RSS per connection.

Each scenario starts its own ``nsqd`` (the one next to this Python) on a temporary
data path, 127.0.0.1 port 0, and reads VmRSS from ``/proc/<pid>/status``. The
broker's accepted sockets are counted in ``/proc/<pid>/fd``, so the figures are
taken once it holds (or has closed) every connection. Prints one line per
measurement and exits 1 when one is over its limit. Not a timed test: run by hand::

    .venv/bin/python benchmarks/memory.py                    # all three, the issue's sizes
    .venv/bin/python benchmarks/memory.py --only idle --idle 2000
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Final

NSQD: Final = Path(sys.executable).parent / "nsqd"
LISTENING: Final = re.compile(rb"TCP: listening on 127\.0\.0\.1:(\d+)")
MAGIC: Final = b"  V2"
IDENTIFY: Final = b"IDENTIFY\n"
MIB: Final = 1024 * 1024
SETTLE: Final = 1.0
"""Seconds given to the broker after its sockets reached the count wanted, so its
tasks for them have ended (or started) before RSS is read."""


class Broker:
    """An ``nsqd`` subprocess on a fresh data path; its stderr goes to a file, so a
    chatty broker never blocks on a full pipe."""

    def __init__(self, nsqd: str, *flags: str) -> None:
        self.data = tempfile.mkdtemp(prefix="trionsq-memory-")
        self.log_path = Path(self.data) / "stderr.log"
        self._log: IO[bytes] = self.log_path.open("wb")
        self.process = subprocess.Popen(  # noqa: S603 - the command under test
            [
                nsqd,
                f"--data-path={self.data}",
                "--tcp-address=127.0.0.1:0",
                "--http-address=127.0.0.1:0",
                *flags,
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        deadline = time.monotonic() + 30
        while not (found := LISTENING.search(self.log_path.read_bytes())):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"nsqd did not start: {self.log_path.read_text()}")
            time.sleep(0.02)
        self.tcp = ("127.0.0.1", int(found[1]))
        self.fd_base = self.descriptors()

    def rss_mib(self) -> float:
        """VmRSS, in MiB."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        if found is None:
            raise SystemExit(f"no VmRSS for process {self.process.pid}")
        return int(found[1]) / 1024

    def descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def await_descriptors(self, count: int, limit: float = 120.0) -> None:
        """Until the broker holds ``count`` descriptors more than at start, then
        :data:`SETTLE` seconds more."""
        deadline = time.monotonic() + limit
        while self.descriptors() != self.fd_base + count:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"the broker holds {self.descriptors() - self.fd_base} sockets, not {count}"
                )
            time.sleep(0.05)
        time.sleep(SETTLE)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()
        shutil.rmtree(self.data, ignore_errors=True)


def connect(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=60)
    sock.sendall(MAGIC)
    return sock


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    size, kind = struct.unpack(">ii", receive_exactly(sock, 8))
    return kind, receive_exactly(sock, size - 4)


def receive_exactly(sock: socket.socket, count: int) -> bytes:
    parts: list[bytes] = []
    while count:
        part = sock.recv(min(count, 4 * MIB))
        if not part:
            raise ConnectionError("the broker closed the connection")
        parts.append(part)
        count -= len(part)
    return b"".join(parts)


def body_of(number: int, size: int) -> bytes:
    """A body that says which message it is and is damaged detectably anywhere."""
    stamp = f"{number:08d}".encode()
    return stamp + bytes([number % 251]) * (size - len(stamp))


def verdict(ok: bool) -> str:
    return "pass" if ok else "FAIL"


def queued(nsqd: str, count: int, size: int, limit: float) -> bool:
    broker = Broker(nsqd)
    try:
        consumer = connect(broker.tcp)  # the channel exists, and nothing reads it yet
        consumer.sendall(b"SUB big c\n")
        if read_frame(consumer) != (0, b"OK"):
            raise SystemExit("SUB refused")
        time.sleep(SETTLE)
        before = broker.rss_mib()
        producer = connect(broker.tcp)
        for number in range(count):
            body = body_of(number, size)
            producer.sendall(b"PUB big\n" + struct.pack(">i", len(body)) + body)
            if read_frame(producer) != (0, b"OK"):
                raise SystemExit(f"PUB {number} refused")
        time.sleep(SETTLE)
        after = broker.rss_mib()
        started = time.monotonic()
        consumer.sendall(b"RDY 10\n")
        seen: set[int] = set()
        damaged = 0
        while len(seen) < count:
            kind, data = read_frame(consumer)
            if kind == 0:  # a heartbeat
                consumer.sendall(b"NOP\n")
                continue
            message_id, body = data[10:26], data[26:]
            number = int(body[:8])
            damaged += body != body_of(number, size)
            seen.add(number)
            consumer.sendall(b"FIN " + message_id + b"\n")
        elapsed = time.monotonic() - started
        consumed = broker.rss_mib()
        ok = after <= limit and not damaged
        print(
            f"queued  {count} x {size / MIB:g} MiB: RSS before {before:.0f} MiB, after {after:.0f}"
            f" MiB (limit {limit:.0f}); consumed all {len(seen)} in {elapsed:.1f} s,"
            f" {damaged} damaged, RSS then {consumed:.0f} MiB  {verdict(ok)}"
        )
        producer.close()
        consumer.close()
        return ok
    finally:
        broker.stop()


def bursts(nsqd: str, rounds: int, connections: int, ratio: float) -> bool:
    broker = Broker(nsqd)
    hello = MAGIC + IDENTIFY + struct.pack(">i", 2) + b"{}" + b"NOP\n"
    try:
        time.sleep(SETTLE)
        before = broker.rss_mib()
        after: list[float] = []
        for _ in range(rounds):
            socks = [socket.create_connection(broker.tcp, timeout=60) for _ in range(connections)]
            for sock in socks:
                sock.sendall(hello)
            broker.await_descriptors(connections)
            for sock in socks:
                sock.close()
            broker.await_descriptors(0)
            after.append(broker.rss_mib())
        limit = after[0] * ratio
        ok = after[-1] <= limit
        per_burst = (after[-1] - after[0]) / max(rounds - 1, 1)
        print(
            f"bursts  {rounds} x {connections} connections: RSS before {before:.0f} MiB,"
            f" after the first {after[0]:.0f}, after the last {after[-1]:.0f} MiB"
            f" (limit {limit:.0f}), {per_burst:+.1f} MiB per burst"
            f" [{' '.join(f'{r:.0f}' for r in after)}]  {verdict(ok)}"
        )
        return ok
    finally:
        broker.stop()


def idle(nsqd: str, connections: int, limit_kib: float) -> bool:
    broker = Broker(nsqd)
    try:
        time.sleep(SETTLE)
        before = broker.rss_mib()
        socks = [connect(broker.tcp) for _ in range(connections)]
        broker.await_descriptors(connections)
        after = broker.rss_mib()
        each = (after - before) * 1024 / connections
        ok = each <= limit_kib
        print(
            f"idle    {connections} connections: RSS before {before:.0f} MiB, after {after:.0f}"
            f" MiB, {each:.1f} KiB per connection (limit {limit_kib:g})  {verdict(ok)}"
        )
        for sock in socks:
            sock.close()
        return ok
    finally:
        broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--nsqd", default=str(NSQD), help="the command to measure")
    parser.add_argument("--only", choices=("queued", "bursts", "idle"), action="append")
    parser.add_argument("--messages", type=int, default=1000, help="queued: how many")
    parser.add_argument("--size", type=int, default=MIB, help="queued: body bytes")
    parser.add_argument("--queued-limit-mib", type=float, default=150.0)
    parser.add_argument("--bursts", type=int, default=12)
    parser.add_argument("--connections", type=int, default=5000, help="per burst")
    parser.add_argument("--burst-ratio", type=float, default=1.2)
    parser.add_argument("--idle", type=int, default=10_000, help="idle connections")
    parser.add_argument("--idle-limit-kib", type=float, default=8.0)
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the client side holds them all
    chosen = args.only or ["queued", "bursts", "idle"]
    results = []
    if "queued" in chosen:
        results.append(queued(args.nsqd, args.messages, args.size, args.queued_limit_mib))
    if "bursts" in chosen:
        results.append(bursts(args.nsqd, args.bursts, args.connections, args.burst_ratio))
    if "idle" in chosen:
        results.append(idle(args.nsqd, args.idle, args.idle_limit_kib))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
