"""``unique_inverse`` and ``distinct`` are ``np.unique``'s answers, faster for few values; the
compiled ``group_stats`` gives numpy's group sums."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.arrays import FACTORIZER, GROUPER, distinct, group_stats, unique_inverse


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=200), st.integers(1, 200))
def test_unique_inverse_matches_numpy(pool: list[int], n: int) -> None:
    values = np.array([pool[i % len(pool)] for i in range(n)] if pool else [], dtype=np.int64)
    uniq, inverse = unique_inverse(values)
    want_uniq, want_inverse = np.unique(values, return_inverse=True)
    assert uniq.tolist() == want_uniq.tolist()
    assert inverse.tolist() == want_inverse.tolist()
    assert (uniq[inverse] == values).all()
    assert distinct(values).tolist() == want_uniq.tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-5, 5), max_size=300))
def test_few_values_match_numpy(values: list[int]) -> None:
    """Chunks of a handful of threads or streams: the path that avoids the argsort."""
    arr = np.array(values, dtype=np.int64)
    uniq, inverse = unique_inverse(arr)
    want_uniq, want_inverse = np.unique(arr, return_inverse=True)
    assert uniq.tolist() == want_uniq.tolist() == distinct(arr).tolist()
    assert inverse.tolist() == want_inverse.tolist()


_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


@st.composite
def _typed(draw: st.DrawFn) -> np.ndarray:
    """Values of any integer type: few of them or many, near each other or extreme; some as
    a strided view (every other value, reversed, a structured array's field)."""
    dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
    info = np.iinfo(dtype)
    near = st.integers(max(info.min, -3), min(info.max, 5000))
    pool = draw(st.lists(st.one_of(near, st.integers(info.min, info.max),
                                   st.sampled_from([info.min, info.max])),
                         min_size=1, max_size=draw(st.sampled_from([3, 70]))))
    picks = draw(st.lists(st.integers(0, len(pool) - 1), min_size=1, max_size=300))
    values = np.array([pool[i] for i in picks], dtype=dtype)
    view = draw(st.sampled_from(["plain", "every other", "reversed", "field"]))
    if view == "every other":
        return values[::2]
    if view == "reversed":
        return values[::-1]
    if view == "field":
        packed = np.zeros(len(values), dtype=[("pad", "u1"), ("v", dtype), ("tail", "u1")])
        packed["v"] = values
        return packed["v"]  # unaligned and strided
    return values


@settings(max_examples=400, deadline=None)
@given(_typed())
def test_compiled_and_numpy_factorizers_match_numpy(values: np.ndarray) -> None:
    """Both paths give ``np.unique``'s arrays (dtype included), compiled or not."""
    want_uniq, want_inverse = np.unique(values, return_inverse=True)
    for pure in (True, False):
        uniq, inverse = unique_inverse(values, pure=pure)
        assert uniq.dtype == want_uniq.dtype and uniq.tolist() == want_uniq.tolist()
        assert inverse.dtype == want_inverse.dtype
        assert inverse.tolist() == want_inverse.tolist()


@pytest.mark.skipif(not FACTORIZER.built(), reason="the _arrays C extension was not built (no "
                    "C compiler at install time): only numpy's factorizer is in use")
def test_compiled_factorizer_declines_what_it_does_not_handle() -> None:
    """More than 64 distinct values, uint64 and 2-d arrays go to numpy (-1, -2); wrong
    output sizes raise."""
    factor = FACTORIZER.function
    assert factor is not None
    out = np.empty(64, np.int64)
    assert factor(np.arange(65, dtype=np.int64), out, np.empty(65, np.int64)) == -1
    assert factor(np.arange(65, dtype=np.int64) * 10**15, out, np.empty(65, np.int64)) == -1
    assert factor(np.arange(3, dtype=np.uint64), np.empty(64, np.uint64),
                  np.empty(3, np.int64)) == -2
    assert factor(np.zeros((2, 2), np.int64), out, np.empty(4, np.int64)) == -2
    with pytest.raises(ValueError, match="64 values"):
        factor(np.arange(3, dtype=np.int64), np.empty(3, np.int64), np.empty(3, np.int64))


@pytest.mark.skipif(not GROUPER.built(), reason="the _arrays C extension was not built (no "
                    "C compiler at install time): only numpy's group sums are in use")
@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 6), st.integers(-2**63, 2**63 - 1),
                               st.integers(-2**40, 2**40)), max_size=40),
       groups=st.integers(7, 10), with_bytes=st.booleans())
def test_compiled_group_stats_equal_numpy(rows: list[tuple[int, int, int]], groups: int,
                                          with_bytes: bool) -> None:
    """Any int64 values (sums wrap as numpy's do), groups with no row, with and without
    bytes."""
    inverse = np.array([r[0] for r in rows], np.int64)
    values = np.array([r[1] for r in rows], np.int64)
    nbytes = np.array([r[2] for r in rows], np.int64) if with_bytes else None
    want = group_stats(inverse, values, nbytes, groups, pure=True)
    got = group_stats(inverse, values, nbytes, groups)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.tolist() == b.tolist()


def test_group_stats_of_an_index_out_of_range_raise_as_numpy_does() -> None:
    for pure in (True, False):
        with pytest.raises(IndexError):
            group_stats(np.array([0, 3], np.int64), np.array([1, 2], np.int64), None, 3,
                        pure=pure)
