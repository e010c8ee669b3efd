"""The delivery journal: counts and moves come back as written, a torn tail is
ignored, and the two files take turns so neither outgrows what one state write
covers, without losing what the last written state lacks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hypothesis import given
from hypothesis import strategies as st

from trionsq.queues.delivery_journal import DeliveryJournal, Move, journal_paths, runs_of

if TYPE_CHECKING:
    from pathlib import Path


def reopen(state: Path) -> tuple[DeliveryJournal, dict[int, int], list[Move]]:
    journal, replay = DeliveryJournal.open(state)
    return journal, replay.counts, replay.moves


def test_counts_and_moves_come_back_the_highest_count_winning(tmp_path: Path) -> None:
    state = tmp_path / "c.state"
    journal, counts, moves = reopen(state)
    assert (counts, moves) == ({}, [])
    assert not journal_paths(state)[0].exists()  # nothing written, nothing created
    journal.delivered([(1, 3, 1), (7, 1, 2)])
    journal.delivered([(2, 1, 2)])
    move = Move("t.dead", 0, 41, ((7, 3), (2, 3)))
    journal.moving(move)
    journal.close()
    _, counts, moves = reopen(state)
    assert counts == {1: 1, 2: 2, 3: 1, 7: 2}
    assert moves == [move]


def test_a_torn_tail_is_ignored_and_what_came_before_kept(tmp_path: Path) -> None:
    state = tmp_path / "c.state"
    journal, _, _ = reopen(state)
    journal.delivered([(1, 1, 1)])
    journal.delivered([(2, 1, 1)])
    journal.close()
    path = journal_paths(state)[0]
    data = path.read_bytes()
    path.write_bytes(data[:-3])  # the second entry torn by a crash
    journal, counts, _ = reopen(state)
    assert counts == {1: 1}
    journal.delivered([(3, 1, 1)])  # appended after the torn bytes: lost, as never acked
    journal.close()
    assert reopen(state)[1] == {1: 1}


def test_the_files_take_turns_once_a_state_covers_them(tmp_path: Path) -> None:
    state = tmp_path / "c.state"
    journal, _, _ = reopen(state)
    journal.delivered([(1, 1, 1)])
    journal.checkpoint()  # state A captured (holds id 1) ...
    journal.delivered([(2, 1, 1)])
    journal.checkpoint()  # ... but not written: nothing may be dropped yet
    journal.covered()  # state B (ids 1, 2) written
    journal.delivered([(3, 1, 1)])
    assert reopen(state)[1] == {1: 1, 2: 1, 3: 1}
    journal.checkpoint()  # state C captured: the file before B's checkpoint goes
    journal.delivered([(4, 1, 1)])
    assert reopen(state)[1] == {1: 1, 2: 1, 3: 1, 4: 1}  # 1 and 2 are in state B
    journal.covered()  # state C (ids 1 to 3) written
    journal.delivered([(5, 1, 1)])
    journal.checkpoint()  # state D captured: only what state C lacks stays
    assert reopen(state)[1] == {4: 1, 5: 1}
    journal.checkpoint()  # state D not written (a refused write): nothing goes
    assert reopen(state)[1] == {4: 1, 5: 1}
    journal.covered()
    journal.checkpoint()
    assert reopen(state)[1] == {}
    journal.delivered([(6, 1, 2)])
    journal.clear()
    assert reopen(state)[1] == {}
    journal.delete()
    assert not any(path.exists() for path in journal_paths(state))


@given(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 4)), unique_by=lambda p: p[0]))
def test_runs_cover_exactly_the_counts(pairs: list[tuple[int, int]]) -> None:
    pairs.sort()
    expanded = {
        internal_id: count
        for first, length, count in runs_of(pairs)
        for internal_id in range(first, first + length)
    }
    assert expanded == dict(pairs)


def test_a_channel_that_journals_nothing_has_no_files(tmp_path: Path) -> None:
    """A channel without a bound: its state is written every second, its journal
    never (no file, no descriptor)."""
    state = tmp_path / "c.state"
    journal, _, _ = reopen(state)
    for _ in range(3):
        journal.checkpoint()
        journal.covered()
    assert not any(path.exists() for path in journal_paths(state))
