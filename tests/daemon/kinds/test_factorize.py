"""``factorize`` gives ``np.unique``'s distinct combinations of a chunk's integer columns and
each row's index into them, whichever columns hold one value."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.kinds.context import factorize

_DTYPE = np.dtype([("gpid", "<i8"), ("device", "<i4"), ("stream", "<i4")])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([7 << 24, 9 << 24, 2**62]), st.integers(-2, 1),
                          st.integers(-1, 80)), max_size=120),
       st.sampled_from([("gpid", "device", "stream"), ("gpid", "device"), ("stream",),
                        ("stream", "gpid")]))
def test_factorize_matches_numpy(rows: list[tuple[int, int, int]],
                                 columns: tuple[str, ...]) -> None:
    chunk = np.array(rows, dtype=_DTYPE)
    combos, inverse = factorize(chunk, columns)
    keys = [tuple(int(r[c]) for c in columns) for r in chunk]
    assert combos == sorted(set(keys))
    assert inverse.dtype == np.intp and len(inverse) == len(chunk)
    assert [combos[i] for i in inverse.tolist()] == keys
