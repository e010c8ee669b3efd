"""The network-partition run, inside the test's own namespaces (tests/cluster/netns.py).

Run by tests/cluster/test_network_partition.py as
``ip netns exec <client namespace> python -m tests.cluster.partition_driver PLAN OUT``:
from the client's namespace it starts etcd and three brokers in their own
namespaces and the lookupd beside itself, creates a topic of one partition and
three replicas, publishes (tests/cluster/failover_run.py's publisher), cuts the
leader off from etcd and the other brokers (not from the client: it keeps taking
publishes it cannot commit) for a while, heals, lets it catch up, consumes the
partition and writes the history and what each broker holds as JSON to OUT.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import trio

from tests.cluster.failover_run import History, Lookup, run_history
from tests.cluster.netns import Sandbox
from trionsq.cluster.etcd_process import start_etcd
from trionsq.cluster.local_cluster import LocalCluster
from trionsq.http.client import http_get
from trionsq.testing import wait_until

if TYPE_CHECKING:
    from trionsq.cluster.local_cluster import BrokerProcess


async def _end_count(broker: BrokerProcess) -> int:
    reply = await http_get(
        f"{broker.host}:{broker.http_port}",
        "/stats?format=json&topic=failover",
        connect_timeout=2,
        request_timeout=5,
    )
    partition = orjson.loads(reply.body)["topics"][0]["partitions"][0]
    count: int = partition["end_count"]
    return count


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    output = Path(sys.argv[2])
    directory = Path(plan["directory"])
    made = Sandbox(plan["tag"], plan["subnet"], {k: tuple(v) for k, v in plan["hosts"].items()})
    etcd_ns, etcd_ip = made.hosts["etcd"]
    etcd = start_etcd(directory / "etcd", host=etcd_ip, prefix=("ip", "netns", "exec", etcd_ns))
    cluster = LocalCluster(
        directory, etcd, cluster_id="netsplit", lookupd_host=made.hosts["client"][1]
    )
    brokers = ["b0", "b1", "b2"]
    cut_for = float(plan["seconds"])
    report: dict[str, object] = {}

    async def disrupt(lookup: Lookup, history: History) -> None:
        await trio.sleep(2.0)
        await lookup.refresh()
        leader_id = lookup.leaders[0][2]
        leader = next(n for n in brokers if made.hosts[n][1] == leader_id.split(":")[0])
        others = ["etcd", *(b for b in brokers if b != leader)]
        history.kills.append((0, leader_id, time.monotonic()))
        made.cut(leader, others)
        for other in others[1:]:
            made.cut(other, [leader])
        await trio.sleep(cut_for)
        made.heal(leader, others)
        for other in others[1:]:
            made.heal(other, [leader])
        report["cut_leader"] = leader_id
        report["healed_at"] = time.monotonic()
        # the old leader follows again (its tail cut), then catches up
        log = cluster.by_id(leader_id).directory / "broker.log"
        await wait_until(
            lambda: "cut " in log.read_text(errors="replace"),
            "the old leader's tail cut",
            within=15,
        )
        await trio.sleep(2.0)

    try:
        cluster.start(
            3,
            hosts=tuple(
                (made.hosts[b][1], ("ip", "netns", "exec", made.hosts[b][0])) for b in brokers
            ),
        )
        history, verdict = trio.run(
            lambda: run_history(cluster, partitions=1, replicas=3, disrupt=disrupt)
        )
        report["ends"] = {b.broker_id: trio.run(_end_count, b) for b in cluster.brokers}
        report["cut_lines"] = {
            b.broker_id: [
                line
                for line in (b.directory / "broker.log").read_text(errors="replace").splitlines()
                if "cut " in line
            ]
            for b in cluster.brokers
        }
        report["epochs"] = {
            b.broker_id: json.loads((b.directory / "data" / "failover-0.epochs").read_text())
            for b in cluster.brokers
            if (b.directory / "data" / "failover-0.epochs").exists()
        }
    finally:
        cluster.stop()
        etcd.stop()
    report.update(
        attempted=sorted(b.decode() for b in history.attempted.get(0, set())),
        acked=[(b.decode(), at, opened) for b, at, opened in history.acked.get(0, [])],
        acked_by={b.decode(): who for b, who in history.acked_by.items()},
        consumed=[b.decode() for b in history.consumed.get(0, [])],
        consumed_ids={b.decode(): i for b, i in history.consumed_ids.items()},
        cut_at=history.kills[0][2] if history.kills else 0.0,
        errors=history.errors,
        lost=[b.decode() for b in verdict.lost],
        phantom=[b.decode() for b in verdict.phantom],
        duplicated=[b.decode() for b in verdict.duplicated],
    )
    output.write_text(json.dumps(report))


if __name__ == "__main__":
    main()
