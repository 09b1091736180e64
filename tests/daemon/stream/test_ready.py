"""The horizon split of held rows: the compiled pass gives numpy's rows, every int64."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from prvstream.daemon.stream.ready import SPLITTER, split_ready
from prvstream.sinks.base import ACTIVITY_DTYPE, HOST_DTYPE, PHASE_DTYPE

_I64 = st.integers(-(2**63), 2**63 - 1)
_START = st.one_of(st.integers(-3, 3), st.sampled_from([-(2**63), 2**63 - 1]), _I64)
_PARTS = st.lists(st.lists(_START, min_size=1, max_size=25), min_size=1, max_size=4)
_DTYPES = st.sampled_from([ACTIVITY_DTYPE, HOST_DTYPE, PHASE_DTYPE])


def _arrays(parts: list[list[int]], dtype: np.dtype) -> list[np.ndarray]:
    """Rows with the given starts; every row's end tells it apart (its part and place)."""
    out = []
    for k, starts in enumerate(parts):
        rows = np.zeros(len(starts), dtype=dtype)
        rows["start"] = starts
        rows["end"] = np.arange(len(starts)) + 1000 * k
        out.append(rows)
    return out


def _joined(rest: list[np.ndarray], dtype: np.dtype) -> bytes:
    return (np.concatenate(rest) if rest else np.empty(0, dtype=dtype)).tobytes()


@settings(max_examples=300, deadline=None)
@given(_PARTS, st.one_of(st.none(), _START), _DTYPES)
@example([[5, -(2**63), 5, 2**63 - 1], [0, 0]], 2**63 - 1, ACTIVITY_DTYPE)
@example([[3, 2, 1]], -(2**63), HOST_DTYPE)
def test_split_is_the_ready_rows_in_start_order_then_the_rest(
        parts: list[list[int]], horizon: int | None, dtype: np.dtype) -> None:
    arrays = _arrays(parts, dtype)
    ready, rest = split_ready(arrays, dtype, horizon, pure=True)
    every = [row for a in arrays for row in a.tolist()]
    is_ready = [horizon is None or row[0] < horizon for row in every]
    expected = sorted((r for r, ok in zip(every, is_ready, strict=True) if ok),
                      key=lambda r: r[0])  # stable: ties keep their order
    assert ready.dtype == dtype and ready.tolist() == expected
    assert _joined(rest, dtype) == np.array(
        [tuple(r) for r, ok in zip(every, is_ready, strict=True) if not ok],
        dtype=dtype).tobytes()
    if SPLITTER.built():
        c_ready, c_rest = split_ready(arrays, dtype, horizon)
        assert c_ready.dtype == dtype and c_ready.tobytes() == ready.tobytes()
        assert _joined(c_rest, dtype) == _joined(rest, dtype)


@pytest.mark.skipif(not SPLITTER.built(), reason="the _merge C extension was not built (no C "
                    "compiler at install time): only the numpy split is in use")
def test_compiled_split_refuses_rows_that_do_not_fit() -> None:
    split = SPLITTER.function
    assert split is not None
    rows = np.zeros(3, dtype=ACTIVITY_DTYPE)
    with pytest.raises(ValueError, match="every part"):
        split([rows], ACTIVITY_DTYPE.itemsize, 0, np.empty(2, dtype=ACTIVITY_DTYPE))
    with pytest.raises(ValueError, match="whole number"):
        split([rows], 24, None, np.empty(3, dtype=ACTIVITY_DTYPE))
    with pytest.raises(ValueError, match="8 bytes"):
        split([rows], 4, None, np.empty(3, dtype=ACTIVITY_DTYPE))
    with pytest.raises(OverflowError):
        split([rows], ACTIVITY_DTYPE.itemsize, 2**63, np.empty(3, dtype=ACTIVITY_DTYPE))
