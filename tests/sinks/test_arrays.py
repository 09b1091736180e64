"""``unique_inverse`` and ``distinct`` are ``np.unique``'s answers, faster for few values."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.arrays import distinct, unique_inverse


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
