"""pynsq (tornado): two consumers share channel "shared", one reads channel "other";
then N messages are published (PUB m0, MPUB the rest) and m0 is requeued once.

Usage: python pynsq_roundtrip.py HOST:PORT TOPIC COUNT; prints a JSON summary.
"""

from __future__ import annotations

import json
import sys

import nsq
import tornado.ioloop

address, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
loop = tornado.ioloop.IOLoop.current()
seen: dict[str, dict[str, list[int]]] = {"shared": {}, "other": {}}
per_consumer: dict[str, int] = {"shared-1": 0, "shared-2": 0, "other": 0}
published: list[str] = []


def done_publishing(conn: object, data: object) -> None:
    published.append(f"error: {data}" if isinstance(data, nsq.Error) else "ok")


def publish() -> None:
    writer.pub(topic, b"m0", callback=done_publishing)
    writer.mpub(topic, [b"m%d" % i for i in range(1, count)], callback=done_publishing)


def finished() -> bool:
    shared, other = seen["shared"], seen["other"]
    return len(shared) == count and len(shared.get("m0", [])) == 2 and len(other) == count


def handler_for(name: str, channel: str) -> object:
    def handler(message: nsq.Message) -> bool | None:
        body = message.body.decode()
        seen[channel].setdefault(body, []).append(message.attempts)
        per_consumer[name] += 1
        if channel == "shared" and body == "m0" and message.attempts == 1:
            message.enable_async()
            message.requeue(backoff=False, delay=0)
            return None
        if finished():
            loop.call_later(0.2, loop.stop)
        return True

    return handler


for name, channel in (("shared-1", "shared"), ("shared-2", "shared"), ("other", "other")):
    nsq.Reader(
        topic=topic,
        channel=channel,
        message_handler=handler_for(name, channel),
        nsqd_tcp_addresses=[address],
        max_in_flight=5,
    )
writer = nsq.Writer([address])
loop.call_later(1.0, publish)  # every reader has subscribed by then
loop.call_later(30, loop.stop)
loop.start()
print(json.dumps({"published": published, "seen": seen, "per_consumer": per_consumer}))
