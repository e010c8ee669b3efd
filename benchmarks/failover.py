"""Failover under kill -9: 3 brokers, 1 etcd, a topic of 4 partitions x 3 replicas; a
publisher acknowledging every message while the leader of one partition after
another is killed with SIGKILL (and restarted), ``--kills`` times (20 by default).

Every message is a PUB_EXT with ``##idempotency_key`` (the publisher retries the same
key until acknowledged); afterwards every partition is consumed and the history is
checked (tests/cluster/failover_run.py): acknowledged messages lost, messages that
were never sent, duplicates, and failover time per kill (kill -> the partition's
first acknowledgement on a new connection). Prints numbers; not a test::

    .venv/bin/python benchmarks/failover.py
    .venv/bin/python benchmarks/failover.py --kills 5 --pause 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests/

from tests.cluster.failover_run import run_failover

from trionsq.cluster.etcd_process import start_etcd
from trionsq.cluster.local_cluster import LocalCluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--pause", type=float, default=2.0, help="seconds between kills")
    parser.add_argument("--lease-ttl", default="2s", help="the brokers' and lookupd's etcd lease")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trionsq-failover-") as name:
        directory = Path(name)
        etcd = start_etcd(directory / "etcd")
        cluster = LocalCluster(directory, etcd, lease_ttl=arguments.lease_ttl)
        try:
            cluster.start(3)
            history, verdict = trio.run(
                lambda: run_failover(
                    cluster, partitions=4, replicas=3, kills=arguments.kills, pause=arguments.pause
                )
            )
        finally:
            cluster.stop()
            etcd.stop()
    seconds = sorted(verdict.failover_seconds)
    print(f"kills: {len(history.kills)}, acknowledged: {verdict.acknowledged}")
    print(
        f"lost: {len(verdict.lost)}, never sent: {len(verdict.phantom)}, duplicated: {len(verdict.duplicated)}"
    )
    print(f"publish errors seen (then retried): {history.errors}")
    if seconds:
        print(
            f"failover seconds: p50 {statistics.median(seconds):.2f}, max {seconds[-1]:.2f}, "
            f"all {[round(s, 2) for s in seconds]}"
        )


if __name__ == "__main__":
    main()
