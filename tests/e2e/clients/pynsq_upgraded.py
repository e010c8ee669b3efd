"""pynsq (tornado) over IDENTIFY's upgrades: publish COUNT messages (PUB, then MPUB),
then consume them all from one channel, with TLS/snappy/deflate as asked.

Usage: python pynsq_upgraded.py HOST:PORT TOPIC COUNT FEATURES CA_FILE
FEATURES: comma-separated of tls, snappy, deflate. Prints a JSON summary.
"""

from __future__ import annotations

import json
import ssl
import sys

import nsq
import tornado.ioloop

address, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
features, ca_file = set(sys.argv[4].split(",")), sys.argv[5]
options: dict[str, object] = {"snappy": "snappy" in features, "deflate": "deflate" in features}
if "tls" in features:
    options["tls_v1"] = True
    options["tls_options"] = {"ca_certs": ca_file, "cert_reqs": ssl.CERT_REQUIRED}

loop = tornado.ioloop.IOLoop.current()
published: list[str] = []
received: list[str] = []


def start_reader() -> None:
    def handler(message: nsq.Message) -> bool:
        received.append(message.body.decode())
        if len(received) == count:
            loop.call_later(0.1, loop.stop)
        return True

    nsq.Reader(
        topic=topic,
        channel="c",
        message_handler=handler,
        nsqd_tcp_addresses=[address],
        max_in_flight=50,
        **options,
    )


def publish() -> None:
    """Until the writer's connection is up, pynsq answers 'no open connections'."""

    def done(conn: object, data: object) -> None:
        if isinstance(data, nsq.Error):
            if "no open connections" in str(data) and not published:
                loop.call_later(0.05, publish)
                return
            published.append(f"error: {data}")
            loop.stop()
            return
        published.append("ok")
        if len(published) == 1:
            writer.mpub(topic, [b"m%d" % i for i in range(1, count)], callback=done)
        else:
            start_reader()

    writer.pub(topic, b"m0", callback=done)


writer = nsq.Writer([address], **options)
loop.add_callback(publish)
loop.call_later(30, loop.stop)  # a guard: the test fails on a short list
loop.start()
print(json.dumps({"published": published, "received": received}))
