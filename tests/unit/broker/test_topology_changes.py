"""The broker's topology listeners: what the lookupd peers hear, and when."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trionsq import NsqdConfig
from trionsq.broker.broker import Broker, TopologyChange
from trionsq.dispatch.router import ChannelRunner

if TYPE_CHECKING:
    import trio


def listening(broker: Broker) -> list[TopologyChange]:
    heard: list[TopologyChange] = []
    broker.add_listener(heard.append)
    return heard


async def test_each_creation_and_deletion_is_announced_once(nursery: trio.Nursery) -> None:
    """Once per name (``whole``: what nsqd tells a lookupd), and per partition."""
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    heard = listening(broker)
    broker.topic("t", partitions=2)
    broker.topic("t", partitions=3)  # more partitions: no new name
    await broker.create_channel("t", "c")
    broker.delete_channel("t", 0, "c")
    broker.delete_channel("t", 0, "c")  # gone already: nothing
    assert broker.delete_topic("t")
    assert not broker.delete_topic("t")
    assert heard == [
        TopologyChange("t", None, True, (0, 1)),
        TopologyChange("t", None, True, (2,), whole=False),
        TopologyChange("t", "c", True, (0,)),
        TopologyChange("t", "c", True, (1,), whole=False),
        TopologyChange("t", "c", True, (2,), whole=False),
        TopologyChange("t", "c", False, (0,), whole=False),
        TopologyChange("t", "c", False, (1,), whole=False),
        TopologyChange("t", "c", False, (2,)),
        TopologyChange("t", None, False, (0, 1, 2)),
    ]


async def test_channels_made_together_are_announced_per_name(nursery: trio.Nursery) -> None:
    """Pre-created channels: one change per name, naming the partitions that lacked it."""
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    broker.topic("t", partitions=2)
    await broker.create_channel("t", "old")
    broker.delete_channel("t", 1, "old")
    heard = listening(broker)
    await broker.create_first_channels("t", ["old", "new"])
    assert heard == [
        TopologyChange("t", "old", True, (1,), whole=False),
        TopologyChange("t", "new", True, (0, 1)),
    ]


async def test_an_ephemeral_topic_is_announced_gone_once(nursery: trio.Nursery) -> None:
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    await broker.create_channel("e#ephemeral", "a")
    await broker.create_channel("e#ephemeral", "b")
    heard = listening(broker)
    assert broker.delete_topic("e#ephemeral")  # the last channel takes the topic along
    assert heard == [
        TopologyChange("e#ephemeral", "a", False),
        TopologyChange("e#ephemeral", "b", False),
        TopologyChange("e#ephemeral", None, False),
    ]  # one partition: partition 0, and every change is whole


async def test_registrations_follow_nsqds_rule(nursery: trio.Nursery) -> None:
    """A topic with channels is registered through them; one without, by itself."""
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    broker.topic("bare")
    broker.topic("parts", partitions=2)
    await broker.create_channel("parts", "x")
    await broker.create_channel("parts", "y")
    assert broker.registrations() == [("bare", None), ("parts", "x"), ("parts", "y")]


async def test_partition_registrations_follow_youzans_rule(nursery: trio.Nursery) -> None:
    """Every partition, then each of its channels (Youzan's nsqd on connect)."""
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    broker.topic("bare")
    broker.topic("parts", partitions=2)
    await broker.create_channel("parts", "x")
    broker.delete_channel("parts", 0, "x")
    assert broker.partition_registrations() == [
        ("bare", 0, None),
        ("parts", 0, None),
        ("parts", 1, None),
        ("parts", 1, "x"),
    ]


async def test_a_removed_listener_hears_nothing(nursery: trio.Nursery) -> None:
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    heard = listening(broker)
    broker.remove_listener(heard.append)
    broker.remove_listener(heard.append)  # twice: ignored
    broker.topic("t")
    assert heard == []
