"""trionsq.client, one phase of ``benchmarks/client.py`` (see its docstring)."""

from __future__ import annotations

import time
from array import array

import trio
from bench_job import CHANNEL, Job, batches, parse_job, report, shares

from trionsq.client import open_consumer, open_producer


async def publish_single(job: Job) -> None:
    """``publish`` per message from ``concurrency`` tasks sharing one producer, as Trio
    code publishes from many tasks; the producer pipelines them on one connection."""
    body, samples = job.body, array("q")
    async with open_producer(job.address) as producer:

        async def publish_share(share: int) -> None:
            for _ in range(share):
                sent = time.perf_counter_ns()
                await producer.publish(job.topic, body)
                samples.append(time.perf_counter_ns() - sent)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for share in shares(job.count, job.concurrency):
                nursery.start_soon(publish_share, share)
        seconds = time.perf_counter() - start
    report(job.count, seconds, samples)


async def publish_batched(job: Job) -> None:
    """One MPUB at a time, each awaited before the next."""
    async with open_producer(job.address) as producer:
        start = time.perf_counter()
        for size in batches(job.count, job.batch):
            await producer.publish_many(job.topic, [job.body] * size)
        seconds = time.perf_counter() - start
    report(job.count, seconds)


async def consume(job: Job) -> None:
    """The clock starts before the consumer connects, as it does for the others."""
    seen = 0
    start = time.perf_counter()
    async with open_consumer(
        job.topic, CHANNEL, job.address, max_in_flight=job.max_in_flight
    ) as consumer:
        async for message in consumer:
            message.finish()
            seen += 1
            if seen == job.count:
                break
        seconds = time.perf_counter() - start
    report(seen, seconds)


async def main(job: Job) -> None:
    phases = {"pub": publish_single, "mpub": publish_batched, "consume": consume}
    await phases[job.phase](job)


if __name__ == "__main__":
    trio.run(main, parse_job(__doc__.splitlines()[0]))
