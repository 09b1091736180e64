"""Narrow ``array`` columns widen to int64 when a value does not fit, and keep their values."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prvstream.sinks.narrowcols import extended, set_item

_INT64 = st.integers(-(2**63), 2**63 - 1)


def test_setting_a_value_past_32_bits_widens_the_column() -> None:
    col = set_item(array("i", [1, 2]), 1, 2**40)
    assert col.typecode == "q" and list(col) == [1, 2**40]
    assert set_item(col, 0, 3) is col


@given(st.sampled_from("bhiq"), st.lists(st.integers(-100, 100), max_size=5),
       st.lists(_INT64, max_size=8))
def test_appending_keeps_every_value_and_widens_only_when_needed(
        typecode: str, start: list[int], values: list[int]) -> None:
    try:
        array(typecode, values)
        fits = True
    except OverflowError:
        fits = False
    col = extended(array(typecode, start), values)
    assert list(col) == start + values
    want = typecode if fits else next(c for c in "bhiq"[("bhiq".index(typecode)):]
                                      if _holds(c, values))
    assert col.typecode == want


def _holds(typecode: str, values: list[int]) -> bool:
    try:
        array(typecode, values)
    except OverflowError:
        return False
    return True


@given(st.sampled_from("bhiq"), st.lists(st.integers(-100, 100), min_size=1, max_size=5),
       _INT64)
def test_setting_widens_to_the_narrowest_column_that_holds_the_value(
        typecode: str, start: list[int], value: int) -> None:
    col = set_item(array(typecode, start), 0, value)
    assert list(col) == [value, *start[1:]]
    assert col.typecode == next(c for c in "bhiq"[("bhiq".index(typecode)):]
                                if _holds(c, [value]))


def test_what_int64_cannot_hold_fails_as_array_does() -> None:
    with pytest.raises(OverflowError):
        extended(array("i", [1]), [2**63])
