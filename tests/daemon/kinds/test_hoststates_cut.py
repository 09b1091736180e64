"""Running stretches cut at the grid: ``hoststates.cut`` (with its shortcut for intervals that
cross no grid point) gives the pieces a plain walk over each interval gives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.kinds import hoststates

_G = hoststates.GRID
#: intervals near grid points (begin, length): most cross none, some cross one or several
_SPAN = st.tuples(st.integers(-3, 3).map(lambda k: k * _G) | st.integers(-3 * _G, 3 * _G),
                  st.integers(-2, 2) | st.integers(0, 3 * _G) | st.integers(_G - 2, _G + 2))


def _walk(spans: list[tuple[int, int]], grid_at: int) -> list[tuple[int, int, bool]]:
    out = []
    for begin, length in spans:
        a, end = begin, begin + length
        while end > a:
            b = min(end, grid_at + ((a - grid_at) // _G + 1) * _G)
            out.append((a, b, a != begin))
            a = b
    return out


@settings(max_examples=80, deadline=None)
@given(st.lists(_SPAN, max_size=12), st.integers(-_G, _G) | st.just(0))
def test_cut_is_a_walk_over_each_interval(spans: list[tuple[int, int]], grid_at: int) -> None:
    begin = np.array([s for s, _ in spans], np.int64)
    end = begin + np.array([n for _, n in spans], np.int64)
    b, e, cont = hoststates.cut(begin, end, grid_at)
    assert list(zip(b.tolist(), e.tolist(), cont.tolist(), strict=True)) == _walk(spans,
                                                                                grid_at)
    assert cont.dtype == bool
