"""Chaos runs: mixed faults on a seeded random schedule over a replicated cluster
(tests/cluster/chaos_run.py): SIGKILL and SIGSTOP of leaders and followers, one lease
or every lease revoked, etcd stopped, replica moves, the lookupd killed; they may
overlap. Each run starts its own etcd, lookupd and brokers (lease TTL 2 s), a topic
of 4 partitions x 3 replicas, publishes with idempotency keys through the schedule,
heals everything, waits for every partition to be led with a whole ISR, consumes and
checks: nothing acknowledged lost, nothing never sent, nothing stored twice.
Prints the seed, the schedule, what each fault did and the verdict::

    .venv/bin/python benchmarks/chaos.py --seed 7 --faults 12
    .venv/bin/python benchmarks/chaos.py --seed 100 --runs 20

4 brokers by default: with 3 brokers and 3 replicas every broker holds every
partition and a replica has nowhere to move (``--brokers 3`` skips the moves).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests/

from tests.cluster.chaos_run import KINDS, SetupFailed, run_chaos, schedule

from trionsq.cluster.etcd_process import start_etcd
from trionsq.cluster.local_cluster import LocalCluster

PARTITIONS = 4
REPLICAS = 3


def one_run(seed: int, arguments: argparse.Namespace) -> bool | None:
    """One seeded run, printed; whether it passed (None: the cluster did not start)."""
    faults = schedule(seed, arguments.faults, PARTITIONS, tuple(arguments.kinds.split(",")))
    print(f"=== seed {seed}: {len(faults)} faults", flush=True)
    for fault in faults:
        print(f"  {fault.describe()}")
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"trionsq-chaos-{seed}-") as name:
        directory = Path(name)
        etcd = start_etcd(directory / "etcd")
        cluster = LocalCluster(directory, etcd, cluster_id=f"chaos{seed}", lease_ttl="2s")
        try:
            cluster.start(arguments.brokers)
            history, verdict, events = trio.run(
                lambda: run_chaos(cluster, faults, partitions=PARTITIONS, replicas=REPLICAS)
            )
        except SetupFailed as error:
            print(f"  SETUP FAILED (not counted; run again): {error}", flush=True)
            _keep_logs(directory, seed, arguments.keep)
            return None
        except Exception:  # a run that cannot finish is a failure to report, not the end
            print(f"  FAILED: the run raised\n{traceback.format_exc()}", flush=True)
            _keep_logs(directory, seed, arguments.keep)
            return False
        finally:
            cluster.stop()
            etcd.stop()
        for event in events:
            print(f"  | {event}")
        v = verdict.verdict
        print(
            f"  acknowledged {v.acknowledged}, lost {len(v.lost)}, never sent {len(v.phantom)}, "
            f"stored twice {len(v.duplicated)}, healed {verdict.healed} "
            f"({verdict.heal_seconds:.1f}s), errors seen {history.errors}"
        )
        if not verdict.passed:
            print(f"  lost {v.lost[:20]} never sent {v.phantom[:20]} twice {v.duplicated[:20]}")
            print(f"  unhealed: {verdict.unhealed}")
            _keep_logs(directory, seed, arguments.keep)
        print(
            f"  verdict: {'PASS' if verdict.passed else 'FAIL'} in {time.monotonic() - began:.0f}s",
            flush=True,
        )
        return verdict.passed


def _keep_logs(directory: Path, seed: int, keep: Path | None) -> None:
    """Copy a failed run's process logs out of its temporary directory."""
    if keep is None:
        return
    target = keep / f"seed{seed}"
    for log in directory.rglob("*.log"):
        destination = target / log.relative_to(directory)
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(log.read_bytes())
    print(f"  logs kept in {target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1, help="the first run's seed")
    parser.add_argument("--faults", type=int, default=10, help="faults per run")
    parser.add_argument("--runs", type=int, default=1, help="runs, seeds seed, seed+1, ...")
    parser.add_argument("--brokers", type=int, default=4)
    parser.add_argument("--kinds", default=",".join(KINDS), help="the fault kinds drawn from")
    parser.add_argument("--keep", type=Path, help="copy failed runs' logs under this directory")
    arguments = parser.parse_args()
    results = {}
    for seed in range(arguments.seed, arguments.seed + arguments.runs):
        result = one_run(seed, arguments)
        results[seed] = one_run(seed, arguments) if result is None else result  # once more
    passed = [seed for seed, ok in results.items() if ok]
    failed = [seed for seed, ok in results.items() if ok is False]
    unstarted = [seed for seed, ok in results.items() if ok is None]
    print(f"passed {len(passed)}/{len(results)}: seeds {passed}; failed: {failed}")
    if unstarted:
        print(f"the cluster did not start, twice (not run): {unstarted}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
