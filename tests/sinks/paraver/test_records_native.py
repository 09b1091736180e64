"""The compiled record keys (``_records.c``) give numpy's arrays."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from prvstream.sinks.paraver import records
from prvstream.sinks.paraver.records import make_keys

pytestmark = pytest.mark.skipif(
    not records.KEYS.built(), reason="the _records C extension was not built (no C compiler "
    "at install time): only the numpy versions are in use")

_I64 = st.integers(-(2**63), 2**63 - 1)
_VALUE = st.one_of(st.integers(-3, 3), st.sampled_from([-(2**63), 2**63 - 1]), _I64)


@st.composite
def _key_parts(draw: st.DrawFn) -> tuple[object, ...]:
    """time, prio, task, thread (each part an int or an array of any integer type), rank,
    report, seq; every int64 where the layout allows it."""
    n = draw(st.integers(0, 20))

    def column(dtype: type = np.int64) -> np.ndarray:
        info = np.iinfo(dtype)
        return np.array(draw(st.lists(st.integers(info.min, info.max), min_size=n,
                                      max_size=n)), dtype=dtype)

    def part() -> np.ndarray | int:
        if draw(st.booleans()):
            return draw(_VALUE)
        return column(draw(st.sampled_from([np.int64, np.int32, np.uint8, np.int16])))

    return (column(), part(), part(), part(), draw(_VALUE),
            draw(st.integers(-(2**23), 2**23 - 1)), column())


@settings(max_examples=300, deadline=None)
@given(_key_parts())
@example((np.array([2**63 - 1, -(2**63)]), 2**63 - 1, -(2**63), np.array([-1, 2**40]),
          2**63 - 1, 2**23 - 1, np.array([-(2**63), 2**63 - 1])))
def test_compiled_keys_equal_numpy(parts: tuple[object, ...]) -> None:
    """The shifts wrap as int64 numpy's do, for every int64 part."""
    want = make_keys(*parts, pure=True)  # type: ignore[arg-type]
    got = make_keys(*parts)  # type: ignore[arg-type]
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tolist() == want.tolist()


def test_compiled_keys_refuse_a_report_that_does_not_fit() -> None:
    compiled = records.KEYS.function
    assert compiled is not None
    one = np.zeros(1, np.int64)
    with pytest.raises(OverflowError):
        compiled(np.empty((1, 3), np.int64), one, 0, 0, 0, 0, 2**23, one)
    with pytest.raises(ValueError, match="one int64 a record"):
        compiled(np.empty((1, 3), np.int64), one, np.zeros(2, np.int64), 0, 0, 0, 0, one)
