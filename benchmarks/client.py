"""trionsq.client's own speed against a running broker: publish one per call from
many tasks, publish in MPUB batches, and consume with a no-op handler (FIN each).

Not a timed test; prints msgs/s. The comparison with pynsq, gnsq and ansq that issue
16 asks for comes with the rest of the client. Usage::

    .venv/bin/python benchmarks/client.py --nsqd-tcp-address 127.0.0.1:4150
"""

from __future__ import annotations

import argparse
import time

import trio

from trionsq.client import open_consumer, open_producer

BODY = b"x" * 200


async def publish_single(address: str, topic: str, count: int, tasks: int) -> float:
    async with open_producer(address) as producer:
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(tasks):

                async def publish_share() -> None:
                    for _ in range(count // tasks):
                        await producer.publish(topic, BODY)

                nursery.start_soon(publish_share)
        return (count // tasks * tasks) / (time.perf_counter() - start)


async def publish_batched(address: str, topic: str, count: int, batch: int) -> float:
    async with open_producer(address) as producer:
        start = time.perf_counter()
        bodies = [BODY] * batch
        for _ in range(count // batch):
            await producer.publish_many(topic, bodies)
        return (count // batch * batch) / (time.perf_counter() - start)


async def consume(address: str, topic: str, count: int, max_in_flight: int) -> float:
    async with open_consumer(topic, "bench", address, max_in_flight=max_in_flight) as consumer:
        seen = 0
        start = time.perf_counter()
        async for message in consumer:
            message.finish()
            seen += 1
            if seen == count:
                break
        return count / (time.perf_counter() - start)


async def main(arguments: argparse.Namespace) -> None:
    address, count = arguments.nsqd_tcp_address, arguments.count
    topic = f"client-bench-{int(time.time())}"
    rate = await publish_single(address, topic + "-single", count // 5, arguments.tasks)
    print(f"publish one per call, {arguments.tasks} tasks   {rate:12,.0f} msg/s")
    rate = await publish_batched(address, topic, count, 200)
    print(f"publish MPUB x200                 {rate:12,.0f} msg/s")
    rate = await consume(address, topic, count, arguments.max_in_flight)
    print(f"consume, no-op handler, RDY {arguments.max_in_flight}  {rate:12,.0f} msg/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150")
    parser.add_argument("--count", type=int, default=500_000)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--max-in-flight", type=int, default=2500)
    trio.run(main, parser.parse_args())
