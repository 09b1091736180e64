"""The compiled phase overlaps and sweep segments give the numpy references' integers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.efficiency import overlap, parts

spans = st.lists(st.tuples(st.integers(-50, 200), st.integers(-20, 80)), max_size=25)


def _arrays(pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Intervals [a, a + d) (d may be 0 or negative: empty or reversed ones too)."""
    a = np.array([p[0] for p in pairs], np.int64)
    return a, a + np.array([p[1] for p in pairs], np.int64)


@pytest.mark.skipif(not overlap.OVERLAPS.built(), reason="the _overlap C extension was not built "
                    "(no C compiler at install time): only the numpy reference is in use")
@settings(max_examples=300, deadline=None)
@given(pieces=spans, occurrences=spans)
def test_c_loops_equal_the_numpy_reference(pieces: list[tuple[int, int]],
                                           occurrences: list[tuple[int, int]]) -> None:
    lo, hi = _arrays(pieces)
    starts, ends = _arrays(occurrences)
    ref = overlap.covered_by(lo, hi, starts, ends, pure=True)
    got = overlap.covered_by(lo, hi, starts, ends)
    assert got.dtype == ref.dtype and got.tolist() == ref.tolist()
    ref_n, ref_ns = overlap.hits(lo, hi, starts, ends, pure=True)
    got_n, got_ns = overlap.hits(lo, hi, starts, ends)
    assert got_n.dtype == ref_n.dtype and got_n.tolist() == ref_n.tolist()
    assert got_ns.dtype == ref_ns.dtype and got_ns.tolist() == ref_ns.tolist()


def test_reference_by_hand() -> None:
    lo, hi = np.array([0, 10, 30], np.int64), np.array([5, 20, 40], np.int64)
    starts, ends = np.array([3, 15, 50, 12], np.int64), np.array([12, 35, 60, 12], np.int64)
    for pure in (True, False):
        assert overlap.covered_by(lo, hi, starts, ends, pure=pure).tolist() == [4, 10, 0, 0]
        n, ns = overlap.hits(lo, hi, starts, ends, pure=pure)
        assert n.tolist() == [2, 2, 0, 1] and ns.tolist() == [4, 10, 0, 0]


def test_a_buffer_of_the_wrong_size_is_refused() -> None:
    if not overlap.OVERLAPS.built():
        pytest.skip("the _overlap C extension was not built")
    from prvstream.sinks.efficiency._overlap import overlaps
    one = np.zeros(1, np.int64)
    with pytest.raises(ValueError, match="must hold"):
        overlaps(one, np.zeros(2, np.int64), one, one, one, one, True)


intervals = st.lists(st.tuples(st.integers(-30, 120), st.integers(-10, 60), st.integers(0, 2)),
                     min_size=1, max_size=30)


@pytest.mark.skipif(not parts.SEGMENTS.built(), reason="the _overlap C extension was not built "
                    "(no C compiler at install time): only the numpy reference is in use")
@settings(max_examples=300, deadline=None)
@given(rows=intervals, lo=st.integers(-20, 60), width=st.integers(1, 100),
       presorted=st.booleans(), repeat=st.integers(-1, 29))
def test_c_segments_equal_the_numpy_reference(rows: list[tuple[int, int, int]], lo: int,
                                              width: int, presorted: bool, repeat: int) -> None:
    """Intervals in any order (or sorted by start, as the sweep feeds them), reversed ones
    too, boundaries before, at and past [lo, hi); with a row of an earlier report (category
    REPEATED and up) the C pass leaves the count to the numpy code."""
    if presorted:
        rows = sorted(rows)
    s = np.array([r[0] for r in rows], np.int64)
    e = s + np.array([r[1] for r in rows], np.int64)
    c = np.array([r[2] for r in rows], np.int8)
    if 0 <= repeat < len(rows):
        c[repeat] += parts.REPEATED
    ref = parts.segments(s, e, c, lo, lo + width, pure=True)
    got = parts.segments(s, e, c, lo, lo + width)
    for a, b in zip(got, ref, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tolist() == b.tolist()


def test_segments_by_hand() -> None:
    s, e = np.array([0, 2, 2, 5], np.int64), np.array([4, 3, 9, 6], np.int64)
    c = np.array([0, 1, 2, 0], np.int8)
    for pure in (True, False):
        edges, comp, nccl, total = parts.segments(s, e, c, 1, 8, pure=pure)
        assert edges.tolist() == [1, 2, 3, 4, 5, 6, 8]
        assert comp.tolist() == [1, 1, 1, 0, 1, 0]
        assert nccl.tolist() == [0, 1, 0, 0, 0, 0]
        assert total.tolist() == [1, 3, 2, 1, 2, 1]


def test_c_segments_of_a_long_unsorted_input() -> None:
    """Ends far out of order (the C pass's insertion sort gives way to its merge sort)."""
    if not parts.SEGMENTS.built():
        pytest.skip("the _overlap C extension was not built")
    rng = np.random.default_rng(7)
    s = np.sort(rng.integers(0, 1000, 400)).astype(np.int64)
    e = s + rng.integers(-5, 2000, 400)[::-1]
    c = rng.integers(0, 3, 400).astype(np.int8)
    for lo, hi in ((0, 3000), (100, 900), (-50, 10)):
        ref = parts.segments(s, e, c, lo, hi, pure=True)
        got = parts.segments(s, e, c, lo, hi)
        assert [a.tolist() for a in got] == [b.tolist() for b in ref]
