"""The registration DB with Youzan's per-partition registrations (issue 38): a broker
registers a channel once per partition, and leaves it with its last partition."""

from __future__ import annotations

from trionsq.lookupd.registry import Registration, RegistrationDB

from .test_lookupd_registry import db, identified

CHANNEL = Registration("channel", "t", "c")
TOPIC = Registration("topic", "t")


def youzan_registered(registry: RegistrationDB, partitions: int) -> str:
    """One peer with ``t`` in ``partitions`` partitions, each with channel ``c``."""
    (a,) = identified(registry, 1)
    for pid in range(partitions):
        registry.register(a, "t", None, pid)
        registry.register(a, "t", "c", pid)
    return a.id


def test_a_channel_stays_while_another_partition_has_it() -> None:
    registry = db()
    peer_id = youzan_registered(registry, 3)
    assert registry.unregister(peer_id, "t", "c", 0) == []
    assert registry.unregister(peer_id, "t", "c", 2) == []
    assert [p.peer.id for p in registry.find_producers("channel", "t", "c")] == [peer_id]
    assert registry.unregister(peer_id, "t", "c", 1) == [CHANNEL]
    assert registry.find_producers("channel", "t", "c") == []
    assert list(registry.partitions("t")) == [0, 1, 2]  # the partitions stay


def test_a_partition_leaves_with_its_channels_and_the_last_one_takes_the_topic() -> None:
    """Youzan's nsqd deleting a topic: the channels of each partition, then each
    partition; and a partition unregistered alone takes its channels along."""
    registry = db()
    peer_id = youzan_registered(registry, 2)
    assert registry.unregister(peer_id, "t", None, 0) == []
    assert list(registry.partitions("t")) == [1]
    assert registry.find_producers("channel", "t", "c") != []  # partition 1 has it
    assert registry.unregister(peer_id, "t", None, 1) == [CHANNEL, TOPIC]
    assert registry.partitions("t") == {}
    assert registry.lookup_registrations(peer_id) == [Registration("client", "", "")]


def test_upstreams_channel_unregister_leaves_every_partition() -> None:
    registry = db()
    peer_id = youzan_registered(registry, 2)
    assert registry.unregister(peer_id, "t", "c") == [CHANNEL]
    registry.register(identified(registry, 2)[0], "t", "c", 1)
    assert registry.unregister(peer_id, "t", "c", 1) == []  # gone already


def test_a_deleted_channel_starts_over_when_registered_again() -> None:
    registry = db()
    peer_id = youzan_registered(registry, 2)
    assert registry.delete_channel("t", "c")
    (a,) = [p.peer for p in registry.find_producers("client", "", "") if p.peer.id == peer_id]
    registry.register(a, "t", "c", 1)
    assert registry.unregister(peer_id, "t", "c", 1) == [CHANNEL]


def test_a_closed_connection_forgets_its_channel_partitions() -> None:
    registry = db()
    peer_id = youzan_registered(registry, 2)
    registry.remove_peer(peer_id)
    assert registry.find_producers("channel", "t", "c") == []
    assert registry.partitions("t") == {}
