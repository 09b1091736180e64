"""The rowid-order scan with a reorder buffer: start order, ties in rowid order, bounded."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.nsys.presort import reorder
from prvstream.daemon.nsys.storage_order import block_bounds, reorder_window, window_of

_DTYPE = np.dtype([("start", "<i8"), ("rowid", "<i8")])


def _displaced(starts: list[int]) -> int:
    """The most rows before a row that start later than it (what ``reorder`` must hold)."""
    return max((sum(1 for b in starts[:i] if b > a) for i, a in enumerate(starts)), default=0)


def _chunks(starts: list[int], size: int) -> list[np.ndarray]:
    arr = np.array(list(zip(starts, range(len(starts)), strict=True)), dtype=_DTYPE)
    return [arr[i:i + size] for i in range(0, len(arr), size)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=300), st.integers(1, 50), st.integers(0, 30))
def test_reorder_is_a_stable_sort_when_the_window_suffices(starts: list[int], size: int,
                                                             slack: int) -> None:
    window = _displaced(starts) + slack
    out = list(reorder(iter(_chunks(starts, size)), window, size))
    got = np.concatenate(out) if out else np.empty(0, _DTYPE)
    assert all(len(c) <= size for c in out)
    expected = sorted(range(len(starts)), key=lambda i: starts[i])  # stable: ties by rowid
    assert got["rowid"].tolist() == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=400), st.integers(1, 40))
def test_block_window_bounds_every_displacement(starts: list[int], block: int) -> None:
    bounds = [(min(starts[i:i + block]), max(starts[i:i + block]))
              for i in range(0, len(starts), block)]
    assert window_of(bounds, block) >= _displaced(starts)


def test_table_window_from_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    starts = [i * 10 for i in range(1000)]
    starts[500], starts[560] = starts[560], starts[500]  # one pair 60 rows apart
    con.execute("CREATE TABLE T (start INTEGER, kind INTEGER)")
    con.executemany("INSERT INTO T VALUES (?, ?)", [(s, s % 3) for s in starts])
    con.commit()
    bounds = block_bounds(con, "T", "start", block=100)
    assert len(bounds) == 10 and bounds[5] == (5000, 5990)
    window = reorder_window(con, "T", "start", block=100)
    assert window >= _displaced(starts)
    rows = con.execute("SELECT start, rowid FROM T ORDER BY rowid").fetchall()
    chunks = [np.array(rows[i:i + 64], dtype=_DTYPE) for i in range(0, len(rows), 64)]
    got = np.concatenate(list(reorder(iter(chunks), window, 64)))
    assert got["start"].tolist() == sorted(starts)
    assert reorder_window(con, "T", "start", "kind = 7", block=100) == 0  # no rows
    con.close()


def test_sorted_chunks_pass_through_uncopied() -> None:
    chunks = _chunks(list(range(100)), 10)
    out = list(reorder(iter(chunks), 25, 10))
    assert [c["start"].tolist() for c in out] == [c["start"].tolist() for c in chunks]
    assert all(np.shares_memory(a, b) for a, b in zip(out, chunks, strict=True))
