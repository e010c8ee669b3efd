"""pynsq (tornado) against a topic with a publish limit of 2 messages/s (one token):
PUB (admitted), PUB and MPUB at once (refused), PUB a second later (admitted).

Usage: python pynsq_rate_limited.py HOST:PORT TOPIC; prints a JSON summary: each
publish's answer and how many connections the Writer used.
"""

from __future__ import annotations

import json
import sys

import nsq
import tornado.ioloop

address, topic = sys.argv[1], sys.argv[2]
loop = tornado.ioloop.IOLoop.current()
answers: list[str] = []
connections: set[int] = set()


def done(conn: object, data: object) -> None:
    connections.add(id(conn))
    answers.append(f"error: {data}" if isinstance(data, nsq.Error) else str(data))


writer = nsq.Writer([address])
loop.call_later(1.0, lambda: writer.pub(topic, b"a", callback=done))
loop.call_later(1.05, lambda: writer.pub(topic, b"b", callback=done))
loop.call_later(1.1, lambda: writer.mpub(topic, [b"c", b"d"], callback=done))
loop.call_later(2.0, lambda: writer.pub(topic, b"e", callback=done))
loop.call_later(2.5, loop.stop)
loop.start()
print(json.dumps({"answers": answers, "connections": len(connections)}))
