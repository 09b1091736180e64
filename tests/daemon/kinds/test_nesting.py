"""NVTX push/pop nesting: the C pass and its Python fallback restore the same values and leave
the same open ranges, across calls."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.kinds import nesting

needs_c = pytest.mark.skipif(not nesting.NESTING.compiled(),
                             reason="the C nesting pass was not built")

_RANGE = st.tuples(st.integers(0, 50), st.integers(0, 30), st.integers(-5, 2**40))


@needs_c
@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_RANGE, max_size=30), min_size=1, max_size=4))
def test_the_c_pass_is_the_python_one(calls: list[list[tuple[int, int, int]]]) -> None:
    """Several chunks of one thread and domain: ranges (start, length, value) in start order."""
    stacks: list[list[tuple[int, int]]] = [[], []]
    for ranges in calls:
        ranges = sorted(ranges, key=lambda r: r[0])
        start = np.array([r[0] for r in ranges], np.int64)
        end = start + np.array([r[1] for r in ranges], np.int64)
        value = np.array([r[2] for r in ranges], np.int64)
        c = nesting.restore(stacks[0], start, end, value)
        py = nesting.restore(stacks[1], start, end, value, pure=True)
        assert c.tolist() == py.tolist()
        assert stacks[0] == stacks[1]


def test_an_enclosing_open_range_is_restored() -> None:
    for pure in (False, True):
        stack: list[tuple[int, int]] = [(100, 7)]
        out = nesting.restore(stack, np.array([10, 20, 60]), np.array([50, 30, 70]),
                              np.array([1, 2, 3]), pure=pure)
        assert out.tolist() == [7, 1, 7]
        assert stack == [(100, 7), (70, 3)]
