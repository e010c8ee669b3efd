"""ansq (asyncio), one phase of ``benchmarks/client.py`` (see its docstring)."""

from __future__ import annotations

import asyncio
import time
from array import array

from ansq import create_reader, create_writer
from bench_job import CHANNEL, Job, batches, parse_job, report, shares


class PublishError(RuntimeError):
    """nsqd answered a publish with an error frame."""


async def publish_single(job: Job) -> None:
    """``await writer.pub`` per message from ``concurrency`` tasks sharing one writer
    (ansq pipelines them on its connection and matches answers in order)."""
    writer = await create_writer(nsqd_tcp_addresses=[job.address])
    body, samples = job.body, array("q")

    async def publish_share(share: int) -> None:
        for _ in range(share):
            sent = time.perf_counter_ns()
            response = await writer.pub(job.topic, body)
            samples.append(time.perf_counter_ns() - sent)
            if response is None or response.is_error:
                raise PublishError(f"PUB failed: {response}")

    start = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for share in shares(job.count, job.concurrency):
            group.create_task(publish_share(share))
    seconds = time.perf_counter() - start
    await writer.close()
    report(job.count, seconds, samples)


async def publish_batched(job: Job) -> None:
    """``await writer.mpub`` per batch, one after another."""
    writer = await create_writer(nsqd_tcp_addresses=[job.address])
    start = time.perf_counter()
    for size in batches(job.count, job.batch):
        response = await writer.mpub(job.topic, *[job.body] * size)
        if response is None or response.is_error:
            raise PublishError(f"MPUB failed: {response}")
    seconds = time.perf_counter() - start
    await writer.close()
    report(job.count, seconds)


async def consume(job: Job) -> None:
    """``create_reader`` subscribes with RDY 1 per connection and its
    ``set_max_in_flight`` is not implemented, so the reader's connections are given
    RDY ``max_in_flight`` by hand; every message is ``await message.fin()``-ed (ansq
    has no handler mode, hence no auto-FIN)."""
    seen = 0
    start = time.perf_counter()
    reader = await create_reader(topic=job.topic, channel=CHANNEL, nsqd_tcp_addresses=[job.address])
    for connection in reader.connections:
        await connection.rdy(job.max_in_flight)
    async for message in reader.messages():
        await message.fin()
        seen += 1
        if seen == job.count:
            break
    seconds = time.perf_counter() - start
    await reader.close()
    report(seen, seconds)


async def main(job: Job) -> None:
    phases = {"pub": publish_single, "mpub": publish_batched, "consume": consume}
    await phases[job.phase](job)


if __name__ == "__main__":
    asyncio.run(main(parse_job(__doc__.splitlines()[0])))
