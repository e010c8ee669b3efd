"""The durable partition log alone, with no broker: appends, recovery, cold reads, RSS.

Figures it prints:

- append throughput of batches of 200 bodies of 200 bytes (an MPUB b200), for the
  in-memory log (the reference), then ``TopicLog`` with no fsync, an fsync every
  2,500 records (nsqd's default ``--sync-every``) and an fsync after every batch;
- how long recovery takes to reopen the log of ``--records`` records (100 MiB
  segments: the last one is read record by record, the others only have their
  header read);
- cold reads of the whole log with a tiny tail cache, in ``read_cold`` chunks of
  1 MiB (the first read of each sealed segment verifies it), first with the files
  in the page cache, then after asking the kernel to drop them
  (``posix_fadvise(DONTNEED)``, which works without root for synced files);
- the process RSS at each step;
- ``open()`` of a log of ``--records`` records in many small segments
  (``--open-segment-mib``, 8 MiB by default): what a broker start costs per
  partition; then the first cold read of a sealed segment, which verifies it, and
  a second one.

::

    .venv/bin/python benchmarks/topic_log.py              # 1M records, in /tmp
    .venv/bin/python benchmarks/topic_log.py --records 200000 --directory /dev/shm/tl

On a tmpfs (``/dev/shm``) the figures show the log's own CPU cost; on a disk they
include the kernel's writeback of what was written, which on a small machine
competes with the writer for CPU. The tail cache holds 10,000 records while
appending (nsqd's default ``--mem-queue-size``) and 100 for the cold reads.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Final

from trionsq.queues.memory_log import MemoryLog
from trionsq.queues.topic_log import RecoveryReport, TopicLog

BATCH: Final = 200
BODY: Final = 200
MAX_BYTES_PER_FILE: Final = 100 * 1024 * 1024  # nsqd's default
OPEN_RUNS: Final = 5
PAGE: Final = os.sysconf("SC_PAGE_SIZE")


def rss_mib() -> float:
    """Resident set size now, in MiB."""
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * PAGE / (1 << 20)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bodies() -> list[bytes]:
    return [os.urandom(BODY) for _ in range(BATCH)]


def bench_memory(batches: int) -> float:
    """Records per second of MemoryLog.append, discarding as a consumer would."""
    log = MemoryLog()
    batch = bodies()
    start = time.perf_counter()
    for number in range(batches):
        log.append(batch, number)
        if number % 50 == 49:
            log.discard_before(log.next_id)
    return batches * BATCH / (time.perf_counter() - start)


def bench_append(directory: Path, batches: int, sync_every: int) -> tuple[float, TopicLog]:
    """Records per second of TopicLog.append; ``sync_every`` records per fsync (0: none)."""
    log, _ = TopicLog.open(
        directory, "bench-0", max_bytes_per_file=MAX_BYTES_PER_FILE, cache_records=10_000
    )
    batch = bodies()
    start = time.perf_counter()
    for number in range(batches):
        log.append(batch, number)
        if sync_every and log.unsynced >= sync_every:
            log.sync()
    elapsed = time.perf_counter() - start
    return batches * BATCH / elapsed, log


def drop_page_cache(directory: Path) -> None:
    for path in directory.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def bench_cold(log: TopicLog) -> tuple[float, int]:
    """Records per second reading the whole log from disk in 1 MiB chunks."""
    next_id = log.start_id
    count = 0
    start = time.perf_counter()
    while next_id < log.next_id:
        records = log.read_cold(next_id, 1 << 30)
        if not records:
            break
        count += len(records)
        next_id = records[-1].internal_id + 1
    return count / (time.perf_counter() - start), count


def bench_open(directory: Path, batches: int, max_bytes_per_file: int) -> None:
    """Time ``TopicLog.open`` of a log in many segments, then a first cold read."""

    def open_log() -> tuple[TopicLog, RecoveryReport]:
        return TopicLog.open(
            directory, "open-0", max_bytes_per_file=max_bytes_per_file, cache_records=10_000
        )

    log, _ = open_log()
    batch = bodies()
    for number in range(batches):
        log.append(batch, number)
    log.close()
    times: list[float] = []
    for _ in range(OPEN_RUNS):
        gc.collect()
        start = time.perf_counter()
        log, report = open_log()
        times.append(time.perf_counter() - start)
        log.close()
    times.sort()
    print(
        f"open() of {report.records:,} records in {report.segments} segments of "
        f"{max_bytes_per_file / (1 << 20):.0f} MiB ({report.verified_lazily} not scanned): "
        f"best {times[0] * 1000:.1f} ms, median {times[len(times) // 2] * 1000:.1f} ms"
    )
    log, _ = open_log()
    start = time.perf_counter()
    records = log.read_cold(log.start_id, 1000)
    elapsed = time.perf_counter() - start
    print(
        f"first read_cold of a sealed segment ({len(records)} records, verifies the "
        f"segment): {elapsed * 1000:.1f} ms"
    )
    start = time.perf_counter()
    log.read_cold(log.start_id + 5000, 1000)
    print(f"next read_cold in that segment: {(time.perf_counter() - start) * 1000:.1f} ms")
    log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--directory", type=Path, help="where the logs go (default: a temp dir)")
    parser.add_argument(
        "--open-segment-mib", type=int, default=8, help="segment size of the open() figure"
    )
    options = parser.parse_args()
    batches = max(options.records // BATCH, 1)
    base = options.directory or Path(tempfile.mkdtemp(prefix="topic-log-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"{batches * BATCH:,} records of {BODY} B in batches of {BATCH}; files in {base}")
    print(f"RSS at start: {rss_mib():.1f} MiB")
    try:
        memory = bench_memory(batches)
        print(f"MemoryLog.append            {memory:>12,.0f} records/s  (reference)")
        figures: list[tuple[str, int, int]] = [
            ("no fsync", 0, batches),
            ("fsync every 2,500 records", 2_500, batches),
            ("fsync every batch", BATCH, max(batches // 20, 50)),
        ]
        for label, sync_every, count in figures:
            directory = base / label.replace(" ", "-").replace(",", "")
            gc.collect()
            rate, log = bench_append(directory, count, sync_every)
            log.close()
            print(
                f"TopicLog.append, {label:<26} {rate:>10,.0f} records/s"
                f"  ({rate / memory:.0%} of MemoryLog), {count * BATCH:,} records,"
                f" RSS {rss_mib():.1f} MiB"
            )
            if sync_every:
                shutil.rmtree(directory)
        directory = base / "no-fsync"
        gc.collect()
        before = rss_mib()
        start = time.perf_counter()
        log, report = TopicLog.open(
            directory, "bench-0", max_bytes_per_file=MAX_BYTES_PER_FILE, cache_records=100
        )
        elapsed = time.perf_counter() - start
        print(
            f"recovery of {report.records:,} records in {report.segments} segments "
            f"({report.verified_lazily} sealed, not read): {elapsed * 1000:.0f} ms; "
            f"RSS {before:.1f} -> {rss_mib():.1f} MiB"
        )
        rate, count = bench_cold(log)
        print(f"read_cold, page cache warm  {rate:>12,.0f} records/s  ({count:,} records)")
        drop_page_cache(directory)
        rate, count = bench_cold(log)
        print(f"read_cold, page cache dropped {rate:>10,.0f} records/s  ({count:,} records)")
        print(f"RSS after cold reads: {rss_mib():.1f} MiB, peak {peak_rss_mib():.1f} MiB")
        print(f"disk: {log.disk_bytes / (1 << 20):,.1f} MiB")
        log.close()
        bench_open(base / "open", batches, options.open_segment_mib << 20)
    finally:
        if options.directory is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
