"""pynsq (tornado), one phase of ``benchmarks/client.py`` (see its docstring).

pynsq's ``Writer`` has no awaitable publish: ``pub``/``mpub`` send at once and call
back with the answer. Its natural pipelined use keeps a number of publishes
outstanding and sends the next from each callback, which is what runs here.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from typing import Final

import nsq
from bench_job import CHANNEL, Job, batches, parse_job, report

CONNECT_TIMEOUT: Final = 10.0


class PublishError(RuntimeError):
    """nsqd refused a publish, or the connection was lost."""


async def connected_writer(address: str) -> nsq.Writer:
    """A ``Writer`` whose connection is ready: it connects on the loop's next turn and
    ``pub`` fails at once while it has none."""
    writer = nsq.Writer([address])
    deadline = time.monotonic() + CONNECT_TIMEOUT
    while not writer.conns:
        if time.monotonic() > deadline:
            raise PublishError(f"pynsq Writer did not connect to {address}")
        await asyncio.sleep(0.001)
    return writer


def close_writer(writer: nsq.Writer) -> None:
    """``Writer`` has no close of its own; closing its connections is the way out."""
    for conn in list(writer.conns.values()):
        conn.close()


async def publish_single(job: Job) -> None:
    """``concurrency`` ``pub`` calls outstanding; each callback sends the next."""
    writer = await connected_writer(job.address)
    body, samples = job.body, array("q")
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    sent = answered = 0

    def publish() -> None:
        nonlocal sent
        sent += 1
        started = time.perf_counter_ns()

        def answer(conn: object, data: object) -> None:
            nonlocal answered
            if done.done():
                return
            if isinstance(data, nsq.Error):
                done.set_exception(PublishError(f"PUB failed: {data}"))
                return
            samples.append(time.perf_counter_ns() - started)
            answered += 1
            if sent < job.count:
                publish()
            elif answered == job.count:
                done.set_result(None)

        writer.pub(job.topic, body, callback=answer)

    start = time.perf_counter()
    for _ in range(min(job.concurrency, job.count)):
        publish()
    await done
    seconds = time.perf_counter() - start
    close_writer(writer)
    report(job.count, seconds, samples)


async def publish_batched(job: Job) -> None:
    """One ``mpub`` outstanding; its callback sends the next."""
    writer = await connected_writer(job.address)
    sizes = iter(batches(job.count, job.batch))
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def publish_next(conn: object = None, data: object = None) -> None:
        if isinstance(data, nsq.Error):
            done.set_exception(PublishError(f"MPUB failed: {data}"))
            return
        size = next(sizes, 0)
        if not size:
            done.set_result(None)
            return
        writer.mpub(job.topic, [job.body] * size, callback=publish_next)

    start = time.perf_counter()
    publish_next()
    await done
    seconds = time.perf_counter() - start
    close_writer(writer)
    report(job.count, seconds)


async def consume(job: Job) -> None:
    """A ``Reader`` whose handler returns True, so pynsq FINs each message itself."""
    done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    seen = 0

    def handler(message: nsq.Message) -> bool:
        nonlocal seen
        seen += 1
        if seen == job.count:
            done.set_result(time.perf_counter())
        return True

    start = time.perf_counter()
    reader = nsq.Reader(
        topic=job.topic,
        channel=CHANNEL,
        message_handler=handler,
        nsqd_tcp_addresses=[job.address],
        max_in_flight=job.max_in_flight,
    )
    end = await done
    reader.close()
    report(job.count, end - start)


async def main(job: Job) -> None:
    """Inside a running asyncio loop, tornado's ``IOLoop.current()`` (which pynsq's
    clients take when created) is that loop."""
    phases = {"pub": publish_single, "mpub": publish_batched, "consume": consume}
    await phases[job.phase](job)


if __name__ == "__main__":
    asyncio.run(main(parse_job(__doc__.splitlines()[0])))
