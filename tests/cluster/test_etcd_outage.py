"""etcd stopped under a publisher (a short outage here; benchmarks/etcd_outage.py
stops it for 30 s): brokers keep what they have, refuse writes with a clear error
once their lease cannot be renewed (nothing silently lost), /ping says why, and
everything resumes when etcd is back."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.cluster.failover_run import cluster_of_its_own, run_etcd_outage, run_lease_loss

if TYPE_CHECKING:
    from pathlib import Path


async def test_etcd_outage_loses_nothing_and_resumes(tmp_path: Path) -> None:
    with cluster_of_its_own(tmp_path, "outage", 3) as cluster:  # this test stops its etcd
        history, verdict, outage = await run_etcd_outage(
            cluster, partitions=2, replicas=3, seconds=4
        )
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


async def test_every_lease_lost_at_once_loses_nothing_and_the_lookupd_goes_on(
    tmp_path: Path,
) -> None:
    """The coordinator's lease ending must not end its lookupd (it campaigns again),
    and brokers registering again must find their partitions led again."""
    with cluster_of_its_own(tmp_path, "leases", 3) as cluster:
        history, verdict, revoked_at = await run_lease_loss(cluster, partitions=2, replicas=3)
        assert cluster.lookupd is not None
        assert cluster.lookupd.poll() is None, "the lookupd exited"
    assert verdict.lost == []
    assert verdict.phantom == []
    assert verdict.duplicated == []
    for partition in range(2):
        after = [at for _, at, _ in history.acked[partition] if at > revoked_at]
        assert after, f"partition {partition} took no publish after the leases went"
    assert "lost the coordinator lease" in (tmp_path / "lookupd.log").read_text()
