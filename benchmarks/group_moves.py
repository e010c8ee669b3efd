"""How many partitions a consumer group moves when a member leaves or joins, over
three brokers placed by lookupd (issue 30, item 7: the deal is sticky).

An in-process cluster (three brokers, one lookupd, ``--group-rebalance-delay``
0.2 s); for a topic of 8 and one of 6 partitions, members (trionsq clients) join one
after another, then: one of three leaves (m2), and a fourth joins three (m0 m1 m3,
then m4). The assignment is read from lookupd's ``GET /group`` once it has settled::

    .venv/bin/python benchmarks/group_moves.py

Prints, per topic, the partitions moved and the fewest that could move (the
departed member's, or what a fourth needs to even the counts out).
"""

from __future__ import annotations

import httpx
import trio

from trionsq import NsqdConfig
from trionsq.testing import even_group, group_member, open_nsq_cluster


def moved(before: dict[int, str], after: dict[int, str]) -> int:
    return sum(1 for partition, owner in after.items() if before[partition] != owner)


async def measure(lookupd: str, partitions: int) -> None:
    topic = f"moves{partitions}"
    async with httpx.AsyncClient(base_url=f"http://{lookupd}") as http:
        created = await http.post(
            f"/topic/create?topic={topic}&partition_num={partitions}&replicator=1"
        )
        created.raise_for_status()
    scopes: dict[str, trio.CancelScope] = {}
    async with trio.open_nursery() as nursery:
        joined: set[str] = set()
        for name in ("m0", "m1", "m2"):
            scopes[name] = await nursery.start(group_member, lookupd, topic, "c", name)
            joined.add(name)
            three = await even_group(lookupd, topic, "c", joined, partitions)
        scopes["m2"].cancel()
        two = await even_group(lookupd, topic, "c", {"m0", "m1"}, partitions)
        had = sum(1 for owner in three.values() if owner == "m2")
        print(f"{partitions} partitions, 1 of 3 leaves: moved {moved(three, two)} (it had {had})")
        await nursery.start(group_member, lookupd, topic, "c", "m3")
        three = await even_group(lookupd, topic, "c", {"m0", "m1", "m3"}, partitions)
        await nursery.start(group_member, lookupd, topic, "c", "m4")
        four = await even_group(lookupd, topic, "c", {"m0", "m1", "m3", "m4"}, partitions)
        fewest = partitions // 4
        print(f"{partitions} partitions, a 4th joins: moved {moved(three, four)} (fewest {fewest})")
        nursery.cancel_scope.cancel()


async def main() -> None:
    config = NsqdConfig.loopback(group_rebalance_delay=0.2)
    async with open_nsq_cluster(brokers=3, lookupds=1, nsqd_config=config) as cluster:
        (lookupd,) = cluster.lookupd_http_addresses
        with trio.fail_after(120):
            for partitions in (8, 6):
                await measure(lookupd, partitions)
        cluster.nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
