"""``SpanIndex``: the occurrences ``phase_rows`` searches, extended as they are appended, equal
to sorting them all again (stably, by start) and taking the running greatest end."""

from __future__ import annotations

from array import array

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from prvstream.sinks.efficiency.tables import SpanIndex

_PAIR = st.tuples(st.integers(0, 1_000), st.integers(0, 1_000))


def _sorted_again(pairs: array[int]) -> tuple[np.ndarray, np.ndarray]:
    flat = np.array(pairs, dtype=np.int64)
    order = np.argsort(flat[0::2], kind="stable")
    return flat[0::2][order], np.maximum.accumulate(flat[1::2][order])


@given(st.lists(st.lists(_PAIR, max_size=6), max_size=8), st.booleans())
def test_extended_index_equals_a_fresh_sort(batches: list[list[tuple[int, int]]],
                                            in_order: bool) -> None:
    if in_order:  # the usual case: occurrences arrive in start order
        flat_pairs = sorted(p for b in batches for p in b)
        sizes = [len(b) for b in batches]
        batches, at = [], 0
        for n in sizes:
            batches.append(flat_pairs[at:at + n])
            at += n
    index = SpanIndex()
    pairs: array[int] = array("q")
    for batch in batches:
        for start, length in batch:
            pairs += array("q", (start, start + length))  # grows in place: never exported
        lo, reach = index.get("k", pairs)
        want_lo, want_reach = _sorted_again(pairs)
        assert lo.tolist() == want_lo.tolist()
        assert reach.tolist() == want_reach.tolist()


def test_a_replaced_array_is_indexed_afresh() -> None:
    index = SpanIndex()
    first = array("q", (5, 9, 7, 8))
    index.get("k", first)
    second = array("q", (1, 2, 3, 4, 0, 10))
    lo, reach = index.get("k", second)
    assert lo.tolist() == [0, 1, 3] and reach.tolist() == [10, 10, 10]
