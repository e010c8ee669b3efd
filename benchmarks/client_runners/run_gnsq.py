"""gnsq (gevent), one phase of ``benchmarks/client.py`` (see its docstring).

Monkey-patched first, as gevent applications run; gnsq itself uses gevent's sockets.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import time  # noqa: E402 - after the patch
from array import array  # noqa: E402

import gevent  # noqa: E402
import gevent.event  # noqa: E402
import gnsq  # noqa: E402
from bench_job import CHANNEL, Job, batches, parse_job, report, shares  # noqa: E402


def started_producer(address: str) -> gnsq.Producer:
    """``start`` connects and IDENTIFYs before it returns."""
    producer = gnsq.Producer([address])
    producer.start()
    return producer


def stop_producer(producer: gnsq.Producer) -> None:
    producer.close()
    producer.join(timeout=5)


def publish_single(job: Job) -> None:
    """Blocking ``publish`` per message from ``concurrency`` greenlets sharing one
    producer (gnsq hands them its connection in turn; answers come back in order)."""
    producer = started_producer(job.address)
    body, samples = job.body, array("q")

    def publish_share(share: int) -> None:
        for _ in range(share):
            sent = time.perf_counter_ns()
            producer.publish(job.topic, body)
            samples.append(time.perf_counter_ns() - sent)

    start = time.perf_counter()
    workers = [gevent.spawn(publish_share, share) for share in shares(job.count, job.concurrency)]
    gevent.joinall(workers, raise_error=True)
    seconds = time.perf_counter() - start
    stop_producer(producer)
    report(job.count, seconds, samples)


def publish_batched(job: Job) -> None:
    """Blocking ``multipublish`` calls, one after another."""
    producer = started_producer(job.address)
    start = time.perf_counter()
    for size in batches(job.count, job.batch):
        producer.multipublish(job.topic, [job.body] * size)
    seconds = time.perf_counter() - start
    stop_producer(producer)
    report(job.count, seconds)


def consume(job: Job) -> None:
    """A ``Consumer`` with a handler that returns, so gnsq FINs each message itself."""
    reached = gevent.event.AsyncResult()
    seen = 0

    def handler(consumer: gnsq.Consumer, message: gnsq.Message) -> None:
        nonlocal seen
        seen += 1
        if seen == job.count:
            reached.set(time.perf_counter())

    start = time.perf_counter()
    consumer = gnsq.Consumer(
        job.topic,
        CHANNEL,
        nsqd_tcp_addresses=[job.address],
        max_in_flight=job.max_in_flight,
        message_handler=handler,
    )
    consumer.start(block=False)
    end: float = reached.get()
    consumer.close()
    consumer.join(timeout=5)
    report(job.count, end - start)


if __name__ == "__main__":
    job = parse_job(__doc__.splitlines()[0])
    {"pub": publish_single, "mpub": publish_batched, "consume": consume}[job.phase](job)
