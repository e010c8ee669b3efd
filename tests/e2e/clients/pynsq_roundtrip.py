"""pynsq (tornado) publishes N messages, then consumes them, requeueing m0 once.

Usage: python pynsq_roundtrip.py HOST:PORT TOPIC COUNT; prints a JSON summary.
"""

from __future__ import annotations

import json
import sys

import nsq
import tornado.ioloop

address, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
loop = tornado.ioloop.IOLoop.current()
seen: dict[str, list[int]] = {}
published: list[str] = []


def done_publishing(conn: object, data: object) -> None:
    if isinstance(data, nsq.Error):
        published.append(f"error: {data}")
    else:
        published.append("ok")
    if len(published) == 2:
        start_reader()


def publish() -> None:
    writer.pub(topic, b"m0", callback=done_publishing)
    writer.mpub(topic, [b"m%d" % i for i in range(1, count)], callback=done_publishing)


def handler(message: nsq.Message) -> bool | None:
    body = message.body.decode()
    seen.setdefault(body, []).append(message.attempts)
    if body == "m0" and message.attempts == 1:
        message.enable_async()
        message.requeue(backoff=False, delay=0)
        return None
    if len(seen) == count and all(len(a) for a in seen.values()):
        loop.call_later(0.2, loop.stop)
    return True


def start_reader() -> None:
    nsq.Reader(
        topic=topic,
        channel="pynsq",
        message_handler=handler,
        nsqd_tcp_addresses=[address],
        max_in_flight=50,
    )


writer = nsq.Writer([address])
loop.call_later(0.5, publish)
loop.call_later(30, loop.stop)
loop.start()
print(json.dumps({"published": published, "seen": seen}))
