"""gnsq (gevent): one Consumer that finds its brokers through lookupds only.

Usage: python gnsq_cluster.py LOOKUPD_HTTP[,LOOKUPD_HTTP...] TOPIC CHANNEL COUNT;
reads until COUNT distinct bodies arrived (then half a second more, so a duplicate
would show), prints a JSON summary: the bodies in arrival order and the brokers
(``host:port``) it was connected to at the end.
"""

from __future__ import annotations

import json
import sys

import gevent
import gnsq

lookupds, topic, channel, count = sys.argv[1].split(","), sys.argv[2], sys.argv[3], int(sys.argv[4])
bodies: list[str] = []
brokers: list[str] = []
distinct: set[str] = set()
consumer = gnsq.Consumer(
    topic,
    channel,
    lookupd_http_addresses=[f"http://{address}" for address in lookupds],
    lookupd_poll_interval=1,  # the first query is made at start
    lookupd_poll_jitter=0.0,
    max_in_flight=1500,
)


def handler(consumer: gnsq.Consumer, message: gnsq.Message) -> None:
    body = message.body.decode()
    bodies.append(body)
    distinct.add(body)
    if len(distinct) == count:
        gevent.spawn_later(0.5, finish)


def finish() -> None:
    brokers.extend(sorted(f"{conn.address}:{conn.port}" for conn in consumer._connections))
    consumer.close()


consumer.on_message.connect(handler, weak=False)
gevent.spawn_later(120, consumer.close)
consumer.start()
print(json.dumps({"bodies": bodies, "connections": brokers}))
