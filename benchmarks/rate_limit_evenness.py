"""How evenly, and how exactly, a channel's rate limit delivers on real time (issue 30).

A fresh ``trionsq serve`` (durable, default flags, its data in a temp folder) gets a
backlog on one topic per rate; a channel limit of that rate is set and one consumer
(RDY 2500, FIN everything, in this process) reads for ``--seconds``, noting when each
message arrived. For each rate: the messages/s delivered (after the first 100 ms,
which a full bucket may send at once), and the most messages any 100 ms and any 10 ms
window held, against the average of such a window (issue 30: at most 2x the per-100-ms
average in any 100 ms window)::

    .venv/bin/python benchmarks/rate_limit_evenness.py [--rates 10,100,1000,10000] [--seconds 5]
"""

from __future__ import annotations

import argparse
import bisect
import tempfile
import urllib.request

import trio

from admin_overhead import start_broker, stop_broker, wait_for_ping
from trionsq.protocol import Fin, Mpub, Nop, Rdy, Sub
from trionsq.protocol.client import MessageFrame, Response
from trionsq.testing import ProtocolClient

BATCH = 5000


def post(http: str, path: str) -> None:
    request = urllib.request.Request(f"http://{http}{path}", method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
        answer.read()


def worst(times: list[float], width: float) -> int:
    """The most arrivals in any window ``[t, t + width)``."""
    return max(bisect.bisect_left(times, t + width) - i for i, t in enumerate(times))


async def produce(tcp: tuple[str, int], topic: str, count: int) -> None:
    producer = await ProtocolClient.connect(tcp)
    for start in range(0, count, BATCH):
        await producer.send(Mpub(topic, (b"x" * 100,) * min(BATCH, count - start)))
        await producer.read(1)
    await producer.aclose()


async def consume(tcp: tuple[str, int], topic: str, seconds: float) -> list[float]:
    """Arrival times (seconds since the first message) for ``seconds`` of real time."""
    client = await ProtocolClient.connect(tcp)
    await client.send(Sub(topic, "c"), Rdy(2500))
    await client.read(1)
    times: list[float] = []
    first: float | None = None
    with trio.move_on_after(seconds + 1):
        while first is None or trio.current_time() - first < seconds:
            data = await client.stream.receive_some(65536)
            now = trio.current_time()
            frames = client.decoder.receive_data(data)
            fins = [Fin(f.message.id) for f in frames if isinstance(f, MessageFrame)]
            if fins and first is None:
                first = now
            times += [now - (first or now)] * len(fins)
            heartbeat = any(isinstance(f, Response) and f.is_heartbeat for f in frames)
            if fins or heartbeat:
                await client.send(*fins, *([Nop()] if heartbeat else []))
    await client.aclose()
    return [t for t in times if t < seconds]


async def measure(tcp: tuple[str, int], http: str, rate: int, seconds: float) -> None:
    topic = f"even{rate}"
    post(http, f"/topic/create?topic={topic}")
    post(http, f"/channel/create?topic={topic}&channel=c")
    await produce(tcp, topic, int(rate * seconds * 1.2) + 100)
    post(http, f"/channel/rate_limit?topic={topic}&channel=c&msgs_per_sec={rate}")
    times = await consume(tcp, topic, seconds)
    steady = [t for t in times if t >= 0.1]
    per_second = len(steady) / (seconds - 0.1)
    w100, w10 = worst(times, 0.1), worst(steady, 0.01)
    print(
        f"{rate:>6} msg/s: {per_second:9.1f} msg/s delivered ({per_second / rate:6.1%}); "
        f"worst 100 ms {w100} (x{w100 / (rate / 10):.2f} of the average), "
        f"worst 10 ms after the first 100 ms {w10} (average {rate / 100:g})"
    )


async def run(rates: list[int], seconds: float, tcp: str, http: str) -> None:
    host, port = tcp.rsplit(":", 1)
    for rate in rates:
        await measure((host, int(port)), http, rate, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="10,100,1000,10000")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    data = tempfile.mkdtemp(prefix="rate-limit-evenness-")
    tcp, http = "127.0.0.1:14460", "127.0.0.1:14461"
    broker = start_broker(tcp, http, data)
    try:
        wait_for_ping(http)
        rates = [int(rate) for rate in args.rates.split(",")]
        trio.run(run, rates, args.seconds, tcp, http)
    finally:
        stop_broker(broker, data)


if __name__ == "__main__":
    main()
