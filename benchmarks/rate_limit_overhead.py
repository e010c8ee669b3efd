"""What a rate limit costs when it does not bind: consume (RDY 2500, FIN everything)
with a channel limit and a consumer limit set far above what the broker can deliver,
against no limit, on one broker (issue 20: at least 95% of the plain figure).

A fresh ``trionsq serve`` (durable, default flags, its data in a temp folder) runs
pinned to CPU 0; ``loadgen.py`` runs on CPU 1. Each round publishes its own topic with
MPUB (batch 200) for ``--seconds``, then consumes it for as long, so every round reads
a backlog of the same shape. A limited round first sets ``/channel/rate_limit`` on the
consumers' channel (100,000,000 msg/s and 1 TiB/s) and its consumers ask for the same
in IDENTIFY (``max_msgs_per_sec``/``max_bytes_per_sec``): every routing pass then takes
the limited path (the buckets checked, the sizes summed and charged) without ever
being held back. Rounds go plain, limited, limited, plain, plain ... so a drift of the
machine falls on both sides::

    .venv/bin/python benchmarks/rate_limit_overhead.py [--rounds 4] [--seconds 5]

Prints each round (msg/s, MB/s of payload, broker CPU), then the medians and the
ratio (limited / plain), and the broker's peak RSS.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import urllib.request

from admin_overhead import loadgen, print_peak_rss, start_broker, stop_broker, wait_for_ping

FAR_MSGS = 100_000_000
"""The largest limit the broker takes: never binding."""
FAR_BYTES = 2**40


def post(http: str, path: str) -> None:
    request = urllib.request.Request(f"http://{http}{path}", method="POST")
    with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310
        answer.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="pairs of rounds (default 4)")
    parser.add_argument("--seconds", type=float, default=5.0, help="per workload (default 5)")
    args = parser.parse_args()
    data = tempfile.mkdtemp(prefix="rate-limit-overhead-")
    tcp, http = "127.0.0.1:14450", "127.0.0.1:14451"
    broker = start_broker(tcp, http, data)
    results: dict[bool, list[float]] = {False: [], True: []}
    try:
        wait_for_ping(http)
        # plain, limited, limited, plain, ...: a drift of the machine (the log growing,
        # caches) falls on both sides alike instead of always on the second
        order = [False, True, True, False] * args.rounds
        for round_number, limited in enumerate(order[: args.rounds * 2]):
            topic = f"round{round_number}"
            post(http, f"/topic/create?topic={topic}")
            post(http, f"/channel/create?topic={topic}&channel=loadgen")  # gets the backlog
            extra: list[str] = []
            if limited:
                post(
                    http,
                    f"/channel/rate_limit?topic={topic}&channel=loadgen"
                    f"&msgs_per_sec={FAR_MSGS}&bytes_per_sec={FAR_BYTES}",
                )
                extra = [
                    "--max-msgs-per-sec",
                    str(FAR_MSGS),
                    "--max-bytes-per-sec",
                    str(FAR_BYTES),
                ]
            loadgen("mpub", tcp, topic, args.seconds, broker.pid)
            consume = loadgen(
                "consume", tcp, topic, args.seconds, broker.pid, "--rdy", "2500", *extra
            )
            results[limited].append(float(consume["msgs_per_s"]))  # type: ignore[arg-type]
            print(
                f"round {round_number + 1}: {'limited' if limited else 'plain  '}  "
                f"consume RDY 2500 {consume['msgs_per_s']:>9,} msg/s  "
                f"{consume['payload_mb_per_s']} MB/s  "
                f"(broker CPU {consume.get('broker_cpu_pct')}%)",
                flush=True,
            )
        print()
        plain = statistics.median(results[False])
        limited_median = statistics.median(results[True])
        print(
            f"consume  median plain {plain:>10,.0f} msg/s   limited, not binding "
            f"{limited_median:>10,.0f} msg/s   ratio {limited_median / plain:.3f}"
        )
        print_peak_rss(broker.pid)
    finally:
        stop_broker(broker, data)


if __name__ == "__main__":
    main()
