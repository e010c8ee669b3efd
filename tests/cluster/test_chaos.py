"""A short chaos run (tests/cluster/chaos_run.py; longer ones: benchmarks/chaos.py): a
seeded schedule of mixed, overlapping faults under publishers, then heal, consume and
check. Seed 16 draws six fault kinds in under 10 s: one broker's lease revoked, that
leader killed, etcd stopped for 4 s with a replica move and every lease revoked
meanwhile, the lookupd killed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.cluster.chaos_run import run_chaos, schedule
from tests.cluster.failover_run import cluster_of_its_own

if TYPE_CHECKING:
    from pathlib import Path

SEED = 16


async def test_mixed_faults_lose_nothing_and_the_cluster_heals(tmp_path: Path) -> None:
    faults = schedule(SEED, 6, partitions=4)
    assert len({fault.kind for fault in faults}) == 6, faults
    # its own etcd (the run stops it); a spare broker: somewhere for the move to go
    with cluster_of_its_own(tmp_path, "chaos", 4) as cluster:
        history, verdict, events = await run_chaos(cluster, faults, partitions=4, replicas=3)
    report = "\n".join(events)
    assert "kill -9 broker" in report, report
    assert "move p" in report, report
    assert verdict.verdict.acknowledged > 100, (history.errors, report)
    assert verdict.verdict.lost == [], report
    assert verdict.verdict.phantom == [], report
    assert verdict.verdict.duplicated == [], report
    assert verdict.healed, (verdict.unhealed, report)
