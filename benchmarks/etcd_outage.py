"""etcd stopped for 30 s under an acknowledging publisher: 3 brokers, a topic of 4
partitions x 3 replicas. Reports what was acknowledged and refused before, during and
after the outage, what /ping said meanwhile, and checks the history (nothing
acknowledged lost, nothing that was never sent, no duplicates; see
tests/cluster/failover_run.py). Prints numbers; not a test::

    .venv/bin/python benchmarks/etcd_outage.py
    .venv/bin/python benchmarks/etcd_outage.py --seconds 10
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests/

from tests.cluster.failover_run import run_etcd_outage

from trionsq.cluster.etcd_process import start_etcd
from trionsq.cluster.local_cluster import LocalCluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trionsq-etcd-outage-") as name:
        directory = Path(name)
        etcd = start_etcd(directory / "etcd")
        cluster = LocalCluster(directory, etcd)
        try:
            cluster.start(3)
            history, verdict, outage = trio.run(
                lambda: run_etcd_outage(
                    cluster, partitions=4, replicas=3, seconds=arguments.seconds
                )
            )
        finally:
            cluster.stop()
            etcd.stop()
    acks = [at for acked in history.acked.values() for _, at, _ in acked]
    before = sum(at < outage.stopped_at for at in acks)
    during = sum(outage.stopped_at <= at < outage.started_at for at in acks)
    after = sum(at >= outage.started_at for at in acks)
    print(f"etcd down {outage.started_at - outage.stopped_at:.1f} s")
    print(f"acknowledged: before {before}, during {during}, after {after}")
    print(f"refused or failed (then retried): {history.errors}")
    pings = Counter(body.split(":")[0] for at, body in outage.pings)
    print(f"/ping during the outage: {dict(pings)}")
    first_after = min((at for at in acks if at >= outage.started_at), default=None)
    if first_after is not None:
        print(f"first acknowledgement {first_after - outage.started_at:.2f} s after etcd was back")
    print(
        f"lost: {len(verdict.lost)}, never sent: {len(verdict.phantom)}, duplicated: {len(verdict.duplicated)}"
    )


if __name__ == "__main__":
    main()
