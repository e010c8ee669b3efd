"""gnsq (gevent): two consumers share channel "shared", one reads channel "other";
then N messages are published (PUB m0, MPUB the rest) and m0 is requeued once.

Usage: python gnsq_roundtrip.py HOST:PORT TOPIC COUNT; prints a JSON summary.
"""

from __future__ import annotations

import json
import sys

import gevent
import gnsq

address, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
seen: dict[str, dict[str, list[int]]] = {"shared": {}, "other": {}}
per_consumer: dict[str, int] = {"shared-1": 0, "shared-2": 0, "other": 0}
consumers: list[gnsq.Consumer] = []


def finished() -> bool:
    shared, other = seen["shared"], seen["other"]
    return len(shared) == count and len(shared.get("m0", [])) == 2 and len(other) == count


def close_all() -> None:
    for consumer in consumers:
        consumer.close()


def start_consumer(name: str, channel: str) -> gnsq.Consumer:
    consumer = gnsq.Consumer(topic, channel, nsqd_tcp_addresses=[address], max_in_flight=5)

    def handler(consumer: gnsq.Consumer, message: gnsq.Message) -> None:
        body = message.body.decode()
        seen[channel].setdefault(body, []).append(message.attempts)
        per_consumer[name] += 1
        if channel == "shared" and body == "m0" and message.attempts == 1:
            message.requeue(0, backoff=False)
            return
        message.finish()
        if finished():
            gevent.spawn_later(0.2, close_all)

    consumer.on_message.connect(handler, weak=False)  # a closure: keep it alive
    consumers.append(consumer)
    return consumer


running = [
    gevent.spawn(start_consumer(name, channel).start)
    for name, channel in (("shared-1", "shared"), ("shared-2", "shared"), ("other", "other"))
]
gevent.sleep(1.0)  # every consumer has subscribed by then
producer = gnsq.Producer(address)
producer.start()
producer.publish(topic, b"m0")
producer.multipublish(topic, [b"m%d" % i for i in range(1, count)])
producer.close()
producer.join()
gevent.spawn_later(30, close_all)
gevent.joinall(running)
print(json.dumps({"published": ["ok", "ok"], "seen": seen, "per_consumer": per_consumer}))
