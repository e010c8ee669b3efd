"""A storage file's arrays of integers (a channel state's finished ids, its deferred
pairs and attempts runs) are checked in bulk, and what the bulk check refuses goes
to the item-by-item walk: same values, same errors, whatever the array holds."""

from __future__ import annotations

import attrs
import cattrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq import persist
from trionsq.persist import storage_converter
from trionsq.serialization import INT64_MAX, INT64_MIN


@attrs.frozen
class _Rows:
    ids: tuple[int, ...]
    pairs: tuple[tuple[int, int], ...]
    triples: tuple[tuple[int, int, int], ...]


_ints = st.integers(INT64_MIN, INT64_MAX)
_items = st.one_of(
    _ints,
    _ints,
    _ints,
    st.sampled_from([INT64_MAX + 1, INT64_MIN - 1, 2**64 - 1, True, False, 1.0, None, "1"]),
)
_rows = st.one_of(
    st.lists(_items, min_size=0, max_size=4),
    st.just("not an array"),
)


def _array(width: int) -> st.SearchStrategy[object]:
    if width == 0:
        return st.one_of(st.lists(_items, max_size=30), st.just({"not": "an array"}))
    good = st.lists(_ints, min_size=width, max_size=width)
    return st.lists(st.one_of(good, good, good, _rows), max_size=12)


def _outcome(converter: cattrs.Converter, raw: object) -> object:
    try:
        return converter.structure(raw, _Rows)
    except cattrs.BaseValidationError as error:
        return ("error", tuple(cattrs.transform_error(error)))


@given(ids=_array(0), pairs=_array(2), triples=_array(3))
def test_bulk_and_item_by_item_agree(ids: object, pairs: object, triples: object) -> None:
    raw = {"ids": ids, "pairs": pairs, "triples": triples}
    bulk = _outcome(storage_converter(), raw)
    with pytest.MonkeyPatch.context() as patch:  # hooks are made at the first use
        patch.setattr(persist, "_int_tuple_width", lambda _item: None)
        walk = _outcome(storage_converter(), raw)
    assert bulk == walk


def test_the_bulk_check_takes_only_exact_int64s() -> None:
    assert persist._all_int_rows([1, 2, INT64_MAX, INT64_MIN], 0)
    assert persist._all_int_rows([], 0)
    assert persist._all_int_rows([[1, 2], [3, 4]], 2)
    bad_ones: list[list[object]] = [[True], [1.0], [INT64_MAX + 1], [INT64_MIN - 1], [None]]
    for bad in bad_ones:
        assert not persist._all_int_rows(bad, 0)
    for rows in ([[1, 2, 3]], [[1]], [(1, 2)], [[1, True]], [[1, 2**63]]):
        assert not persist._all_int_rows(rows, 2)  # type: ignore[arg-type]
    assert persist._int_tuple_width(int) == 0
    assert persist._int_tuple_width(tuple[int, int, int]) == 3
    assert persist._int_tuple_width(tuple[int, str]) is None
    assert persist._int_tuple_width(tuple[int, ...]) is None
    assert persist._int_tuple_width(str) is None
