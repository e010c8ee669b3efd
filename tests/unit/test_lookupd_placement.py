"""The lookupd's topic catalog and partition placement, sans-IO (lookupd/topics.py)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.lookupd.registry import Peer, RegistrationDB
from trionsq.lookupd.topics import (
    ArgError,
    PlacedBroker,
    PlacementError,
    TopicCatalog,
    TopicMeta,
    parse_create_args,
    parse_update_args,
    place,
    youzan_lookup,
)
from trionsq.protocol.lookupd import PeerInfo


def broker(port: int, address: str = "10.0.0.1") -> PlacedBroker:
    return PlacedBroker(f"{address}:{port}", f"{address}:5{port}", address, port - 1, port)


def peer(peer_id: str, port: int, *, address: str = "10.0.0.1") -> Peer:
    info = PeerInfo(
        version="1.0", tcp_port=port - 1, http_port=port, hostname="h", broadcast_address=address
    )
    return Peer(peer_id, info, 0.0)


# ---------------------------------------------------------------- place()


def test_place_spreads_by_count_and_breaks_ties_by_address_then_port() -> None:
    brokers = [broker(4153), broker(4151), broker(4152)]
    chosen = place(6, brokers, {})
    assert [b.http_port for b in chosen] == [4151, 4152, 4153, 4151, 4152, 4153]


def test_place_fills_the_least_loaded_first() -> None:
    a, b, c = broker(1), broker(2), broker(3)
    chosen = place(4, [a, b, c], {a.node: 3, b.node: 1})
    assert [x.node for x in chosen] == [c.node, b.node, c.node, b.node]


def test_place_counts_a_node_once_and_needs_a_candidate() -> None:
    a = broker(1)
    assert place(2, [a, a], {}) == (a, a)
    with pytest.raises(PlacementError, match="no broker registered"):
        place(1, [], {})


@given(
    brokers=st.integers(min_value=1, max_value=8),
    creates=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=12),
)
def test_placement_stays_balanced_within_one_after_every_create(
    brokers: int, creates: list[int]
) -> None:
    candidates = [broker(4000 + n) for n in range(brokers)]
    catalog = TopicCatalog()
    for index, count in enumerate(creates):
        topic, created = catalog.create(f"t{index}", TopicMeta(partition_num=count), candidates)
        assert created
        assert len(topic.placement) == count
        per_create = Counter(b.node for b in topic.placement)
        assert max(per_create.values()) - min(per_create.get(c.node, 0) for c in candidates) <= 1
        loads = catalog.leader_counts()
        totals = [loads.get(c.node, 0) for c in candidates]
        assert max(totals) - min(totals) <= 1


# ---------------------------------------------------------------- TopicCatalog


def test_create_again_is_idempotent_and_a_different_meta_is_refused() -> None:
    catalog = TopicCatalog()
    first, created = catalog.create("t", TopicMeta(partition_num=2), [broker(1)])
    assert created
    again, created = catalog.create("t", TopicMeta(partition_num=2), [broker(2)])
    assert (again, created) == (first, False)
    with pytest.raises(PlacementError, match=r"partition_num=2 \(asked 3\)"):
        catalog.create("t", TopicMeta(partition_num=3), [broker(1)])
    with pytest.raises(PlacementError, match=r"extend_support=False \(asked True\)"):
        catalog.create("t", TopicMeta(partition_num=2, extend_support=True), [broker(1)])


def test_sync_state_pending_until_confirmed_and_again_after_reconnect_or_upgrade() -> None:
    catalog = TopicCatalog()
    a, b = broker(1), broker(2)
    topic, _ = catalog.create("t", TopicMeta(partition_num=2), [a, b])
    assert catalog.pending(a.node) == [topic]
    topic.synced.update({a.node, b.node})
    assert catalog.pending(a.node) == []
    catalog.forget_synced(a.node)
    assert catalog.pending(a.node) == [topic]
    assert catalog.pending(b.node) == []
    target = topic.creation_target()
    assert target == "/topic/create?topic=t&partition_num=2&ext=false&ordered=false"
    ephemeral, _ = catalog.create("e#ephemeral", TopicMeta(partition_num=1), [a])
    assert ephemeral.creation_target().startswith("/topic/create?topic=e%23ephemeral&")
    catalog.update("t", upgrade_ext=True, replica=3)
    assert topic.meta.extend_support
    assert topic.meta.replica == 3
    assert topic.synced == set()
    assert "ext=true" in topic.creation_target()
    catalog.update("t", upgrade_ext=False)  # one way
    assert topic.meta.extend_support
    with pytest.raises(PlacementError):
        catalog.update("never")


def test_expand_places_only_the_new_partitions() -> None:
    catalog = TopicCatalog()
    a, b = broker(1), broker(2)
    topic, _ = catalog.create("t", TopicMeta(partition_num=1), [a, b])
    assert topic.placement == (a,)
    catalog.expand("t", 4, [a, b])
    assert list(topic.placement) == [a, b, a, b]  # b (empty), then ties go to a
    assert topic.meta.partition_num == 4
    with pytest.raises(PlacementError, match="cannot be removed"):
        catalog.expand("t", 2, [a, b])


# ---------------------------------------------------------------- query parsing


def args(query: dict[str, str]) -> TopicMeta:
    return parse_create_args(query.get)[1]


def test_create_args_flags_need_the_exact_string_true() -> None:
    meta = args(
        {
            "topic": "t",
            "partition_num": "3",
            "replicator": "2",
            "extend": "true",
            "orderedmulti": "1",
            "multipart": "true",
            "suggestload": "10000",
            "syncdisk": "-5",
            "retention": "+7",
        }
    )
    assert meta == TopicMeta(
        partition_num=3,
        replica=2,
        extend_support=True,
        ordered=False,
        multi_part=True,
        sync_disk=-5,
        retention_days=7,
        suggest_load=10000,
    )


def test_create_args_are_checked_in_youzans_order() -> None:
    with pytest.raises(ArgError) as refused:
        parse_create_args({"topic": "t", "partition_num": "0"}.get)
    assert refused.value.message == "INVALID_ARG_TOPIC_PARTITION_NUM"
    with pytest.raises(ArgError) as refused:
        parse_create_args({"topic": "t", "replicator": "9"}.get)
    assert refused.value.message == "MISSING_ARG_TOPIC_PARTITION_NUM"


def test_update_args_leave_omitted_fields_unchanged() -> None:
    topic, changes = parse_update_args({"topic": "t", "upgradeext": "true"}.get)
    assert (topic, changes) == ("t", {"upgrade_ext": True})
    _, changes = parse_update_args({"topic": "t", "disable_channel_auto_create": "false"}.get)
    assert changes == {"upgrade_ext": False, "disable_channel_auto_create": False}
    with pytest.raises(ArgError, match="INVALID_ARG_TOPIC_REPLICATOR"):
        parse_update_args({"topic": "t", "replicator": "6"}.get)


# ---------------------------------------------------------------- youzan_lookup


def test_youzan_registrations_give_their_partitions_and_old_ones_none() -> None:
    registry = RegistrationDB()
    one, two, old = peer("a:1", 1), peer("b:2", 2), peer("c:3", 3)
    for p in (one, two, old):
        registry.identify(p)
    registry.register(one, "t", None, 0)
    registry.register(two, "t", "c", 3)
    registry.register(old, "t", None, -11)
    document = youzan_lookup(registry, TopicCatalog(), "t", 1.0, write=False)
    assert list(document["partitions"]) == ["0", "3"]  # type: ignore[call-overload]
    assert len(document["producers"]) == 3  # type: ignore[arg-type]
    assert document["channels"] == ["c"]
    meta = youzan_lookup(registry, TopicCatalog(), "t", 1.0, write=False, metainfo=True)["meta"]
    assert meta["partition_num"] == 4  # type: ignore[index]
    # leaving one Youzan partition keeps the topic while another is held
    registry.register(one, "t", None, 1)
    registry.unregister(one.id, "t", None, 0)
    assert registry.partitions("t") == {1: ["a:1"], 3: ["b:2"]}
    assert registry.find_producers("topic", "t", "")[0].peer is one
    registry.remove_peer(two.id)
    assert registry.partitions("t") == {1: ["a:1"]}


def test_managed_topic_lists_placed_partitions_of_connected_brokers_only() -> None:
    registry = RegistrationDB()
    one = peer("a:1", 1)
    registry.identify(one)
    catalog = TopicCatalog()
    away = broker(2)
    topic, _ = catalog.create("t", TopicMeta(partition_num=2), [PlacedBroker.from_peer(one), away])
    assert youzan_lookup(registry, catalog, "t", 1.0, write=True)["partitions"] == {}
    topic.synced.add(one.node)
    document = youzan_lookup(registry, catalog, "t", 1.0, write=True, metainfo=True)
    assert list(document["partitions"]) == ["0"]  # type: ignore[call-overload]
    assert document["meta"] == {
        "partition_num": 2,
        "replica": 1,
        "extend_support": False,
        "ordered": False,
        "multi_part": False,
        "disable_channel_auto_create": False,
    }
