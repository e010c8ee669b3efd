"""trionsq.client.blocking (threads), one phase of ``benchmarks/client.py`` (see its
docstring): the client for code that is not Trio, used the way gnsq's users use
theirs, with threads where gnsq has greenlets."""

from __future__ import annotations

import threading
import time
from array import array

from bench_job import CHANNEL, Job, batches, parse_job, report, shares

from trionsq.client.blocking import connect_consumer, connect_producer


def publish_single(job: Job) -> None:
    """Blocking ``publish`` per message from ``concurrency`` threads sharing one
    producer; concurrent publishes leave together as MPUBs."""
    body, samples = job.body, array("q")
    with connect_producer(job.address) as producer:

        def publish_share(share: int) -> None:
            for _ in range(share):
                sent = time.perf_counter_ns()
                producer.publish(job.topic, body)
                samples.append(time.perf_counter_ns() - sent)  # array.append holds the GIL

        workers = [
            threading.Thread(target=publish_share, args=(share,))
            for share in shares(job.count, job.concurrency)
        ]
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        seconds = time.perf_counter() - start
    report(job.count, seconds, samples)


def publish_batched(job: Job) -> None:
    """Blocking ``publish_many`` calls, one after another."""
    with connect_producer(job.address) as producer:
        start = time.perf_counter()
        for size in batches(job.count, job.batch):
            producer.publish_many(job.topic, [job.body] * size)
        seconds = time.perf_counter() - start
    report(job.count, seconds)


def consume(job: Job) -> None:
    """``for message in consumer: message.finish()``; the clock starts before it connects."""
    seen = 0
    start = time.perf_counter()
    with connect_consumer(
        job.topic, CHANNEL, job.address, max_in_flight=job.max_in_flight
    ) as consumer:
        for message in consumer:
            message.finish()
            seen += 1
            if seen == job.count:
                break
        seconds = time.perf_counter() - start
    report(seen, seconds)


if __name__ == "__main__":
    job = parse_job(__doc__.splitlines()[0])
    {"pub": publish_single, "mpub": publish_batched, "consume": consume}[job.phase](job)
