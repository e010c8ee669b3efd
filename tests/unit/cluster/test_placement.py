"""Placement and leader election, and the safety they give with the ISR commit rule."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.cluster.keys import PartitionState
from trionsq.cluster.placement import (
    PlacementError,
    after_loss,
    elect,
    place_topic,
    reconcile,
    with_isr,
    with_replica,
    without_replica,
)

BROKERS = [f"b{i}" for i in range(6)]


@given(st.integers(1, 16), st.integers(1, 6), st.integers(1, 6))
def test_replicas_on_distinct_brokers_and_leaders_spread(
    partitions: int, replicas: int, brokers: int
) -> None:
    live = BROKERS[:brokers]
    if replicas > brokers:
        with pytest.raises(PlacementError, match="live brokers"):
            place_topic(partitions, replicas, live)
        return
    placed = place_topic(partitions, replicas, live)
    assert len(placed) == partitions
    for state in placed:
        assert len(set(state.replicas)) == replicas
        assert state.leader == state.replicas[0]
        assert state.isr == state.replicas
        assert state.epoch == 1
    led = Counter(state.leader for state in placed)
    counts = [led.get(b, 0) for b in live]
    assert max(counts) - min(counts) <= 1
    held = Counter(r for state in placed for r in state.replicas)
    counts = [held.get(b, 0) for b in live]
    assert max(counts) - min(counts) <= 1


def test_placement_counts_existing_topics() -> None:
    first = place_topic(2, 1, ["a", "b", "c"])
    second = place_topic(1, 1, ["a", "b", "c"], existing=first)
    assert {s.leader for s in first} | {second[0].leader} == {"a", "b", "c"}


def test_four_partitions_three_replicas_on_three_brokers() -> None:
    placed = place_topic(4, 3, ["b1", "b2", "b3"])
    assert sorted(Counter(s.leader for s in placed).values()) == [1, 1, 2]
    assert all(sorted(s.replicas) == ["b1", "b2", "b3"] for s in placed)


def test_leader_loss_elects_first_live_isr_member() -> None:
    state = PartitionState(("a", "b", "c"), ("a", "b", "c"), "a", 3)
    after = after_loss(state, "a", {"b", "c"})
    assert after == PartitionState(("a", "b", "c"), ("b", "c"), "b", 4)


def test_follower_loss_only_shrinks_the_isr() -> None:
    state = PartitionState(("a", "b", "c"), ("a", "b", "c"), "a", 3)
    assert after_loss(state, "c", {"a", "b"}) == PartitionState(("a", "b", "c"), ("a", "b"), "a", 3)


def test_no_unclean_election_the_last_member_leads_again() -> None:
    state = PartitionState(("a", "b"), ("a",), "a", 5)
    offline = after_loss(state, "a", {"b"})
    assert offline == PartitionState(("a", "b"), ("a",), "", 6)
    assert elect(offline, {"b"}) == offline  # b is not in sync: it never leads
    assert elect(offline, {"a", "b"}) == PartitionState(("a", "b"), ("a",), "a", 7)


def test_with_isr_keeps_replica_order_and_the_leader() -> None:
    state = PartitionState(("a", "b", "c"), ("a",), "a", 1)
    assert with_isr(state, ["c", "a"]).isr == ("a", "c")
    with pytest.raises(PlacementError, match="leader"):
        with_isr(state, ["b"])
    with pytest.raises(PlacementError, match="within the replicas"):
        with_isr(state, ["a", "z"])


# A model run: brokers die and return, leaders shrink and grow the ISR, records are
# appended and committed only once every ISR member holds them. Whatever happens, a
# leader holds every committed record, and each epoch has at most one leader.

_event = st.one_of(
    st.tuples(st.just("kill"), st.sampled_from("abc")),
    st.tuples(st.just("start"), st.sampled_from("abc")),
    st.tuples(st.just("append"), st.integers(1, 3)),
    st.tuples(st.just("replicate"), st.sampled_from("abc")),
    st.tuples(st.just("shrink"), st.sampled_from("abc")),
    st.tuples(st.just("expand"), st.sampled_from("abc")),
)


@given(st.lists(_event, max_size=60))
def test_model_no_committed_record_is_lost(events: list[tuple[str, str | int]]) -> None:
    live = {"a", "b", "c"}
    state = place_topic(1, 3, sorted(live))[0]
    logs: dict[str, list[int]] = {b: [] for b in "abc"}
    committed: list[int] = []
    leaders_by_epoch: dict[int, str] = {state.epoch: state.leader}
    counter = 0
    for kind, arg in events:
        if kind == "kill" and arg in live:
            live.discard(str(arg))
            state = after_loss(state, str(arg), live)
        elif kind == "start" and arg not in live:
            live.add(str(arg))
            state = elect(state, live)
        elif kind == "append" and state.leader:
            for _ in range(int(arg)):
                counter += 1
                logs[state.leader].append(counter)
        elif kind == "replicate" and state.leader and arg in live and arg != state.leader:
            leader_log = logs[state.leader]
            follower = logs[str(arg)]
            # truncate to the common prefix, then copy (what the fetch protocol does)
            common = 0
            while (
                common < min(len(leader_log), len(follower))
                and leader_log[common] == follower[common]
            ):
                common += 1
            logs[str(arg)] = list(leader_log)
        elif kind == "shrink" and state.leader and arg != state.leader and arg in state.isr:
            state = with_isr(state, [r for r in state.isr if r != arg])
        elif (
            kind == "expand"
            and state.leader
            and arg in live
            and arg not in state.isr
            and logs[str(arg)] == logs[state.leader]  # caught up
        ):
            state = with_isr(state, [*state.isr, str(arg)])
        if state.leader:
            assert state.leader in live
            assert state.leader in state.isr
            assert leaders_by_epoch.setdefault(state.epoch, state.leader) == state.leader
            # commit: the longest prefix every ISR member holds
            members = [logs[m] for m in state.isr]
            prefix = 0
            while all(len(m) > prefix for m in members) and len({m[prefix] for m in members}) == 1:
                prefix += 1
            committed = max(committed, members[0][:prefix], key=len)
            assert logs[state.leader][: len(committed)] == committed
        assert set(state.isr) <= set(state.replicas)


def test_reconcile_moves_a_restarted_leader_and_drops_dead_members() -> None:
    state = PartitionState(("a", "b", "c"), ("a", "b", "c"), "a", 3)
    where = ("t", 0)
    # nothing to do: everyone live, a registered before the state was written
    assert reconcile({where: state}, {where: 10}, {"a": 5, "b": 6, "c": 7}) == {}
    # a registered again after the state was written: it restarted, b leads now
    moved = reconcile({where: state}, {where: 10}, {"a": 11, "b": 6, "c": 7})
    assert moved == {where: PartitionState(("a", "b", "c"), ("b", "c"), "b", 4)}
    # c restarted (its disk may be new): it leaves the ISR until it has caught up
    assert reconcile({where: state}, {where: 10}, {"a": 5, "b": 6, "c": 12}) == {
        where: PartitionState(("a", "b", "c"), ("a", "b"), "a", 3)
    }
    # c's lease went: it leaves the ISR, the leader stays
    shrunk = reconcile({where: state}, {where: 10}, {"a": 5, "b": 6})
    assert shrunk == {where: PartitionState(("a", "b", "c"), ("a", "b"), "a", 3)}
    # the only in-sync member restarted: offline, then its own leader again
    alone = PartitionState(("a", "b"), ("a",), "a", 3)
    back = reconcile({where: alone}, {where: 10}, {"a": 11, "b": 6})
    assert back == {where: PartitionState(("a", "b"), ("a",), "a", 5)}


def test_a_move_adds_the_new_replica_outside_the_isr_then_drops_the_old_one() -> None:
    state = PartitionState(("a", "b"), ("a", "b"), "a", 3)
    added = with_replica(state, "c", {"a", "b", "c"})
    assert added == PartitionState(("a", "b", "c"), ("a", "b"), "a", 3)
    caught_up = with_isr(added, ("a", "b", "c"))
    # the leader leaves: the next in-sync replica leads, in a new epoch
    assert without_replica(caught_up, "a") == PartitionState(("b", "c"), ("b", "c"), "b", 4)
    # a follower leaves: leadership and epoch stay
    assert without_replica(caught_up, "b") == PartitionState(("a", "c"), ("a", "c"), "a", 3)


def test_a_move_refuses_what_would_lose_or_double_a_replica() -> None:
    state = PartitionState(("a", "b"), ("a",), "a", 1)
    with pytest.raises(PlacementError, match="broker c is not live"):
        with_replica(state, "c", {"a", "b"})
    with pytest.raises(PlacementError, match="broker b already holds a replica"):
        with_replica(state, "b", {"a", "b"})
    with pytest.raises(PlacementError, match="broker c holds no replica"):
        without_replica(state, "c")
    with pytest.raises(PlacementError, match="no in-sync replica but a"):
        without_replica(state, "a")  # b is not in sync: it may lack acknowledged records
