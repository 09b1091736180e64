"""The host windows' packed index against a dict of dicts: whatever windows and process ids
are added (far windows and huge ids among them), each row reads back, and ``by_process``
lists every pair in (process, window) order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.efficiency import hostwindows
from prvstream.sinks.efficiency.hostwindows import HostWindows

_windows = st.one_of(st.integers(1_700_000_000, 1_700_000_010), st.integers(-(2**40), 2**40))
_procs = st.one_of(st.integers(0, 6), st.integers(0, 2**40))
_adds = st.lists(st.tuples(_procs, st.integers(0, 3), st.lists(_windows, min_size=1,
                                                                max_size=4)),
                 max_size=40)


@settings(max_examples=80, deadline=None)
@given(adds=_adds, recent=st.sampled_from([512, 1, 3]))
def test_rows_and_pairs_as_a_dict_of_dicts(adds: list[tuple[int, int, list[int]]],
                                           recent: int) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hostwindows, "_RECENT", recent)
        table = HostWindows(4)
        want: dict[tuple[int, int], list[int]] = {}
        for proc, col, windows in adds:
            windows = sorted(set(windows))
            table.add(proc, col, windows, [k % 1000 + 1 for k in windows])
            for k in windows:
                want.setdefault((k, proc), [0] * 4)[col] += k % 1000 + 1
        for (k, proc), row in want.items():
            assert table.get(k, proc) == row
        assert table.get(12345, 2**50) is None
        procs, windows, rows = table.by_process()
        pairs = sorted(want, key=lambda kp: (kp[1], kp[0]))
        assert procs.tolist() == [p for _, p in pairs]
        assert windows.tolist() == [k for k, _ in pairs]
        assert rows.tolist() == [want[kp] for kp in pairs]
        assert rows.dtype == np.int64
