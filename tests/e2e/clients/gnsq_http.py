"""gnsq's NsqdHTTPClient against trionsq's HTTP port: every call it has, in order.

Usage: python gnsq_http.py HOST PORT; prints one JSON object mapping each step to
its result (``{"ok": value}``, or ``{"error": text}`` where gnsq raised), and the
/stats documents the steps asked for, so the test can check what each call did.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import gnsq

if TYPE_CHECKING:
    from collections.abc import Callable

host, port = sys.argv[1], int(sys.argv[2])
client = gnsq.NsqdHTTPClient(host, port)
results: dict[str, object] = {}


def plain(value: object) -> object:
    return value.decode() if isinstance(value, bytes) else value


def step(name: str, call: Callable[..., object], *args: object, **kwargs: object) -> object:
    try:
        value = plain(call(*args, **kwargs))
    except Exception as error:  # reported to the test, which fails on it
        results[name] = {"error": f"{type(error).__name__}: {error}"}
        return None
    results[name] = {"ok": value}
    return value


def stats(name: str, topic: str | None = None, channel: str | None = None) -> None:
    step(name, client.stats, topic=topic, channel=channel)


step("ping", client.ping)
step("info", client.info)
step("create_topic", client.create_topic, "g")
step("create_topic_again", client.create_topic, "g")
step("create_channel", client.create_channel, "g", "c")
step("publish", client.publish, "g", b"one")
step("publish_deferred", client.publish, "g", b"later", defer=60_000)
step("multipublish", client.multipublish, "g", [b"two", b"three"])
step(
    "multipublish_binary", client.multipublish, "g", [b"four\nwith a newline", b"five"], binary=True
)
stats("stats_published", "g", "c")
step("pause_topic", client.pause_topic, "g")
step("pause_channel", client.pause_channel, "g", "c")
stats("stats_paused", "g")
step("unpause_topic", client.unpause_topic, "g")
step("unpause_channel", client.unpause_channel, "g", "c")
stats("stats_unpaused", "g")
step("empty_channel", client.empty_channel, "g", "c")
stats("stats_channel_emptied", "g", "c")
step("publish_no_channel", client.multipublish, "h", [b"x", b"y"])
stats("stats_topic_full", "h")
step("empty_topic", client.empty_topic, "h")
stats("stats_topic_emptied", "h")
step("delete_channel", client.delete_channel, "g", "c")
stats("stats_channel_deleted", "g")
step("delete_topic", client.delete_topic, "g")
stats("stats_topic_deleted", "g")
stats("stats_all")
step("delete_missing_topic", client.delete_topic, "g")  # an error: TOPIC_NOT_FOUND
print(json.dumps(results))
