"""The compiled phase overlaps give the numpy reference's integers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.efficiency import overlap

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
