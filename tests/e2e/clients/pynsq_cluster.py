"""pynsq (tornado): one Reader that finds its brokers through lookupds only.

Usage: python pynsq_cluster.py LOOKUPD_HTTP[,LOOKUPD_HTTP...] TOPIC CHANNEL COUNT;
reads until COUNT distinct bodies arrived (then half a second more, so a duplicate
would show), prints a JSON summary: the bodies in arrival order and the brokers
(``host:port``) it was connected to at the end.
"""

from __future__ import annotations

import json
import sys

import nsq
import tornado.ioloop

lookupds, topic, channel, count = sys.argv[1].split(","), sys.argv[2], sys.argv[3], int(sys.argv[4])
loop = tornado.ioloop.IOLoop.current()
bodies: list[str] = []
distinct: set[str] = set()
brokers: list[str] = []
state = {"stopping": False}


def handler(message: nsq.Message) -> bool:
    body = message.body.decode()
    bodies.append(body)
    distinct.add(body)
    if len(distinct) >= count and not state["stopping"]:
        state["stopping"] = True
        loop.call_later(0.5, finish)
    return True


def finish() -> None:
    brokers.extend(sorted(reader.conns))
    loop.stop()


reader = nsq.Reader(
    topic=topic,
    channel=channel,
    message_handler=handler,
    lookupd_http_addresses=[f"http://{address}" for address in lookupds],
    lookupd_poll_interval=1,  # an int in pynsq; the first query is made at once
    lookupd_poll_jitter=0.0,
    max_in_flight=1500,
)
loop.call_later(120, loop.stop)
loop.start()
print(json.dumps({"bodies": bodies, "connections": brokers}))
