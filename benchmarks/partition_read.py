"""Read throughput of ``GET /partition/read`` (issue 17), cold, over one keep-alive connection.

Starts the real ``nsqd`` command (the one next to this Python) on a temporary data
path, publishes N messages of S bytes with HTTP ``/mpub`` (5,000 per request),
restarts it so that only its tail cache (the last ``--mem-queue-size`` records, at
least 1,024) is in memory, then reads the whole partition from offset 0 in pages
with a plain blocking ``http.client`` loop on one connection, as the Spark source's
executors do: each answer is decoded (:func:`decode_record_batch`, the header and the
column views) and the next request starts at its ``next_offset``. Each page size is
measured after a fresh restart, so every run reads from the segment files (the page
cache may hold them: the first run warms it, the figures after it are the broker's).

The broker is pinned to CPU 0 and this reader to CPU 1 when there are two (unless
``--no-pin``: on a machine busy with other work, pinning can only lose). Prints one
line per page size: records/s, MB/s of bodies and of responses, the mean response
size and per-request time. Not a test; run by hand::

    .venv/bin/python benchmarks/partition_read.py                  # 1M x 200 bytes
    .venv/bin/python benchmarks/partition_read.py --messages 200000 --pages 10000:4194304
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import IO, Final

from trionsq.protocol.record_batch import decode_record_batch

NSQD: Final = Path(sys.executable).parent / "nsqd"
LISTENING: Final = re.compile(rb"HTTP: listening on 127\.0\.0\.1:(\d+)")
PER_REQUEST: Final = 5000
MB: Final = 1_000_000


class Broker:
    """An ``nsqd`` subprocess on a data path; stderr goes to a file."""

    def __init__(self, data: str, *flags: str, cpu: int | None) -> None:
        self.log_path = Path(data) / "stderr.log"
        self._log: IO[bytes] = self.log_path.open("wb")
        self.process = subprocess.Popen(  # noqa: S603 - the command under test
            [
                str(NSQD),
                f"--data-path={data}",
                "--tcp-address=127.0.0.1:0",
                "--http-address=127.0.0.1:0",
                *flags,
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        if cpu is not None:
            os.sched_setaffinity(self.process.pid, {cpu})
        deadline = time.monotonic() + 60
        while not (found := LISTENING.search(self.log_path.read_bytes())):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"nsqd did not start: {self.log_path.read_text()}")
            time.sleep(0.02)
        self.port = int(found[1])

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


def _request(
    connection: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None
) -> bytes:
    connection.request(method, path, body=body)
    response = connection.getresponse()
    data = response.read()
    if response.status != 200:
        raise SystemExit(f"{method} {path[:80]}: {response.status} {data[:200]!r}")
    return data


def publish(port: int, topic: str, messages: int, size: int) -> float:
    """Publish ``messages`` bodies of ``size`` bytes; seconds taken."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    started = time.perf_counter()
    path = f"/mpub?topic={topic}"
    for first in range(0, messages, PER_REQUEST):
        count = min(PER_REQUEST, messages - first)
        bodies = [b"%012d" % (first + i) + b"x" * (size - 12) for i in range(count)]
        _request(connection, "POST", path, b"\n".join(bodies))
    connection.close()
    return time.perf_counter() - started


def read_all(
    port: int, topic: str, max_records: int, max_bytes: int
) -> tuple[int, int, int, int, float]:
    """Read the partition from offset 0: (records, body bytes, response bytes,
    requests, seconds)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    base = "/partition/read?" + urllib.parse.urlencode(
        {"topic": topic, "partition": 0, "max_records": max_records, "max_bytes": max_bytes}
    )
    offset = records = body_bytes = response_bytes = requests = 0
    started = time.perf_counter()
    while True:
        data = _request(connection, "GET", f"{base}&offset={offset}")
        batch = decode_record_batch(data)
        requests += 1
        response_bytes += len(data)
        if not batch.count:
            break
        records += batch.count
        body_bytes += batch.body_data.nbytes
        offset = batch.next_offset
    elapsed = time.perf_counter() - started
    connection.close()
    return records, body_bytes, response_bytes, requests, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument(
        "--pages",
        default="1000:1048576,10000:4194304,100000:67108864",
        help="max_records:max_bytes pairs, comma-separated",
    )
    parser.add_argument(
        "--no-pin", action="store_true", help="leave the broker and the reader unpinned"
    )
    args = parser.parse_args()
    pages = [tuple(int(x) for x in pair.split(":")) for pair in args.pages.split(",")]
    two_cpus = len(os.sched_getaffinity(0)) >= 2 and not args.no_pin
    if two_cpus:
        os.sched_setaffinity(0, {1})
    data = tempfile.mkdtemp(prefix="trionsq-partition-read-")
    topic = "reads"
    try:
        broker = Broker(data, cpu=0 if two_cpus else None)
        seconds = publish(broker.port, topic, args.messages, args.size)
        broker.stop()
        print(
            f"published {args.messages:,} x {args.size} B in {seconds:.1f} s"
            f" ({args.messages / seconds:,.0f} msg/s over HTTP /mpub)"
        )
        for max_records, max_bytes in pages:
            broker = Broker(data, cpu=0 if two_cpus else None)  # cold: only the tail in memory
            try:
                records, body_bytes, response_bytes, requests, elapsed = read_all(
                    broker.port, topic, max_records, max_bytes
                )
            finally:
                broker.stop()
            if records != args.messages:
                raise SystemExit(f"read {records:,} records, expected {args.messages:,}")
            print(
                f"max_records={max_records:>6} max_bytes={max_bytes:>8}:"
                f" {records / elapsed:>9,.0f} records/s,"
                f" {body_bytes / elapsed / MB:6.1f} MB/s of bodies,"
                f" {response_bytes / elapsed / MB:6.1f} MB/s of responses;"
                f" {requests:,} requests of {response_bytes / requests / MB:.2f} MB,"
                f" {elapsed / requests * 1000:.1f} ms each"
            )
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
