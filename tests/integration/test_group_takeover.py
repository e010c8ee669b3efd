"""Consumer groups at a takeover (issue 30, items 6, 8 and 9): a partition whose
member died goes to another with its unfinished messages first; a member that stops
answering is timed out after its group session timeout and fenced; the client's
ordered mode knows a takeover from a skip. docs/extensions.md, "Consumer groups".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing

from trionsq.protocol import Pub

from .raw import publish
from .test_consumer_groups import DELAY, join, started

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .raw import Clients


def newer_before_older(order: Sequence[int]) -> int:
    """How many messages came before an older one of their partition."""
    return sum(1 for i, seen in enumerate(order) if any(later < seen for later in order[i + 1 :]))


async def test_a_new_owner_gets_the_partition_s_put_back_messages_first(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """The dead member's unfinished messages go out before the partition's newer
    ones (nsqd puts a redelivery behind what waits: up to 10,000 newer messages)."""
    addresses = await started(nursery, autojump_clock)
    owner = await join(clients, addresses, "a", rdy=5)
    await owner.collect(DELAY + 1)  # alone: it owns every partition
    producer = await clients.connect(addresses.tcp)
    await publish(producer, *(Pub("g", b"%d" % i, 0) for i in range(30)))
    await owner.collect(DELAY)
    assert [int(m.body) for m in owner.received[0]] == list(range(5))  # 25 more wait
    heir = await join(clients, addresses, "b", rdy=100)
    await heir.collect(DELAY + 1)
    assert heir.received[0] == []  # "a" keeps partition 0
    for link in owner.links.values():  # "a" dies holding five
        await trio.aclose_forcefully(link.stream)
    await heir.collect(DELAY + 1)
    order = [int(m.body) for m in heir.received[0]]
    assert sorted(order) == list(range(30))
    assert newer_before_older(order) == 0, order
    assert [m.attempts for m in heir.received[0][:5]] == [2] * 5
