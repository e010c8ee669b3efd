"""The lookupd registration DB (sans-IO): nsqlookupd's rules with explicit ``now``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trionsq.lookupd.registry import (
    CLIENT_REGISTRATION,
    Peer,
    Producer,
    Registration,
    RegistrationDB,
    filter_by_active,
)
from trionsq.protocol.lookupd import PeerInfo

TIMEOUT = 300.0
LIFETIME = 45.0


def peer(port: int, *, now: float = 0.0, http_port: int = 4151) -> Peer:
    info = PeerInfo(
        version="1.3.0",
        tcp_port=4150,
        http_port=http_port,
        hostname=f"host{port}",
        broadcast_address=f"node{port}",
    )
    return Peer(f"10.0.0.1:{port}", info, now)


def db() -> RegistrationDB:
    return RegistrationDB(inactive_producer_timeout=TIMEOUT, tombstone_lifetime=LIFETIME)


def identified(registry: RegistrationDB, *ports: int, now: float = 0.0) -> list[Peer]:
    peers = [peer(port, now=now) for port in ports]
    for each in peers:
        registry.identify(each)
    return peers


def test_register_with_channel_registers_the_channel_and_the_topic() -> None:
    registry = db()
    (a,) = identified(registry, 1)
    added = registry.register(a, "t", "c")
    assert added == [Registration("channel", "t", "c"), Registration("topic", "t")]
    assert registry.register(a, "t", "c") == []  # idempotent
    assert registry.topics() == ["t"]
    assert registry.channels("t") == ["c"]
    assert registry.lookup_registrations(a.id) == [
        CLIENT_REGISTRATION,
        Registration("channel", "t", "c"),
        Registration("topic", "t"),
    ]


def test_unregister_topic_leaves_its_channels_and_the_topic_but_keeps_the_keys() -> None:
    registry = db()
    a, b = identified(registry, 1, 2)
    registry.register(a, "t", "c1")
    registry.register(a, "t", "c2")
    registry.register(b, "t", "c1")
    left = registry.unregister(a.id, "t", None)
    assert set(left) == {
        Registration("channel", "t", "c1"),
        Registration("channel", "t", "c2"),
        Registration("topic", "t"),
    }
    assert registry.channels("t") == ["c1", "c2"]  # keys stay, c2 now empty
    assert [p.peer for p in registry.find_producers("topic", "t", "")] == [b]
    assert registry.find_producers("channel", "t", "c2") == []


def test_unregister_channel_leaves_only_that_channel() -> None:
    registry = db()
    (a,) = identified(registry, 1)
    registry.register(a, "t", "c")
    assert registry.unregister(a.id, "t", "c") == [Registration("channel", "t", "c")]
    assert [p.peer for p in registry.find_producers("topic", "t", "")] == [a]
    assert registry.unregister(a.id, "t", "c") == []


def test_ephemeral_keys_are_deleted_when_their_last_producer_unregisters() -> None:
    registry = db()
    a, b = identified(registry, 1, 2)
    registry.register(a, "t", "c#ephemeral")
    registry.register(b, "t", "c#ephemeral")
    registry.register(a, "e#ephemeral", None)
    registry.unregister(a.id, "t", "c#ephemeral")
    assert registry.channels("t") == ["c#ephemeral"]  # b still holds it
    registry.unregister(b.id, "t", "c#ephemeral")
    assert registry.channels("t") == []
    registry.unregister(a.id, "e#ephemeral", None)
    assert registry.topics() == ["t"]


def test_disconnect_removes_the_peer_everywhere_but_keeps_keys_even_ephemeral() -> None:
    registry = db()
    a, b = identified(registry, 1, 2)
    registry.register(a, "t", "c#ephemeral")
    registry.register(b, "u", None)
    removed = registry.remove_peer(a.id)
    assert set(removed) == {
        CLIENT_REGISTRATION,
        Registration("channel", "t", "c#ephemeral"),
        Registration("topic", "t"),
    }
    assert registry.lookup_registrations(a.id) == []
    assert registry.topics() == ["t", "u"]
    assert registry.channels("t") == ["c#ephemeral"]
    assert [p.peer for p in registry.find_producers("client", "", "")] == [b]


def test_find_with_wildcards_matches_any_key_or_subkey_and_dedups_producers() -> None:
    registry = db()
    a, b = identified(registry, 1, 2)
    registry.register(a, "t", "c1")
    registry.register(a, "u", "c2")
    registry.register(b, "u", None)
    assert set(registry.find_registrations("channel", "*", "*")) == {
        Registration("channel", "t", "c1"),
        Registration("channel", "u", "c2"),
    }
    assert registry.find_registrations("topic", "*", "") == [
        Registration("topic", "t"),
        Registration("topic", "u"),
    ]
    assert registry.find_registrations("topic", "nope", "") == []
    assert [p.peer for p in registry.find_producers("topic", "*", "")] == [a, b]
    assert registry.channels("*") == ["c1", "c2"]  # nsqlookupd's quirk: * is a wildcard


def test_lookup_is_none_without_a_topic_key_and_empty_when_the_key_is_empty() -> None:
    registry = db()
    assert registry.lookup("t", 0.0) is None
    registry.create_topic("t")
    assert registry.lookup("t", 0.0) == ([], [])


def test_lookup_hides_producers_silent_longer_than_the_inactivity_timeout() -> None:
    registry = db()
    a, b = identified(registry, 1, 2, now=100.0)
    registry.register(a, "t", None)
    registry.register(b, "t", None)
    found = registry.lookup("t", 100.0 + TIMEOUT)  # exactly the timeout: still active
    assert found is not None
    assert [p.peer for p in found[1]] == [a, b]
    registry.ping(b, 300.0)
    found = registry.lookup("t", 100.0 + TIMEOUT + 0.001)
    assert found is not None
    assert [p.peer for p in found[1]] == [b]
    registry.ping(a, 500.0)  # a ping brings it back
    found = registry.lookup("t", 500.0)
    assert found is not None
    assert [p.peer for p in found[1]] == [a, b]


def test_tombstone_hides_one_topic_of_one_node_for_the_lifetime() -> None:
    registry = db()
    a, b = identified(registry, 1, 2)
    registry.register(a, "t", None)
    registry.register(a, "u", None)
    registry.register(b, "t", None)
    assert registry.tombstone("t", "node1:4151", 10.0) == 1
    assert registry.tombstone("t", "node1:9999", 10.0) == 0  # no match is no error
    found_t = registry.lookup("t", 10.0 + LIFETIME - 0.001)
    found_u = registry.lookup("u", 10.0)
    assert found_t is not None
    assert found_u is not None
    assert [p.peer for p in found_t[1]] == [b]
    assert [p.peer for p in found_u[1]] == [a]
    found_t = registry.lookup("t", 10.0 + LIFETIME)  # lifetime over: visible again
    assert found_t is not None
    assert [p.peer for p in found_t[1]] == [a, b]


def test_reregistering_keeps_the_tombstone() -> None:
    registry = db()
    (a,) = identified(registry, 1)
    registry.register(a, "t", None)
    registry.tombstone("t", a.node, 0.0)
    registry.register(a, "t", "c")
    assert registry.lookup("t", 1.0) == (["c"], [])


def test_nodes_lists_active_peers_with_topics_and_tombstones_including_tombstoned() -> None:
    registry = db()
    a, b = identified(registry, 1, 2)
    registry.register(a, "t", "c")
    registry.register(a, "u", None)
    registry.tombstone("u", a.node, 0.0)
    registry.ping(a, 200.0)
    nodes = registry.nodes(10.0)
    assert [(n.peer, n.topics, n.tombstones) for n in nodes] == [
        (a, ["t", "u"], [False, True]),
        (b, [], []),
    ]
    nodes = registry.nodes(TIMEOUT + 1.0)  # b silent since 0, a pinged at 200
    assert [(n.peer, n.tombstones) for n in nodes] == [(a, [False, False])]


def test_http_topic_delete_removes_channels_and_topic_and_channel_create_adds_both() -> None:
    registry = db()
    registry.create_channel("t", "c")
    assert registry.topics() == ["t"]
    assert registry.channels("t") == ["c"]
    assert set(registry.delete_topic("t")) == {
        Registration("channel", "t", "c"),
        Registration("topic", "t"),
    }
    assert len(registry) == 0
    assert not registry.delete_channel("t", "c")


def test_filter_by_active_with_zero_lifetime_ignores_tombstones() -> None:
    member = Producer(peer(1, now=0.0))
    member.tombstone(0.0)
    assert filter_by_active([member], 0.0, TIMEOUT, 0.0) == [member]
    assert filter_by_active([member], 0.0, TIMEOUT, LIFETIME) == []


# ---------------------------------------------------------------- model-based


OPS = st.lists(
    st.tuples(
        st.sampled_from(["register", "unregister", "disconnect", "delete_topic", "delete_channel"]),
        st.integers(1, 3),
        st.sampled_from(["t", "u", "e#ephemeral"]),
        st.sampled_from([None, "c", "d#ephemeral"]),
    ),
    max_size=40,
)


@given(OPS)
def test_indexes_agree_with_a_full_scan_after_any_sequence_of_operations(
    ops: list[tuple[str, int, str, str | None]],
) -> None:
    registry = db()
    peers = {port: peer(port) for port in (1, 2, 3)}
    for each in peers.values():
        registry.identify(each)
    for op, port, topic, channel in ops:
        who = peers[port]
        if op == "register":
            registry.identify(who)
            registry.register(who, topic, channel)
        elif op == "unregister":
            registry.unregister(who.id, topic, channel)
        elif op == "disconnect":
            registry.remove_peer(who.id)
        elif op == "delete_topic":
            registry.delete_topic(topic)
        elif channel is not None:
            registry.delete_channel(topic, channel)
    everything = dict(registry.items())
    for who in peers.values():
        scanned = [key for key, members in everything.items() if who in [m.peer for m in members]]
        assert sorted(registry.lookup_registrations(who.id), key=str) == sorted(scanned, key=str)
    for category, key, subkey in (
        ("topic", "*", ""),
        ("channel", "*", "*"),
        ("channel", "t", "*"),
        ("channel", "u", "*"),
        ("topic", "t", ""),
    ):
        scanned_keys = [reg for reg in everything if reg.matches(category, key, subkey)]
        assert registry.find_registrations(category, key, subkey) == scanned_keys
    for members in everything.values():
        assert len({m.peer.id for m in members}) == len(members)
