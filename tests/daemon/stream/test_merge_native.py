"""The compiled merge sorts (``_merge.c``) give the numpy versions' arrays, every int64."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from prvstream.daemon.stream import merge as merge_module
from prvstream.daemon.stream.merge import RecordBatch

pytestmark = pytest.mark.skipif(
    not merge_module.GATHERER.built(), reason="the _merge C extension was not built (no C "
    "compiler at install time): only the numpy versions are in use")

_I64 = st.integers(-(2**63), 2**63 - 1)
#: few distinct values (many ties at every key column) or any int64
_VALUE = st.one_of(st.integers(-2, 2), st.sampled_from([-(2**63), 2**63 - 1, -1, 0]), _I64)
_KEYS = st.lists(st.tuples(_VALUE, _VALUE, _VALUE), max_size=40)


def _array(rows: list[tuple[int, int, int]]) -> np.ndarray:
    return np.array(rows, dtype=np.int64).reshape(len(rows), 3)


@settings(max_examples=300, deadline=None)
@given(_KEYS)
@example([(2**63 - 1, 0, 0), (-(2**63), 0, 0), (0, -(2**63), 1), (0, 2**63 - 1, -1),
          (0, 2**63 - 1, -(2**63)), (0, 2**63 - 1, -(2**63))])
def test_compiled_sort_order_equals_numpy(rows: list[tuple[int, int, int]]) -> None:
    """Stable full-key order: equal keys keep their input order."""
    keys = _array(rows)
    expected = merge_module._sort_order(keys, pure=True)
    got = merge_module._sort_order(keys)
    assert got.dtype == np.int64 and got.tolist() == expected.tolist()
    assert got.tolist() == sorted(range(len(rows)), key=lambda i: (rows[i], i))


@st.composite
def _parts(draw: st.DrawFn) -> list[tuple[RecordBatch, np.ndarray]]:
    """1-5 parts of random keys, fields of 0-4 columns and templates; each part's index a
    random subsequence of its full-key order (what the merge pool's cuts are)."""
    parts = []
    for _ in range(draw(st.integers(1, 5))):
        keys = _array(draw(_KEYS))
        width = draw(st.integers(0, 4))
        values = draw(st.lists(_I64, min_size=len(keys) * width, max_size=len(keys) * width))
        fields = np.array(values, dtype=np.int64).reshape(len(keys), width)
        tmpl = np.array(draw(st.lists(st.integers(-(2**15), 2**15 - 1), min_size=len(keys),
                                      max_size=len(keys))), dtype=np.int16)
        order = merge_module._sort_order(keys, pure=True)
        keep = draw(st.lists(st.booleans(), min_size=len(order), max_size=len(order)))
        parts.append((RecordBatch(keys, fields, tmpl), order[np.array(keep, dtype=bool)]))
    return parts


@settings(max_examples=300, deadline=None)
@given(_parts())
def test_compiled_gather_equals_numpy(parts: list[tuple[RecordBatch, np.ndarray]]) -> None:
    """The same keys, zero-padded fields and templates, ties in part order."""
    expected = merge_module._gather(parts, pure=True)
    got = merge_module._gather(parts)
    for name in ("keys", "fields", "tmpl"):
        want, have = getattr(expected, name), getattr(got, name)
        assert have.dtype == want.dtype and have.shape == want.shape, name
        assert have.tolist() == want.tolist(), name


def test_gather_refuses_bad_shapes_and_indices() -> None:
    """Shapes that disagree and indices out of range raise instead of reading past a buffer."""
    gather = merge_module.GATHERER.function
    assert gather is not None
    keys = np.zeros((2, 3), np.int64)
    fields = np.zeros((2, 1), np.int64)
    tmpl = np.zeros(2, np.int16)
    out = (np.empty((1, 3), np.int64), np.empty((1, 1), np.int64), 1, np.empty(1, np.int16))
    with pytest.raises(IndexError):
        gather([(keys, fields, 1, tmpl, np.array([2], np.int64))], *out)
    with pytest.raises(IndexError):
        gather([(keys, fields, 1, tmpl, np.array([-1], np.int64))], *out)
    with pytest.raises(ValueError, match="shape"):
        gather([(keys, fields, 2, tmpl, np.array([0], np.int64))], *out)
    with pytest.raises(ValueError, match="total"):
        gather([(keys, fields, 1, tmpl, np.array([0, 1], np.int64))], *out)
    with pytest.raises(ValueError):
        merge_module.SORTER.function(keys, np.empty(3, np.int64))  # type: ignore[misc]
