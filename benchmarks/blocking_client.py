"""trionsq.client.blocking's speed against a running broker: publish one per call
(from one thread, then from several), publish in MPUB batches, and consume with a
no-op handler that finishes each message.

Not a timed test; prints msg/s. Compare with the async client's
``benchmarks/client.py`` on the same broker. Usage::

    .venv/bin/python benchmarks/blocking_client.py --nsqd-tcp-address 127.0.0.1:4150
"""

from __future__ import annotations

import argparse
import threading
import time

from trionsq.client.blocking import connect_consumer, connect_producer

BODY = b"x" * 200


def publish_single(address: str, topic: str, count: int, threads: int) -> float:
    """``count`` PUBs, one per call, shared by ``threads`` threads."""
    share = count // threads
    with connect_producer(address) as producer:

        def publish_share() -> None:
            for _ in range(share):
                producer.publish(topic, BODY)

        workers = [threading.Thread(target=publish_share) for _ in range(threads)]
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return share * threads / (time.perf_counter() - start)


def publish_batched(address: str, topic: str, count: int, batch: int) -> float:
    with connect_producer(address) as producer:
        bodies = [BODY] * batch
        start = time.perf_counter()
        for _ in range(count // batch):
            producer.publish_many(topic, bodies)
        return count // batch * batch / (time.perf_counter() - start)


def consume(address: str, topic: str, count: int, max_in_flight: int) -> float:
    with connect_consumer(topic, "bench", address, max_in_flight=max_in_flight) as consumer:
        start = time.perf_counter()
        for seen, message in enumerate(consumer, 1):
            message.finish()
            if seen == count:
                break
        return count / (time.perf_counter() - start)


def main(arguments: argparse.Namespace) -> None:
    address, count = arguments.nsqd_tcp_address, arguments.count
    topic = f"blocking-bench-{int(time.time())}"
    single = count // 10
    rate = publish_single(address, topic + "-single", single, 1)
    print(f"publish one per call, 1 thread      {rate:12,.0f} msg/s")
    threads = arguments.threads
    rate = publish_single(address, topic + "-threads", single, threads)
    print(f"publish one per call, {threads:2d} threads    {rate:12,.0f} msg/s")
    rate = publish_batched(address, topic, count, 200)
    print(f"publish MPUB x200                   {rate:12,.0f} msg/s")
    rate = consume(address, topic, count, arguments.max_in_flight)
    print(f"consume + FIN, RDY {arguments.max_in_flight:<5d}            {rate:12,.0f} msg/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150")
    parser.add_argument("--count", type=int, default=300_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--max-in-flight", type=int, default=2500)
    main(parser.parse_args())
