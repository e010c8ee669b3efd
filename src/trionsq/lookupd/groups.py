"""A consumer group seen across brokers: lookupd's ``GET /group``.

Each broker deals the partitions it holds over the group's members on its own
(broker/groups.py). Lookupd shows the whole: it asks every broker of the topic for
its ``/stats`` and joins their assignments into one member -> partitions map, with
the members connected anywhere and each broker's rebalance generation, so an
operator can check that every partition has exactly one member. Brokers read it
too before they deal (server/group_views.py): the sticky deal starts from the
previous owner of every partition, and each broker knows only its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import orjson
import trio

from .brokers import BrokerCallError, http_get

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["BrokerGroup", "gather", "group_document", "merge", "read_broker_group"]


@attrs.frozen
class BrokerGroup:
    """One broker's part of a group, as its ``/stats`` shows it."""

    address: str
    """The broker's ``host:http_port``."""
    generation: int | None = None
    """Its rebalances (None: it has no such group, or could not be asked)."""
    assignment: dict[str, list[int]] = attrs.field(factory=dict)
    """member -> the partitions it consumes on that broker."""
    members: tuple[str, ...] = ()
    """The members connected to that broker."""
    error: str = ""
    """Why nothing could be read ("" when it could)."""


async def read_broker_group(host: str, port: int, topic: str, channel: str) -> BrokerGroup:
    """One broker's part of the group (an unreachable broker or one without the
    group gives an empty assignment, with the reason)."""
    address = f"{host}:{port}"
    try:
        status, body = await http_get(host, port, _stats_target(topic, channel))
    except BrokerCallError as error:
        return BrokerGroup(address, error=str(error))
    if status != 200:
        return BrokerGroup(address, error=f"HTTP {status}")
    try:
        document = orjson.loads(body)
        channels = [
            c for t in document["topics"] if t["topic_name"] == topic for c in t["channels"]
        ]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return BrokerGroup(address, error="unreadable /stats")
    for found in channels:
        if found.get("channel_name") == channel and isinstance(found.get("group"), dict):
            group = found["group"]
            assignment = dict(group.get("assignment", {}))
            members = tuple(group.get("members", assignment))  # older brokers: owners
            return BrokerGroup(address, group.get("generation"), assignment, members)
    return BrokerGroup(address, error="no such group")


def _stats_target(topic: str, channel: str) -> str:
    return f"/stats?format=json&include_clients=false&topic={topic}&channel={channel}"


def merge(parts: Sequence[BrokerGroup]) -> dict[str, list[int]]:
    """member -> every partition it consumes on any broker (sorted)."""
    merged: dict[str, set[int]] = {}
    for part in parts:
        for member, partitions in part.assignment.items():
            merged.setdefault(member, set()).update(partitions)
    return {member: sorted(merged[member]) for member in sorted(merged)}


def group_document(topic: str, channel: str, parts: Sequence[BrokerGroup]) -> dict[str, object]:
    """``GET /group``'s answer."""
    brokers: list[dict[str, object]] = []
    for part in sorted(parts, key=lambda part: part.address):
        entry: dict[str, object] = {"address": part.address, "generation": part.generation}
        entry["partitions"] = sorted(p for ps in part.assignment.values() for p in ps)
        if part.error:
            entry["error"] = part.error
        brokers.append(entry)
    members = sorted({member for part in parts for member in part.members})
    return {
        "topic": topic,
        "channel": channel,
        "assignment": merge(parts),
        "members": members,
        "brokers": brokers,
    }


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
