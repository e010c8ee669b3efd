"""Where a ``trionsq`` sink write's rows go: each topic's brokers, found once.

Shared by the driver's writers (sink.py, for the ``topic`` option) and the tasks
(sink_task.py, for each new value of a ``topic`` column).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .broker_http import locate_partitions, tcp_address

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from .options import WriteOptions

__all__ = ["Destinations", "Topic"]


def _needs_ext(schema: StructType, options: WriteOptions) -> str | None:
    """What the write puts in headers (so the topic must be an ext topic), if anything."""
    if options.exactly_once:
        return "idempotency keys (exactlyOnce)"
    carried = [n for n in ("headers", "tag", "idempotency_key") if n in schema.fieldNames()]
    return f"the {', '.join(carried)} column(s)" if carried else None


class Topic:
    """Where one topic's rows go: the TCP address of the broker holding each of its
    partitions, and whether it takes headers."""

    def __init__(self, options: WriteOptions, name: str) -> None:
        access = options.access
        located = locate_partitions(access, name, options.nsqd, options.lookupd)
        addresses = {where.address for where in located.values()}
        tcp = {address: tcp_address(access, address) for address in addresses}
        self.name = name
        self.brokers = {partition: tcp[where.address] for partition, where in located.items()}
        self.count = max(located) + 1
        self.ext = all(where.ext for where in located.values())


class Destinations:
    """The topics of a write, found once per topic (on the driver for the ``topic``
    option, in the task for each new value of a ``topic`` column)."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        self.needs_ext = _needs_ext(schema, options)
        self.topics: dict[str, Topic] = {}
        if options.topic is not None:
            self.get(options.topic)

    def get(self, name: str) -> Topic:
        found = self.topics.get(name)
        if found is None:
            found = self.topics[name] = Topic(self.options, name)
            if self.needs_ext is not None and not found.ext:
                raise ValueError(
                    f"trionsq sink: topic {name!r} is not an ext topic, so it cannot carry"
                    f" {self.needs_ext}: create it with ext=true, or write only 'body' with"
                    " exactlyOnce=false"
                )
        return found
