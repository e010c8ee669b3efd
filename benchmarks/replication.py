"""What replication costs: MPUB batch 200 (200-byte bodies) to a topic replicated on 3
brokers (replicas=3: answered once every in-sync replica has it) against the same
broker's unreplicated durable topic, side by side in one run (rounds alternate);
then PUB round trips (p50/p99) both ways.

Starts etcd, a lookupd and 3 brokers as processes (trionsq.cluster.local_cluster),
creates topic ``rep`` (1 partition, 3 replicas) and publishes from this process over
one raw connection to the partition's leader, ``--window`` batches in flight; the
plain topic ``plain`` lives on that same leader. The machine is shared by the three
brokers, etcd and the publisher (2 cores here). Prints numbers; not a test::

    .venv/bin/python benchmarks/replication.py
    .venv/bin/python benchmarks/replication.py --batches 500 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import orjson

from idempotent_publish import (
    BATCH,
    BODY,
    Publisher,
    cpu_seconds,
)  # a sibling script: benchmarks/ is on sys.path
from trionsq.cluster.etcd_process import start_etcd
from trionsq.cluster.local_cluster import LocalCluster
from trionsq.protocol.client import encode_command
from trionsq.protocol.commands import Mpub, Pub


def leader_address(cluster: LocalCluster, topic: str) -> str:
    """The tcp address of the leader of ``topic``'s partition 0, from the lookupd."""
    import urllib.request

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{cluster.lookupd_http}/lookup?topic={topic}&access=w", timeout=5
        ) as reply:
            partitions = orjson.loads(reply.read()).get("partitions", {})
        if "0" in partitions:
            return f"127.0.0.1:{partitions['0']['tcp_port']}"
        time.sleep(0.1)
    raise SystemExit("no leader")


def create(cluster: LocalCluster, topic: str, replicas: int) -> None:
    import urllib.error
    import urllib.request

    url = f"http://127.0.0.1:{cluster.lookupd_http}/topic/create?topic={topic}&partition_num=1&replicator={replicas}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10):
                return
        except urllib.error.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def in_sync(cluster: LocalCluster) -> list[str]:
    """The ISR etcd holds for ``rep``/0, as the leader's /stats reports it."""
    import urllib.request

    for broker in cluster.brokers:
        url = f"http://127.0.0.1:{broker.http_port}/stats?format=json&topic=rep"
        with urllib.request.urlopen(url, timeout=5) as reply:
            topics = orjson.loads(reply.read())["topics"]
        status = topics[0]["partitions"][0].get("replication", {}) if topics else {}
        if status.get("role") == "leader":
            isr: list[str] = status["isr"]
            return isr
    return []


def leader_status(address: str) -> tuple[dict[str, object], int]:
    """``rep``/0's replication status and log end offset on the broker at ``address``."""
    import urllib.request

    http_port = address  # the caller passes the HTTP port's address
    with urllib.request.urlopen(
        f"http://{http_port}/stats?format=json&topic=rep", timeout=5
    ) as reply:
        partition = orjson.loads(reply.read())["topics"][0]["partitions"][0]
    status: dict[str, object] = partition["replication"]
    end: int = partition["end_offset"]
    return status, end


def wiped_follower_catch_up(cluster: LocalCluster, leader_tcp: str) -> tuple[float, float]:
    """Kill -9 a follower of ``rep``/0, wipe its disk, restart it; (MB, seconds) until
    it is back in the ISR with every record."""
    leader = next(b for b in cluster.brokers if leader_tcp.endswith(f":{b.tcp_port}"))
    follower = next(b for b in cluster.brokers if b is not leader)
    follower.kill()
    follower.wipe()
    started = time.perf_counter()
    follower.start()
    while True:
        status, end = leader_status(f"127.0.0.1:{leader.http_port}")
        isr = status.get("isr")
        if isinstance(isr, list) and follower.broker_id in isr:
            return end / 1e6, time.perf_counter() - started
        if time.perf_counter() - started > 120:
            raise SystemExit("the wiped follower did not rejoin the ISR")
        time.sleep(0.02)


def throughput(publisher: Publisher, batch: bytes, batches: int, window: int) -> float:
    start = time.perf_counter()
    publisher.send_all([batch] * batches, window)
    return batches * BATCH / (time.perf_counter() - start)


def measured(
    publisher: Publisher, batch: bytes, batches: int, window: int, pids: dict[str, int]
) -> tuple[float, dict[str, float]]:
    """Messages per second, and each broker's CPU µs a message (``pids``: by role),
    what compares on a shared machine."""
    before = {role: cpu_seconds(pid) for role, pid in pids.items()}
    rate = throughput(publisher, batch, batches, window)
    count = batches * BATCH
    return rate, {
        role: (cpu_seconds(pid) - before[role]) / count * 1e6 for role, pid in pids.items()
    }


