"""The consumer-group deal and membership (broker/groups.py): pure state.

The deal is sticky (issue 30, item 7; Kafka's cooperative-sticky assignor): a
member that leaves moves only its own partitions, a member that joins takes the
fewest that even the counts out, and every deal is even (counts differ by at most
one). Brokers each hold some of a topic's partitions and deal them without talking
to each other: a broker that deals after others applied their shares of a deal
gets the same deal, so the brokers agree however their rebalances interleave.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trionsq.broker.groups import ConsumerGroup, GroupView, deal

NAMES = ("a", "b", "c", "d", "e", "f", "g")
partition_counts = st.integers(min_value=1, max_value=40)
histories = st.lists(st.sampled_from(NAMES), min_size=1, max_size=12)
"""Each name in turn joins (if it is not a member) or leaves (if it is)."""


def replay(history: list[str], partitions: int) -> tuple[dict[int, str], set[str]]:
    """The deal after each join or departure of ``history``, from an empty group."""
    owners: dict[int, str] = {}
    members: set[str] = set()
    for name in history:
        members ^= {name}
        owners = deal(owners, members, partitions)
    return owners, members


def counts(owners: dict[int, str], members: set[str]) -> list[int]:
    return [sum(1 for owner in owners.values() if owner == m) for m in members]


def moved(before: dict[int, str], after: dict[int, str]) -> set[int]:
    return {p for p in after if before.get(p) != after[p]}


@given(histories, partition_counts)
def test_every_deal_gives_each_partition_to_a_member_evenly(
    history: list[str], partitions: int
) -> None:
    owners, members = replay(history, partitions)
    if not members:
        assert owners == {}
        return
    assert sorted(owners) == list(range(partitions))
    assert set(owners.values()) <= members
    assert max(counts(owners, members)) - min(counts(owners, members)) <= 1


@given(histories, partition_counts, st.data())
def test_a_departure_moves_only_the_departed_member_s_partitions(
    history: list[str], partitions: int, data: st.DataObject
) -> None:
    owners, members = replay(history, partitions)
    if len(members) < 2:
        return
    gone = data.draw(st.sampled_from(sorted(members)))
    after = deal(owners, members - {gone}, partitions)
    assert moved(owners, after) == {p for p, owner in owners.items() if owner == gone}
    survivors = members - {gone}
    assert max(counts(after, survivors)) - min(counts(after, survivors)) <= 1


@given(histories, partition_counts, st.sampled_from(NAMES))
def test_a_join_moves_the_fewest_partitions_that_even_the_counts_out(
    history: list[str], partitions: int, newcomer: str
) -> None:
    owners, members = replay(history, partitions)
    if newcomer in members or not members:
        return
    after = deal(owners, members | {newcomer}, partitions)
    taken = moved(owners, after)
    assert len(taken) == partitions // (len(members) + 1)  # fewer leaves it too far behind
    assert all(after[p] == newcomer for p in taken)


@given(
    st.dictionaries(st.integers(0, 29), st.sampled_from(NAMES)),
    st.sets(st.sampled_from(NAMES), min_size=1),
    st.integers(min_value=1, max_value=30),
    st.lists(st.integers(0, 3), min_size=30, max_size=30),
    st.permutations(range(4)),
)
def test_brokers_dealing_their_shares_one_after_another_agree_with_one_deal_of_all(
    previous: dict[int, str],
    members: set[str],
    partitions: int,
    placement: list[int],
    order: list[int],
) -> None:
    """Four brokers each hold some partitions (``placement``) and rebalance in turn
    (``order``), each dealing from the assignment as it finds it (the shares dealt
    before it already moved) and applying only its own share: together they give
    the deal of all partitions at once. The previous assignment may be anything
    (members that left, partitions nobody had): the deal starts from the facts."""
    previous = {p: owner for p, owner in previous.items() if p < partitions}
    whole = deal(previous, members, partitions)
    state = dict(previous)
    for broker in order:
        dealt = deal(state, members, partitions)
        share = {p for p in range(partitions) if placement[p] == broker}
        assert {p: dealt[p] for p in share} == {p: whole[p] for p in share}
        state.update({p: dealt[p] for p in share})
    assert state == whole
    assert deal(whole, members, partitions) == whole


def test_membership_counts_connections_and_the_assignment_shows_held_partitions() -> None:
    group = ConsumerGroup("t", "c")
    for partition in range(4):
        group.join("a", partition)
    assert group.rebalance(4) == {0: "a", 1: "a", 2: "a", 3: "a"}
    for partition in range(4):
        group.join("b", partition)
    group.join("b", 0)  # a second connection of "b" on partition 0
    assert group.rebalance(4) == {2: "b", 3: "b"}  # "a" keeps its lowest two
    assert group.assignment() == {"a": [0, 1], "b": [2, 3]}
    group.leave("b", 0)
    assert group.connections["b"][0] == 1
    for partition in range(4):
        group.leave("b", partition)
    assert group.rebalance(4) == {2: "a", 3: "a"}
    assert group.generation == 3
    for partition in range(4):
        group.leave("a", partition)
    assert group.empty
    assert group.rebalance(4) == {0: "", 1: "", 2: "", 3: ""}
    assert group.assignment() == {}
    group.leave("ghost", 1)  # unknown members are ignored


def test_the_assignment_shows_only_partitions_this_broker_holds() -> None:
    """A broker holding partitions 1 and 4 of six (placed by lookupd) deals all six
    (so that it agrees with the others) and shows its own two."""
    group = ConsumerGroup("t", "c")
    for member in ("a", "b", "c"):
        for partition in (1, 4):
            group.join(member, partition)
    group.rebalance(6)
    assert group.owners == {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    assert group.assignment() == {"a": [1], "b": [], "c": [4]}


def test_what_other_brokers_report_is_dealt_from() -> None:
    """The assignment learned from lookupd (``GET /group``) is the previous deal of
    the partitions held elsewhere: a broker that restarted (it knows nothing) gives
    its partition to the member the others' counts show it missing."""
    group = ConsumerGroup("t", "c")
    for member in ("a", "b"):
        group.join(member, 4)
    learned = {0: "b", 1: "b", 2: "b", 3: "a", 5: "a"}
    group.rebalance(6, GroupView(learned, frozenset({"a", "b"})))
    assert group.owners == {**learned, 4: "a"}


def test_a_member_connected_to_another_broker_is_a_member_here() -> None:
    """ "b" is not connected here yet (or any more): while another broker has it, its
    partitions here wait for it rather than move, so every broker deals over the
    same members."""
    group = ConsumerGroup("t", "c")
    group.join("a", 4)
    view = GroupView({0: "a", 1: "a", 2: "a", 3: "b", 5: "b"}, frozenset({"a", "b"}))
    group.rebalance(6, view)
    assert group.owners[4] == "b"
    assert group.assignment() == {"a": [], "b": [4]}
    group.rebalance(6, GroupView(view.owners, frozenset({"a"})))  # gone everywhere now
    assert group.owners[4] == "a"
