"""pynsq (tornado) pipelining COUNT publishes at once into a topic with a throttling
publish limit: pynsq fails every callback still waiting when any error frame comes,
so one refusal would show here as many failed publishes.

Usage: python pynsq_throttled.py HOST:PORT TOPIC COUNT; prints a JSON summary: how
many callbacks saw OK and how many an error (the first few errors' texts), and the
monotonic seconds of the first and the last answer.
"""

from __future__ import annotations

import json
import sys
import time

import nsq
import tornado.ioloop

address, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
loop = tornado.ioloop.IOLoop.current()
answered: list[float] = []
errors: list[str] = []


def done(conn: object, data: object) -> None:
    answered.append(time.monotonic())
    if isinstance(data, Exception):
        errors.append(str(data))
    if len(answered) == count:
        loop.stop()


def publish_all() -> None:
    for i in range(count):
        writer.pub(topic, b"m%d" % i, callback=done)


writer = nsq.Writer([address])
loop.call_later(1.0, publish_all)
loop.call_later(60.0, loop.stop)
loop.start()
print(
    json.dumps(
        {
            "ok": len(answered) - len(errors),
            "failed": len(errors),
            "errors": errors[:3],
            "first": answered[0] if answered else 0.0,
            "last": answered[-1] if answered else 0.0,
        }
    )
)
