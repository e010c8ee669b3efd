"""What a dead-letter bound costs: consume (RDY 2500, FIN everything) from a channel
with ``max_attempts`` set, against a channel without one, on one broker (issue 30:
a bounded channel journals each routing pass's delivery counts before its frames
go out, so a kill -9 never lets a message be delivered past the bound; a plain
channel must not pay for it).

A fresh ``trionsq serve`` (durable, default flags, its data in a temp folder) runs
pinned to CPU 0; ``loadgen.py`` runs on CPU 1. Each round publishes its own topic with
MPUB (batch 200) for ``--seconds``, then consumes it for as long, so every round reads
a backlog of the same shape. A bounded round first sets ``/channel/dead_letter`` on
the consumers' channel (``max_attempts=5``; every message is finished at its first
delivery, so nothing is dead-lettered: the journal write per pass is all it costs).
Rounds go plain, bounded, bounded, plain, plain ... so a drift of the machine falls on
both sides::

    .venv/bin/python benchmarks/dead_letter_overhead.py [--rounds 4] [--seconds 5]

Prints each round (msg/s, MB/s of payload, broker CPU, and messages per second of
broker CPU, the figure to compare on a shared machine where the broker does not get
a whole core), then the medians and the ratios (bounded / plain), and the broker's
peak RSS.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from admin_overhead import loadgen, print_peak_rss, start_broker, stop_broker, wait_for_ping
from rate_limit_overhead import post


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="pairs of rounds (default 4)")
    parser.add_argument("--seconds", type=float, default=5.0, help="per workload (default 5)")
    args = parser.parse_args()
    data = tempfile.mkdtemp(prefix="dead-letter-overhead-")
    tcp, http = "127.0.0.1:14550", "127.0.0.1:14551"
    broker = start_broker(tcp, http, data)
    results: dict[bool, list[float]] = {False: [], True: []}
    per_cpu: dict[bool, list[float]] = {False: [], True: []}
    try:
        wait_for_ping(http)
        order = [False, True, True, False] * args.rounds
        for round_number, bounded in enumerate(order[: args.rounds * 2]):
            topic = f"round{round_number}"
            post(http, f"/topic/create?topic={topic}")
            post(http, f"/channel/create?topic={topic}&channel=loadgen")  # gets the backlog
            if bounded:
                post(http, f"/channel/dead_letter?topic={topic}&channel=loadgen&max_attempts=5")
            loadgen("mpub", tcp, topic, args.seconds, broker.pid)
            consume = loadgen("consume", tcp, topic, args.seconds, broker.pid, "--rdy", "2500")
            rate = float(consume["msgs_per_s"])  # type: ignore[arg-type]
            cpu = float(consume.get("broker_cpu_pct") or 100)  # type: ignore[arg-type]
            results[bounded].append(rate)
            per_cpu[bounded].append(rate * 100 / cpu)
            print(
                f"round {round_number + 1}: {'bounded' if bounded else 'plain  '}  "
                f"consume RDY 2500 {rate:>9,.0f} msg/s  "
                f"{consume['payload_mb_per_s']} MB/s  "
                f"(broker CPU {cpu:g}%: {rate * 100 / cpu:>9,.0f} msg per CPU-second)",
                flush=True,
            )
        print()
        plain = statistics.median(results[False])
        bounded_median = statistics.median(results[True])
        print(
            f"consume  median plain {plain:>10,.0f} msg/s   bounded (max_attempts=5) "
            f"{bounded_median:>10,.0f} msg/s   ratio {bounded_median / plain:.3f}"
        )
        plain_cpu = statistics.median(per_cpu[False])
        bounded_cpu = statistics.median(per_cpu[True])
        print(
            f"per broker CPU-second: plain {plain_cpu:>10,.0f}   bounded "
            f"{bounded_cpu:>10,.0f}   ratio {bounded_cpu / plain_cpu:.3f}"
        )
        print_peak_rss(broker.pid)
    finally:
        stop_broker(broker, data)


if __name__ == "__main__":
    main()
