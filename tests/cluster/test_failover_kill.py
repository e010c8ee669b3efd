"""kill -9 of partition leaders under a publisher, real processes (the short run; the
20-kill run is benchmarks/failover.py): nothing acknowledged is lost, nothing
appears that was never sent, retries are stored once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.cluster.failover_run import run_failover
from trionsq.cluster.local_cluster import LocalCluster

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.cluster.etcd_process import EtcdServer


async def test_leaders_killed_under_a_publisher_lose_nothing_acknowledged(
    etcd: EtcdServer, cluster_id: str, tmp_path: Path
) -> None:
    cluster = LocalCluster(tmp_path, etcd, cluster_id=cluster_id)
    try:
        cluster.start(3)
        history, verdict = await run_failover(cluster, partitions=4, replicas=3, kills=2, pause=1.0)
    finally:
        cluster.stop()
    assert verdict.acknowledged > 50, history.errors
    assert verdict.lost == []
    assert verdict.phantom == []
    assert verdict.duplicated == []
    assert len(verdict.failover_seconds) == 2
    assert max(verdict.failover_seconds) < 10, verdict.failover_seconds
