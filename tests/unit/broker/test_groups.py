"""The consumer-group deal and membership (broker/groups.py): pure state."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trionsq.broker.groups import ConsumerGroup, deal

names = st.lists(
    st.from_regex(r"[a-z0-9]{1,6}", fullmatch=True), min_size=1, max_size=6, unique=True
)


@given(names, st.integers(min_value=1, max_value=40))
def test_everyone_connected_everywhere_is_an_even_round_robin(
    members: list[str], partitions: int
) -> None:
    owners = deal(range(partitions), {m: range(partitions) for m in members})
    assert sorted(owners) == list(range(partitions))
    counts = [list(owners.values()).count(m) for m in members]
    assert max(counts) - min(counts) <= 1
    ranked = sorted(members)
    assert all(owners[p] == ranked[p % len(ranked)] for p in owners)


@given(names, st.integers(min_value=1, max_value=40), st.data())
def test_brokers_dealing_their_own_partitions_agree_with_one_deal_of_all(
    members: list[str], partitions: int, data: st.DataObject
) -> None:
    """Partitions split over brokers: each broker's deal of its own share is the
    global deal restricted to that share."""
    everything = deal(range(partitions), {m: range(partitions) for m in members})
    share = data.draw(st.sets(st.integers(0, partitions - 1)))
    alone = deal(share, dict.fromkeys(members, share))
    assert alone == {p: everything[p] for p in share}


@given(
    st.dictionaries(
        st.from_regex(r"[a-z]{1,4}", fullmatch=True),
        st.sets(st.integers(0, 11)),
        max_size=5,
    )
)
def test_a_partition_goes_only_to_a_member_connected_to_it(reach: dict[str, set[int]]) -> None:
    owners = deal(range(12), reach)
    for partition in range(12):
        connected = [m for m, held in reach.items() if partition in held]
        if connected:
            assert owners[partition] in connected
        else:
            assert partition not in owners


def test_rebalance_reports_what_moved_and_membership_counts_connections() -> None:
    group = ConsumerGroup("t", "c")
    for partition in range(4):
        group.join("a", partition)
    assert group.rebalance(range(4)) == {0: "a", 1: "a", 2: "a", 3: "a"}
    for partition in range(4):
        group.join("b", partition)
    group.join("b", 0)  # a second connection of "b" on partition 0
    assert group.rebalance(range(4)) == {1: "b", 3: "b"}
    assert group.assignment() == {"a": [0, 2], "b": [1, 3]}
    group.leave("b", 0)
    assert group.connections["b"][0] == 1
    for partition in range(4):
        group.leave("b", partition)
    assert group.rebalance(range(4)) == {1: "a", 3: "a"}
    assert group.generation == 3
    for partition in range(4):
        group.leave("a", partition)
    assert group.empty
    assert group.rebalance(range(4)) == {0: "", 1: "", 2: "", 3: ""}
    assert group.assignment() == {}
    group.leave("ghost", 1)  # unknown members are ignored
