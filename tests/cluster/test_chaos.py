"""A short chaos run (tests/cluster/chaos_run.py; longer ones: benchmarks/chaos.py): a
seeded schedule of mixed, overlapping faults under publishers, then heal, consume and
check. Seed 16 draws six fault kinds in under 10 s: one broker's lease revoked, that
leader killed, etcd stopped for 4 s with a replica move and every lease revoked
meanwhile, the lookupd killed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.cluster.chaos_run import run_chaos, schedule
from trionsq.cluster.etcd_process import start_etcd
from trionsq.cluster.local_cluster import LocalCluster

if TYPE_CHECKING:
    from pathlib import Path

SEED = 16


async def test_mixed_faults_lose_nothing_and_the_cluster_heals(tmp_path: Path) -> None:
    faults = schedule(SEED, 6, partitions=4)
    assert len({fault.kind for fault in faults}) == 6, faults
    etcd = start_etcd(tmp_path / "etcd")  # its own: the run stops it
    cluster = LocalCluster(tmp_path, etcd, cluster_id="chaos")
    try:
        cluster.start(4)  # a spare broker: somewhere for the move to go
        history, verdict, events = await run_chaos(cluster, faults, partitions=4, replicas=3)
    finally:
        cluster.stop()
        etcd.stop()
    report = "\n".join(events)
    assert "kill -9 broker" in report, report
    assert "move p" in report, report
    assert verdict.verdict.acknowledged > 100, (history.errors, report)
    assert verdict.verdict.lost == [], report
    assert verdict.verdict.phantom == [], report
    assert verdict.verdict.duplicated == [], report
    assert verdict.healed, (verdict.unhealed, report)
