"""What a connection per etcd call costs: the etcd client's unary calls over kept-alive
connections against one connection per call (``KeptConnections(max_idle=0)``: a
TCP connect, and over ``https://`` a TLS handshake, for every call, as before).
Prints numbers; not a test::

    .venv/bin/python benchmarks/etcd_calls.py                  # 200 gets, 3 rounds
    .venv/bin/python benchmarks/etcd_calls.py --cpu 60 --old-src /path/to/old/src

Calls: p50/p99 of ``--calls`` sequential ``get`` calls over ``http://`` and over
``https://`` (client certificate, user with a password), both ways in alternating
order, ``--rounds`` times. ``--cpu``: CPU seconds of each process of an idle
2-broker cluster (TLS, client certificates, user; a topic of 2 partitions x 2
replicas) over that many seconds, the code of ``--old-src`` (given to the processes
as PYTHONPATH) and this checkout alternating, ``--rounds`` times.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio
import trustme

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests/

from tests.cluster.failover_run import create_topic

from trionsq.cluster.etcd import EtcdClient
from trionsq.cluster.etcd_access import EtcdAccess
from trionsq.cluster.etcd_process import EtcdServer, EtcdTls, start_etcd
from trionsq.cluster.local_cluster import LocalCluster
from trionsq.http.kept_connections import KeptConnections

PASSWORD = "bench-etcd-pw"  # noqa: S105 - a throwaway etcd's


def _tls(directory: Path) -> EtcdTls:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("trionsq-bench.example")
    paths = {name: directory / f"{name}.pem" for name in ("ca", "sc", "sk", "cc", "ck")}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.cert_chain_pems[0].write_to_path(str(paths["sc"]))
    server.private_key_pem.write_to_path(str(paths["sk"]))
    client.cert_chain_pems[0].write_to_path(str(paths["cc"]))
    client.private_key_pem.write_to_path(str(paths["ck"]))
    return EtcdTls(paths["ca"], paths["sc"], paths["sk"], paths["cc"], paths["ck"])


def _secure_etcd(directory: Path) -> EtcdServer:
    directory.mkdir(parents=True, exist_ok=True)
    server = start_etcd(directory / "etcd", tls=_tls(directory))
    server.enable_auth(PASSWORD)
    return server


def _access(server: EtcdServer) -> EtcdAccess:
    tls = server.members[0].tls
    if tls is None:
        return EtcdAccess()
    return EtcdAccess(
        cacert=str(tls.ca),
        cert=str(tls.client_cert),
        key=str(tls.client_key),
        username="root",
        password=PASSWORD,
    )


async def _timed_gets(server: EtcdServer, *, kept: bool, calls: int) -> list[float]:
    """Seconds of each of ``calls`` gets, after one that authenticates (and connects)."""
    async with EtcdClient(server.endpoints, access=_access(server)) as client:
        if not kept:
            client.connections = KeptConnections(max_idle=0)
        await client.put(b"/bench/k", b"v")
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            await client.get(b"/bench/k")
            times.append(time.perf_counter() - started)
        return times


def _quantiles(times: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(times, n=100, method="inclusive")
    return cuts[49] * 1000, cuts[98] * 1000


def bench_calls(directory: Path, calls: int, rounds: int) -> None:
    plain = start_etcd(directory / "plain")
    secure = _secure_etcd(directory / "secure")
    try:
        for number in range(rounds):
            order = (False, True) if number % 2 == 0 else (True, False)
            for scheme, server in (("http", plain), ("https", secure)):
                for kept in order:
                    times = trio.run(functools.partial(_timed_gets, server, kept=kept, calls=calls))
                    p50, p99 = _quantiles(times)
                    way = "kept connection   " if kept else "connection per call"
                    print(
                        f"round {number + 1} {scheme:5} {way}: p50 {p50:.2f} ms  p99 {p99:.2f} ms",
                        flush=True,
                    )
    finally:
        plain.stop()
        secure.stop()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _idle_cluster_cpu(directory: Path, seconds: float) -> dict[str, float]:
    """CPU seconds of each process of an idle TLS cluster over ``seconds``."""
    etcd = _secure_etcd(directory)
    tls = etcd.members[0].tls
    assert tls is not None  # noqa: S101 - started with TLS
    flags = (*tls.client_flags, "--etcd-username=root", f"--etcd-password={PASSWORD}")
    cluster = LocalCluster(directory, etcd, etcd_flags=flags)
    try:
        cluster.start(2)
        trio.run(create_topic, cluster.lookupd_http, 2, 2)
        time.sleep(3)  # leaders elected, followers caught up
        processes = {b.name: b.process for b in cluster.brokers}
        processes["lookupd"] = cluster.lookupd
        processes["etcd"] = etcd.members[0].process
        pids = {name: process.pid for name, process in processes.items() if process is not None}
        before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
        time.sleep(seconds)
        return {name: _cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    finally:
        cluster.stop()
        etcd.stop()


def bench_cpu(directory: Path, seconds: float, rounds: int, old_src: str) -> None:
    given = os.environ.get("PYTHONPATH")
    for number in range(rounds):
        order = ("old", "new") if number % 2 == 0 else ("new", "old")
        for code in order:
            if code == "old":
                os.environ["PYTHONPATH"] = old_src
            elif given is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = given
            used = _idle_cluster_cpu(directory / f"cpu{number}{code}", seconds)
            shown = "  ".join(f"{name} {cpu:.2f} s" for name, cpu in used.items())
            print(f"round {number + 1} {code}: CPU over {seconds:.0f} s idle: {shown}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpu", type=float, default=0.0, help="seconds of idle cluster")
    parser.add_argument("--old-src", default="", help="src/ of the code to compare (--cpu)")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trionsq-etcd-calls-") as name:
        if arguments.cpu:
            if not arguments.old_src:
                parser.error("--cpu needs --old-src")
            bench_cpu(Path(name), arguments.cpu, arguments.rounds, arguments.old_src)
        else:
            bench_calls(Path(name), arguments.calls, arguments.rounds)


if __name__ == "__main__":
    main()
