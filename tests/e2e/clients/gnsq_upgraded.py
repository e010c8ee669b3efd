"""gnsq (gevent) over IDENTIFY's upgrades: publish COUNT messages (PUB, then MPUB),
then consume them all from one channel, with TLS/snappy/deflate as asked.

Usage: python gnsq_upgraded.py HOST:PORT TOPIC COUNT FEATURES CA_FILE
FEATURES: comma-separated of tls, snappy, deflate. Prints a JSON summary.
"""

from __future__ import annotations

import json
import ssl
import sys

import gevent
import gnsq

address, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
features, ca_file = set(sys.argv[4].split(",")), sys.argv[5]
options: dict[str, object] = {"snappy": "snappy" in features, "deflate": "deflate" in features}
if "tls" in features:
    options["tls_v1"] = True
    options["tls_options"] = {"ca_certs": ca_file, "cert_reqs": ssl.CERT_REQUIRED}

# gnsq's Producer cannot take an upgrade: its response handler sees the upgrade's
# OK before the connection is registered (KeyError). Its connection class can.
host, port = address.rsplit(":", 1)
producer = gnsq.NsqdTCPClient(host, int(port), **options)
producer.connect()
producer.identify()
producer.publish(topic, b"m0")
producer.check_ok()
producer.multipublish(topic, [b"m%d" % i for i in range(1, count)])
producer.check_ok()
producer.close_stream()

received: list[str] = []
consumer = gnsq.Consumer(topic, "c", nsqd_tcp_addresses=[address], max_in_flight=50, **options)


def handler(consumer: gnsq.Consumer, message: gnsq.Message) -> None:
    received.append(message.body.decode())
    message.finish()
    if len(received) == count:
        gevent.spawn_later(0.1, consumer.close)


consumer.on_message.connect(handler, weak=False)
gevent.spawn_later(30, consumer.close)  # a guard: the test fails on a short list
consumer.start()
print(json.dumps({"received": received}))
