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
        TopologyChange("t", None, True),
        TopologyChange("t", "c", True),
        TopologyChange("t", "c", False),
        TopologyChange("t", None, False),
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
    ]


async def test_registrations_follow_nsqds_rule(nursery: trio.Nursery) -> None:
    """A topic with channels is registered through them; one without, by itself."""
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    broker.topic("bare")
    broker.topic("parts", partitions=2)
    await broker.create_channel("parts", "x")
    await broker.create_channel("parts", "y")
    assert broker.registrations() == [("bare", None), ("parts", "x"), ("parts", "y")]


async def test_a_removed_listener_hears_nothing(nursery: trio.Nursery) -> None:
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    heard = listening(broker)
    broker.remove_listener(heard.append)
    broker.remove_listener(heard.append)  # twice: ignored
    broker.topic("t")
    assert heard == []
