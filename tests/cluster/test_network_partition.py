"""A network partition inside the test's own namespaces, with a Jepsen-style checker.

Hosts (tests/cluster/netns.py): the client with the lookupd, etcd, three brokers.
The partition's leader is cut off from etcd and the other brokers (the client can
still reach it) for longer than the lease TTL, then healed. Over the publish
history and the final logs (tests/cluster/partition_driver.py), the checker holds:

- nothing acknowledged is lost, nothing appears that was never sent, nothing twice;
- no two brokers acknowledged for the partition in one epoch;
- the isolated leader's uncommitted tail was cut, and every replica ends equal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.cluster.netns import sandbox
from trionsq.cluster.epochs import EpochHistory

ROOT = Path(__file__).resolve().parents[2]


def test_a_cut_off_leader_loses_nothing_acknowledged(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("creating network namespaces needs root (CI runs as root)")
    with sandbox() as made:
        made.add("client", 2)
        made.add("etcd", 10)
        for number in range(3):
            made.add(f"b{number}", 20 + number)
        plan = {
            "directory": str(tmp_path),
            "tag": made.tag,
            "subnet": made.subnet,
            "hosts": made.hosts,
            "seconds": 4.0,
        }
        (tmp_path / "plan.json").write_text(json.dumps(plan))
        out = tmp_path / "report.json"
        run = subprocess.run(  # noqa: S603 - our own arguments
            [
                *made.run_in("client"),
                sys.executable,
                "-m",
                "tests.cluster.partition_driver",
                str(tmp_path / "plan.json"),
                str(out),
            ],
            cwd=ROOT,
            capture_output=True,
            timeout=180,
            check=False,
        )
        assert run.returncode == 0, run.stderr.decode(errors="replace")[-3000:]
    report = json.loads(out.read_text())
    assert len(report["acked"]) > 50, report["errors"]
    assert report["lost"] == []
    assert report["phantom"] == []
    assert report["duplicated"] == []
    # no two leaders acknowledged in one epoch (epochs as every replica's log has them)
    histories = {tuple(map(tuple, e)) for e in report["epochs"].values()}
    assert len(histories) == 1, report["epochs"]
    history = EpochHistory([tuple(e) for e in next(iter(histories))])
    by_epoch: dict[int, set[str]] = defaultdict(set)
    for body, _, _ in report["acked"]:
        by_epoch[history.epoch_at(report["consumed_ids"][body])].add(report["acked_by"][body])
    assert all(len(brokers) == 1 for brokers in by_epoch.values()), by_epoch
    assert len(by_epoch) >= 2  # the partition changed leader
    # the isolated leader stopped acknowledging within its lease (2 s; 1 s of slack)
    late = [
        a
        for b, a, _ in report["acked"]
        if report["acked_by"][b] == report["cut_leader"] and a > report["cut_at"] + 3
    ]
    assert late == []
    # the isolated leader's uncommitted tail was cut; every replica ends the same
    assert report["cut_lines"][report["cut_leader"]], report["cut_lines"]
    assert len(set(report["ends"].values())) == 1, report["ends"]
    print(  # noqa: T201 - pytest -s shows it
        f"acknowledged {len(report['acked'])}, epochs {dict(by_epoch)},"
        f" cut on the old leader: {report['cut_lines'][report['cut_leader']]}, errors {report['errors']}"
    )
