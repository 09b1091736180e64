"""A record's union of every device's spans (``metrics.covered_pairs``, numpy over one flat
array from a few hundred pairs on) is the length ``metrics.covered`` gives for the same
spans as tuples, for every order, overlap, empty or reversed span and window."""

from __future__ import annotations

from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.efficiency import metrics

#: (start, length): lengths may be 0 or negative (empty or reversed spans)
_SPAN = st.tuples(st.integers(-10**6, 10**6), st.integers(-1000, 10**5))
#: a few (Python) or more than ``_PAIRS_IN_PYTHON`` (numpy)
_SPANS = st.one_of(st.lists(_SPAN, max_size=20),
                   st.lists(_SPAN, min_size=metrics._PAIRS_IN_PYTHON + 1, max_size=600))


@settings(max_examples=120, deadline=None)
@given(spans=_SPANS, lo=st.integers(-10**6, 10**6), width=st.integers(-10, 2 * 10**6))
def test_flat_pairs_cover_what_the_tuples_do(spans: list[tuple[int, int]], lo: int,
                                             width: int) -> None:
    tuples = [(s, s + d) for s, d in spans]
    flat = array("q", [v for pair in tuples for v in pair])
    assert metrics.covered_pairs(flat, lo, lo + width) == metrics.covered(tuples, lo, lo + width)


def test_many_pairs_by_hand() -> None:
    # 300 copies of three spans, unsorted: past the Python cut-over, the numpy path
    tuples = [(50, 70), (0, 10), (5, 20)] * 300
    flat = array("q", [v for pair in tuples for v in pair])
    assert len(tuples) > metrics._PAIRS_IN_PYTHON
    assert metrics.covered_pairs(flat, 0, 100) == 40
    assert metrics.covered_pairs(flat, 8, 60) == 22
    assert metrics.covered_pairs(flat, 100, 200) == 0
