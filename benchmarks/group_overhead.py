"""What a consumer group costs on the delivery path: consume (RDY 2500) as a group
member against a plain consumer, on one broker (issue 20: at least 95% of plain).

A fresh ``trionsq serve`` (durable, default flags but ``--group-rebalance-delay 0``,
so a member starts at once and the measured seconds are all delivery) runs pinned to
CPU 0; ``loadgen.py`` runs on CPU 1. Rounds go plain, group, group, plain ... so a
drift of the machine falls on both sides; each round publishes ``--messages`` to its
own topic (MPUB batch 200) and then consumes exactly those, so every round reads a
backlog of the same shape (a timed run would read more or less of it from disk)::

    .venv/bin/python benchmarks/group_overhead.py [--rounds 4] [--messages 1000000]

Prints each round, then the medians and the ratio (group / plain).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from admin_overhead import loadgen, print_peak_rss, start_broker, stop_broker, wait_for_ping

LONG_ENOUGH = 300.0
"""Seconds loadgen may take: the message count ends each run."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="pairs of rounds (default 4)")
    parser.add_argument(
        "--messages", type=int, default=1_000_000, help="per round (default 1,000,000)"
    )
    parser.add_argument(
        "--in-memory",
        action="store_true",
        help="a broker without a log (no disk writes: less noise from the page cache)",
    )
    args = parser.parse_args()
    data = tempfile.mkdtemp(prefix="group-overhead-")
    tcp, http = "127.0.0.1:14360", "127.0.0.1:14361"
    flags = ["--group-rebalance-delay", "0s"]
    if args.in_memory:
        flags += ["--in-memory", "--mem-queue-size", str(args.messages * 2)]
    broker = start_broker(tcp, http, data, *flags)
    results: dict[str, list[float]] = {"plain": [], "group": []}
    try:
        wait_for_ping(http)
        order = ["plain", "group", "group", "plain"] * args.rounds
        for round_number, kind in enumerate(order[: args.rounds * 2]):
            topic = f"round{round_number}"
            count = ["--count", str(args.messages)]
            loadgen("mpub", tcp, topic, LONG_ENOUGH, broker.pid, *count)
            extra = ["--rdy", "2500", *count]
            if kind == "group":
                extra += ["--group-member", "bench"]
            consume = loadgen("consume", tcp, topic, LONG_ENOUGH, broker.pid, *extra)
            rate = float(consume["msgs_per_s"])  # type: ignore[arg-type]
            results[kind].append(rate)
            print(
                f"round {round_number + 1}: {kind:5s} consume RDY 2500 {rate:>10,.0f} msg/s "
                f"(broker CPU {consume.get('broker_cpu_pct')}%, {consume.get('payload_mb_per_s')} MB/s)",
                flush=True,
            )
        plain, group = (statistics.median(results[k]) for k in ("plain", "group"))
        print(
            f"\nconsume median plain {plain:>10,.0f} msg/s   group member {group:>10,.0f} msg/s"
            f"   ratio {group / plain:.3f}"
        )
        print_peak_rss(broker.pid)
    finally:
        stop_broker(broker, data)


if __name__ == "__main__":
    main()
