"""gnsq (gevent) publishes N messages, then consumes them, requeueing m0 once.

Usage: python gnsq_roundtrip.py HOST:PORT TOPIC COUNT; prints a JSON summary.
"""

from __future__ import annotations

import json
import sys

import gevent
import gnsq

address, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
producer = gnsq.Producer(address)
producer.start()
producer.publish(topic, b"m0")
producer.multipublish(topic, [b"m%d" % i for i in range(1, count)])
producer.close()
producer.join()

seen: dict[str, list[int]] = {}
consumer = gnsq.Consumer(topic, "gnsq", nsqd_tcp_addresses=[address], max_in_flight=50)


@consumer.on_message.connect
def handler(consumer: gnsq.Consumer, message: gnsq.Message) -> None:
    body = message.body.decode()
    seen.setdefault(body, []).append(message.attempts)
    if body == "m0" and message.attempts == 1:
        message.requeue(0, backoff=False)
        return
    message.finish()
    if len(seen) == count:
        gevent.spawn_later(0.2, consumer.close)


gevent.spawn_later(30, consumer.close)
consumer.start()
print(json.dumps({"published": ["ok", "ok"], "seen": seen}))
