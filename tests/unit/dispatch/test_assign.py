"""The router's assignment rules (design §4, spec §8.7) as properties."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trionsq.dispatch.assign import ConsumerSlot, assign

Msg = tuple[int, str | None]  # (sequence number, dispatch tag)

tags = st.sampled_from([None, "a", "b", "c"])
consumers = st.lists(
    st.builds(ConsumerSlot, st.integers(0, 1000), st.integers(0, 6), tags),
    max_size=6,
    unique_by=lambda c: c.client_id,
)
batches = st.lists(tags, max_size=60).map(lambda ts: [(i, t) for i, t in enumerate(ts)])


def tag_of(message: Msg) -> str | None:
    return message[1]


@given(batches, consumers, st.integers(0, 10))
def test_assignment_follows_the_rules(
    messages: list[Msg], slots: list[ConsumerSlot], turn: int
) -> None:
    result = assign(messages, slots, tag_of, turn=turn)
    by_id = {s.client_id: s for s in slots}
    held_tags = {s.tag for s in slots if s.tag is not None}
    delivered = [m for ms in result.deliveries.values() for m in ms]
    # each message exactly once, delivered or waiting; orders preserved
    assert sorted(delivered + result.waiting) == sorted(messages)
    assert result.waiting == sorted(result.waiting)
    for client, got in result.deliveries.items():
        assert got == sorted(got)
        slot = by_id[client]
        assert len(got) <= slot.room
        for _, tag in got:
            if tag is not None and tag in held_tags:
                assert slot.tag == tag  # a held tag goes only to its holders
            else:
                assert slot.tag is None  # untagged / unheld: untagged consumers only
    # work-conserving: a waiting message had no eligible consumer with room left
    left = {s.client_id: s.room - len(result.deliveries.get(s.client_id, [])) for s in slots}
    for _, tag in result.waiting:
        wanted = tag if tag in held_tags else None
        assert all(left[s.client_id] == 0 for s in slots if s.tag == wanted)


def test_untagged_messages_wait_when_only_tagged_consumers_exist() -> None:
    result = assign([(0, None), (1, "a")], [ConsumerSlot(1, 5, "a")], tag_of)
    assert result.deliveries == {1: [(1, "a")]}
    assert result.waiting == [(0, None)]


def test_a_tag_nobody_holds_falls_back_to_untagged() -> None:
    result = assign([(0, "zzz")], [ConsumerSlot(1, 5, "a"), ConsumerSlot(2, 5)], tag_of)
    assert result.deliveries == {2: [(0, "zzz")]}


def test_held_tag_waits_for_its_holder_even_if_others_are_idle() -> None:
    result = assign([(0, "a")], [ConsumerSlot(1, 0, "a"), ConsumerSlot(2, 5)], tag_of)
    assert result.waiting == [(0, "a")]


def test_round_robin_is_even_and_rotates_between_passes() -> None:
    slots = [ConsumerSlot(i, 100) for i in range(3)]
    first = assign([(i, None) for i in range(9)], slots, tag_of)
    assert {c: len(ms) for c, ms in first.deliveries.items()} == {0: 3, 1: 3, 2: 3}
    one = assign([(0, None)], slots, tag_of, turn=first.next_turn)
    assert list(one.deliveries) == [1]  # the next pass starts one further on


def test_more_room_means_more_messages() -> None:
    slots = [ConsumerSlot(1, 1), ConsumerSlot(2, 10)]
    result = assign([(i, None) for i in range(8)], slots, tag_of)
    assert {c: len(ms) for c, ms in result.deliveries.items()} == {1: 1, 2: 7}


untagged_consumers = st.lists(
    st.builds(ConsumerSlot, st.integers(0, 1000), st.integers(0, 40)),
    max_size=5,
    unique_by=lambda c: c.client_id,
)


@given(st.integers(0, 120), untagged_consumers, st.integers(0, 10))
def test_the_sliced_round_robin_is_the_walked_one(
    count: int, slots: list[ConsumerSlot], turn: int
) -> None:
    """Untagged consumers take the slicing shortcut when nobody runs out of room;
    with a tagged consumer beside them (room 0, tag unused) the rotation is walked.
    Both must place every message alike."""
    messages = [(i, None) for i in range(count)]
    walked = assign(messages, [*slots, ConsumerSlot(-1, 0, "unused")], tag_of, turn=turn)
    sliced = assign(messages, slots, tag_of, turn=turn)
    assert sliced.deliveries == walked.deliveries
    assert sliced.waiting == walked.waiting
    assert sliced.next_turn == walked.next_turn
