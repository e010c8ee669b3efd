"""``--max-open-files``: a cap on the segment and delays files a broker holds open,
below what the open-file limit would allow (RocksDB's max_open_files). Publishing
round robin over three times as many topics stores every message and the files
held stay within the cap (issue 30, 3b)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol import Pub, Rdy, Sub
from trionsq.protocol.client import Response

from .raw import bodies, publish

if TYPE_CHECKING:
    from pathlib import Path

    import trio

    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients

CAP = 20


async def test_round_robin_over_more_topics_than_max_open_files(
    clients: Clients, nursery: trio.Nursery, tmp_path: Path
) -> None:
    config = NsqdConfig.loopback(data_path=str(tmp_path), max_open_files=CAP)
    addresses: BoundAddresses = await nursery.start(serve_nsqd, config)
    storage = addresses.broker.storage
    assert storage is not None
    budget = storage.descriptors
    assert budget.max_open_files == CAP
    producer = await clients.connect(addresses.tcp)
    topics = [f"t{number}" for number in range(3 * CAP)]
    for round_ in range(3):
        await publish(
            producer, *(Pub(topic, b"%s-%d" % (topic.encode(), round_)) for topic in topics)
        )
        assert budget.files_open <= CAP
    assert budget.evictions >= 3 * len(topics) - CAP
    for topic in (topics[0], topics[-1]):
        consumer = await clients.connect(addresses.tcp)
        await consumer.send(Sub(topic, "c"), Rdy(10))
        subscribed, *messages = await consumer.read(4)
        assert subscribed == Response(b"OK")
        received = bodies(messages)
        assert received == [b"%s-%d" % (topic.encode(), n) for n in range(3)]
