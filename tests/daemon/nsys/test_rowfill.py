"""rowfill: the C filler and numpy's conversion give the same arrays; bad values are refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.nsys import rowfill
from prvstream.daemon.nsys.tables import DTYPES

needs_c = pytest.mark.skipif(not rowfill.ROW_FILLER.compiled(),
                             reason="the C row filler was not built (no compiler at install)")

_I8 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_I4 = st.integers(min_value=-(2**31), max_value=2**31 - 1)


def _row_strategy(dtype: np.dtype) -> st.SearchStrategy[tuple[int, ...]]:
    fields = dtype.fields or {}
    return st.tuples(*(_I8 if fields[n][0].itemsize == 8 else _I4 for n in dtype.names or ()))


@pytest.mark.parametrize("kind", ["kernel", "runtime", "memcpy", "gpu_metrics"])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_c_and_numpy_give_the_same_array(kind: str, data: st.DataObject) -> None:
    dtype = DTYPES[kind]
    rows = data.draw(st.lists(_row_strategy(dtype), max_size=50))
    c = rowfill.rows_to_array(rows, dtype)
    py = rowfill.rows_to_array(rows, dtype, pure=True)
    assert c.dtype == py.dtype == dtype
    assert c.tobytes() == py.tobytes()
    assert [tuple(int(x) for x in r) for r in c.tolist()] == rows


def test_trailing_values_are_ignored() -> None:
    dtype = np.dtype([("a", "<i8"), ("b", "<i4")])
    rows = [(1, 2, "text"), (3, 4, None)]
    for pure in (False, True):
        out = rowfill.rows_to_array(rows, dtype, pure=pure)
        assert out.tolist() == [(1, 2), (3, 4)]


@needs_c
def test_non_integer_and_out_of_range_values_are_refused() -> None:
    dtype = np.dtype([("a", "<i8"), ("b", "<i4")])
    with pytest.raises(TypeError, match="row 1 column 0 holds a str"):
        rowfill.rows_to_array([(1, 2), ("x", 2)], dtype)
    with pytest.raises(TypeError, match="float"):
        rowfill.rows_to_array([(1, 2.5)], dtype)
    with pytest.raises(OverflowError, match="row 0 column 1"):
        rowfill.rows_to_array([(1, 2**31)], dtype)
    with pytest.raises(OverflowError):
        rowfill.rows_to_array([(2**63, 1)], dtype)
    with pytest.raises(TypeError, match="not a tuple of 2"):
        rowfill.rows_to_array([(1,)], dtype)


def test_only_integer_fields() -> None:
    with pytest.raises(ValueError, match="not a little-endian int32/64"):
        rowfill.rows_to_array([(1.0,)], np.dtype([("a", "<f8")]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_I8, _I4, _I4, _I4), max_size=30))
def test_packed_pairs_land_on_both_int32_fields(rows: list[tuple[int, int, int, int]]) -> None:
    """SQL packs two int32 as (a & 0xFFFFFFFF) | (b << 32); the filler splits them back."""
    dtype = np.dtype([("t", "<i8"), ("a", "<i4"), ("b", "<i4"), ("c", "<i4")])
    layout = ((0, 8, 16), (8, 8, 4))

    def pack(a: int, b: int) -> int:
        return (a & 0xFFFFFFFF) | (b << 32)  # Python ints: already the signed int64

    fetched = [(t, pack(a, b), c) for t, a, b, c in rows]
    for pure in (False, True):
        out = rowfill.rows_to_array(fetched, dtype, layout, pure=pure)
        assert out.tolist() == rows
