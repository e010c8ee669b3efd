"""pynsq (tornado) beside a TubeMQ client: read what TubeMQ produced, or publish what
TubeMQ will pull.

Usage: python pynsq_tubemq.py read HOST:PORT TOPIC CHANNEL COUNT
       python pynsq_tubemq.py publish HOST:PORT TOPIC HEXBODY...
Prints a JSON summary line (bodies in hex).
"""

from __future__ import annotations

import json
import sys

import nsq
import tornado.ioloop

mode, address, topic = sys.argv[1], sys.argv[2], sys.argv[3]
loop = tornado.ioloop.IOLoop.current()
summary: dict[str, object] = {}

if mode == "read":
    channel, count = sys.argv[4], int(sys.argv[5])
    bodies: list[str] = []

    def handler(message: nsq.Message) -> bool:
        bodies.append(message.body.hex())
        if len(bodies) >= count:
            loop.call_later(0.2, loop.stop)
        return True

    nsq.Reader(
        topic=topic,
        channel=channel,
        message_handler=handler,
        nsqd_tcp_addresses=[address],
        max_in_flight=100,
    )
    summary["bodies"] = bodies
else:
    results: list[str] = []

    def done(conn: object, data: object) -> None:
        results.append(f"error: {data}" if isinstance(data, nsq.Error) else "ok")
        if len(results) == 1:
            loop.call_later(0.2, loop.stop)

    def publish() -> None:
        writer.mpub(topic, [bytes.fromhex(body) for body in sys.argv[4:]], callback=done)

    writer = nsq.Writer([address])
    loop.call_later(0.5, publish)
    summary["results"] = results

loop.call_later(30, loop.stop)
loop.start()
print(json.dumps(summary))
