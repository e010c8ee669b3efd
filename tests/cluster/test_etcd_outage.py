"""etcd stopped under a publisher (a short outage here; benchmarks/etcd_outage.py
stops it for 30 s): brokers keep what they have, refuse writes with a clear error
once their lease cannot be renewed (nothing silently lost), /ping says why, and
everything resumes when etcd is back."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.cluster.failover_run import run_etcd_outage
from trionsq.cluster.etcd_process import start_etcd
from trionsq.cluster.local_cluster import LocalCluster

if TYPE_CHECKING:
    from pathlib import Path


async def test_etcd_outage_loses_nothing_and_resumes(tmp_path: Path) -> None:
    etcd = start_etcd(tmp_path / "etcd")  # its own: this test stops it
    cluster = LocalCluster(tmp_path, etcd, cluster_id="outage")
    try:
        cluster.start(3)
        history, verdict, outage = await run_etcd_outage(
            cluster, partitions=2, replicas=3, seconds=4
        )
    finally:
        cluster.stop()
        etcd.stop()
    assert verdict.lost == []
    assert verdict.phantom == []
    assert verdict.duplicated == []
    during = [body for at, body in outage.pings if at > outage.stopped_at + 3]
    assert during, outage.pings
    assert all(body.startswith("NOK - etcd") for body in during), during
    refused = history.errors.get("E_FAILED_ON_NOT_WRITABLE", 0)
    assert refused > 0, history.errors  # refused with the clear error, not silently
    resumed = [at for acks in history.acked.values() for _, at, _ in acks if at > outage.started_at]
    assert len(resumed) > 20, history.errors
