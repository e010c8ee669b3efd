"""Divergence by leader epochs: a follower cut at the leader's answer holds a prefix of
the leader's log, and keeps every record they share."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trionsq.cluster.epochs import EpochHistory


def test_end_of_an_epoch_is_the_next_ones_start() -> None:
    history = EpochHistory()
    assert history.begin(1, 1)
    assert history.begin(3, 10)
    assert not history.begin(2, 12)  # older: ignored
    assert history.end_of(1, 20) == 10
    assert history.end_of(2, 20) == 10
    assert history.end_of(3, 20) == 20
    assert history.end_of(0, 20) == 1
    assert history.epoch_at(9) == 1
    assert history.epoch_at(10) == 3
    assert history.next_start(5) == 10
    assert history.next_start(15) is None
    assert history.answer(2, 20) == (1, 10)
    assert history.answer(5, 20) == (3, 20)
    assert history.answer(0, 20) == (0, 1)
    assert history.held(20) == [1, 3]
    assert history.held(10) == [1]
    assert history.last_epoch(10) == 1
    assert history.next_question(3, 20) is None
    assert history.next_question(2, 20) == 1
    assert history.next_question(1, 1) == 0


def test_begin_after_a_cut_replaces_later_entries() -> None:
    history = EpochHistory([(1, 1), (2, 5), (3, 9)])
    history.begin(4, 5)
    assert history.entries == [(1, 1), (4, 5)]


def test_round_trip_and_garbage() -> None:
    history = EpochHistory([(1, 1), (2, 5)])
    assert EpochHistory.loads(history.dumps()).entries == history.entries
    assert EpochHistory.loads(b"{nope").entries == []
    assert EpochHistory.loads(b'[[1,"x"],[2,3]]').entries == [(2, 3)]


# A model: replicas take turns leading (each term appends some records); a follower
# copies a prefix of the leader's log. Cutting a follower at the leader's answer
# always leaves a common prefix, and never drops a record the two share.


@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 4), st.integers(0, 2), st.booleans()),
        min_size=1,
        max_size=25,
    )
)
def test_cut_at_the_answer_leaves_exactly_the_common_prefix(
    terms: list[tuple[int, int, int, bool]],
) -> None:
    logs: list[list[tuple[int, int]]] = [[], [], []]  # (epoch, serial) per record
    histories = [EpochHistory(), EpochHistory(), EpochHistory()]
    epoch = 0
    serial = 0
    for leader, appended, follower, copies in terms:
        epoch += 1
        histories[leader].begin(epoch, len(logs[leader]) + 1)
        for _ in range(appended):
            serial += 1
            logs[leader].append((epoch, serial))
        if follower == leader or not copies:
            continue
        # the follower asks; the leader answers; the follower cuts and copies
        mine, theirs = logs[follower], logs[leader]
        ask: int | None = histories[follower].last_epoch(len(mine) + 1)
        rounds = 0
        while ask is not None:
            epoch_seen, ending = histories[leader].answer(ask, len(theirs) + 1)
            ask = histories[follower].next_question(epoch_seen, len(mine) + 1)
            rounds += 1
            assert rounds <= len(terms) + 1
        cut = histories[follower].cut_point(epoch_seen, ending, len(mine) + 1)
        common = 0
        while common < min(len(mine), len(theirs)) and mine[common] == theirs[common]:
            common += 1
        assert cut - 1 <= len(theirs)
        assert mine[: cut - 1] == theirs[: cut - 1]  # what stays is shared
        assert cut - 1 >= common  # nothing shared is dropped
        del mine[cut - 1 :]
        histories[follower].truncate(cut)
        for index in range(cut - 1, len(theirs)):
            mine.append(theirs[index])
            histories[follower].begin(theirs[index][0], index + 1)
        assert mine == theirs
