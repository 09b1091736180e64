"""A checkpoint's small tables made in Python (``partial._table`` and ``_halves`` up to
``_FEW_ROWS`` rows) are the rows numpy makes of the same keys and values: keys sorted and
distinct, duplicates summed, rows of zeros left out."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.efficiency import partial
from prvstream.sinks.efficiency.host import HOST_WIDTH
from prvstream.sinks.efficiency.parts import WIDTH

_VALUE = st.one_of(st.just(0), st.integers(-5, 5), st.integers(0, 2**40))


def _rows(width: int) -> st.SearchStrategy[list[tuple[int, list[int]]]]:
    return st.lists(st.tuples(st.integers(0, 6),  # few keys: duplicates are common
                              st.lists(_VALUE, min_size=width, max_size=width)),
                    max_size=partial._FEW_ROWS)


def _numpy_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partial, "_FEW_ROWS", -1)


@settings(max_examples=200, deadline=None)
@given(rows=_rows(WIDTH))
def test_small_tables_are_numpys(rows: list[tuple[int, list[int]]]) -> None:
    keys = np.array([k for k, _ in rows], np.int64)
    values = np.array([v for _, v in rows], np.int64).reshape(len(rows), WIDTH)
    small = partial._table(keys, values)
    with pytest.MonkeyPatch.context() as mp:
        _numpy_path(mp)
        assert small == partial._table(keys, values)


@settings(max_examples=200, deadline=None)
@given(rows=_rows(2 * HOST_WIDTH).map(lambda rs: sorted(dict(rs).items())))
def test_small_halves_are_numpys(rows: list[tuple[int, list[int]]]) -> None:
    keys = np.array([k for k, _ in rows], np.int64)
    values = np.array([v for _, v in rows], np.int64).reshape(len(rows), 2 * HOST_WIDTH)
    small = partial._halves(keys, values)
    with pytest.MonkeyPatch.context() as mp:
        _numpy_path(mp)
        assert small == partial._halves(keys, values)