def roles(cluster: LocalCluster, leader_tcp: str) -> dict[str, int]:
    """Each broker's pid by its role for ``rep``/0: leader, follower1, follower2."""
    found: dict[str, int] = {}
    followers = 0
    for broker in cluster.brokers:
        assert broker.process is not None  # noqa: S101 - started
        if leader_tcp.endswith(f":{broker.tcp_port}"):
            found["leader"] = broker.process.pid
        else:
            followers += 1
            found[f"follower{followers}"] = broker.process.pid
    return found


def show_rounds(rates: dict[str, list[float]], costs: dict[str, list[dict[str, float]]]) -> None:
    """Each round's rate, replicated / plain and CPU µs a message of each broker."""
    for number, (plain, replicated) in enumerate(
        zip(rates["plain"], rates["replicated"], strict=True)
    ):
        cpu = {
            kind: " ".join(f"{role} {value:.2f}" for role, value in costs[kind][number].items())
            for kind in costs
        }
        print(
            f"  round {number + 1}: plain {plain:,.0f} msg/s ({cpu['plain']} µs)"
            f" | replicated {replicated:,.0f} msg/s ({cpu['replicated']} µs)"
            f" | {replicated / plain:.2f}x"
        )


def round_trips(publisher: Publisher, command: bytes, count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        publisher.send_all([command], 1)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=int, default=8)
    parser.add_argument("--pubs", type=int, default=2000)
    parser.add_argument(
        "--skip-extras", action="store_true", help="MPUB rounds only (no PUB latency, no catch-up)"
    )
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trionsq-replication-") as name:
        directory = Path(name)
        etcd = start_etcd(directory / "etcd")
        cluster = LocalCluster(directory, etcd)
        try:
            cluster.start(3)
            create(cluster, "rep", 3)
            address = leader_address(cluster, "rep")
            time.sleep(1.0)  # the followers connect
            publisher = Publisher(address)
            replicated = encode_command(Mpub("rep", (BODY,) * BATCH, partition=0))
            plain = encode_command(Mpub("plain", (BODY,) * BATCH))
            throughput(publisher, plain, 20, arguments.window)  # warm both up
            throughput(publisher, replicated, 20, arguments.window)
            rates: dict[str, list[float]] = {"plain": [], "replicated": []}
            costs: dict[str, list[dict[str, float]]] = {"plain": [], "replicated": []}
            pids = roles(cluster, address)
            for _ in range(arguments.rounds):
                for kind, batch in (("plain", plain), ("replicated", replicated)):
                    rate, cpu = measured(
                        publisher, batch, arguments.batches, arguments.window, pids
                    )
                    rates[kind].append(rate)
                    costs[kind].append(cpu)
            latencies: dict[str, list[float]] = {}
            if not arguments.skip_extras:
                pub_plain = encode_command(Pub("plain", BODY))
                pub_replicated = encode_command(Pub("rep", BODY, partition=0))
                latencies["plain"] = round_trips(publisher, pub_plain, arguments.pubs)
                latencies["replicated"] = round_trips(publisher, pub_replicated, arguments.pubs)
            publisher.close()
            isr = in_sync(cluster)
            if not arguments.skip_extras:
                megabytes, seconds = wiped_follower_catch_up(cluster, address)
                print(
                    f"a follower killed, wiped and restarted caught up {megabytes:.1f} MB and"
                    f" rejoined the ISR in {seconds:.2f} s: {megabytes / seconds:.1f} MB/s"
                )
        finally:
            cluster.stop()
            etcd.stop()
    print(f"ISR of rep/0 at the end: {isr} (every acknowledged batch waited for all of them)")
    print(f"MPUB b{BATCH}, {arguments.window} batches in flight, broker CPU µs a message:")
    show_rounds(rates, costs)
    best = {kind: max(values) for kind, values in rates.items()}
    for kind, values in rates.items():
        print(
            f"MPUB b{BATCH} {kind}: best {best[kind]:,.0f} msg/s, rounds {[f'{v:,.0f}' for v in values]}"
        )
    print(f"replicated / plain: {best['replicated'] / best['plain']:.2f}x")
    for kind, times in latencies.items():
        ordered = sorted(times)
        p50 = statistics.median(ordered) * 1e3
        p99 = ordered[int(len(ordered) * 0.99) - 1] * 1e3
        print(f"PUB round trip {kind}: p50 {p50:.3f} ms, p99 {p99:.3f} ms")


if __name__ == "__main__":
    main()
