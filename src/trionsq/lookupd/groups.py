"""A consumer group seen across brokers: lookupd's ``GET /group``.

Each broker deals the partitions it holds over the group's members on its own
(broker/groups.py), by a rule that depends only on partition numbers and member
names, so the brokers agree without talking. Lookupd shows the whole: it asks every
broker of the topic for its ``/stats`` and joins their assignments into one
member -> partitions map, with each broker's rebalance generation, so an operator
can check that every partition has exactly one member.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
import trio

from .brokers import BrokerCallError, http_get

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["BrokerGroup", "gather", "group_document", "merge", "read_broker_group"]

BrokerGroup = tuple[str, int | None, dict[str, list[int]], str]
"""(broker ``host:http_port``, its generation or None, its assignment, error text)."""


async def read_broker_group(host: str, port: int, topic: str, channel: str) -> BrokerGroup:
    """One broker's part of the group (an unreachable broker or one without the
    group gives an empty assignment, with the reason)."""
    address = f"{host}:{port}"
    try:
        status, body = await http_get(host, port, _stats_target(topic, channel))
    except BrokerCallError as error:
        return address, None, {}, str(error)
    if status != 200:
        return address, None, {}, f"HTTP {status}"
    try:
        document = orjson.loads(body)
        channels = [
            c for t in document["topics"] if t["topic_name"] == topic for c in t["channels"]
        ]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return address, None, {}, "unreadable /stats"
    for found in channels:
        if found.get("channel_name") == channel and isinstance(found.get("group"), dict):
            group = found["group"]
            return address, group.get("generation"), dict(group.get("assignment", {})), ""
    return address, None, {}, "no such group"


def _stats_target(topic: str, channel: str) -> str:
    return f"/stats?format=json&include_clients=false&topic={topic}&channel={channel}"


def merge(parts: Sequence[BrokerGroup]) -> dict[str, list[int]]:
    """member -> every partition it consumes on any broker (sorted)."""
    merged: dict[str, set[int]] = {}
    for _, _, assignment, _ in parts:
        for member, partitions in assignment.items():
            merged.setdefault(member, set()).update(partitions)
    return {member: sorted(merged[member]) for member in sorted(merged)}


def group_document(topic: str, channel: str, parts: Sequence[BrokerGroup]) -> dict[str, object]:
    """``GET /group``'s answer."""
    brokers: list[dict[str, object]] = []
    for address, generation, assignment, error in sorted(parts):
        entry: dict[str, object] = {"address": address, "generation": generation}
        entry["partitions"] = sorted(p for ps in assignment.values() for p in ps)
        if error:
            entry["error"] = error
        brokers.append(entry)
    return {"topic": topic, "channel": channel, "assignment": merge(parts), "brokers": brokers}


async def gather(
    addresses: Sequence[tuple[str, int]], topic: str, channel: str
) -> list[BrokerGroup]:
    """Every broker's part, asked at once."""
    parts: list[BrokerGroup] = []

    async def ask(host: str, port: int) -> None:
        parts.append(await read_broker_group(host, port, topic, channel))

    async with trio.open_nursery() as nursery:
        for host, port in addresses:
            nursery.start_soon(ask, host, port)
    return parts
