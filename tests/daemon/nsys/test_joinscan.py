"""The comm join read in storage order: the same rows in the same order as SQLite's sorted
UNION ALL (ties across parts and within a part included), with bounded held rows."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.kinds import comm
from prvstream.daemon.nsys import joinscan, tables
from prvstream.daemon.nsys.rowfill import rows_to_array
from prvstream.sinks.errors import PrvstreamError

_GPU = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


class _Schema:
    """The tables of the hand-made database below (``kinds.base.Schema``)."""

    def __init__(self) -> None:
        self.tables = {t: ["start", "correlationId"] for t in (comm.DRIVER, *_GPU)}

    def has(self, table: str, column: str | None = None) -> bool:
        return table in self.tables


def _database(path: Path, calls: list[tuple[int, int, int]],
              activity: list[tuple[int, int, int]]) -> sqlite3.Connection:
    """API calls (start, thread, correlation id) and GPU rows (table index, start, correlation
    id), stored in the order given."""
    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE {comm.DRIVER} (start INTEGER NOT NULL, globalTid INTEGER, "
                "correlationId INTEGER)")
    for table in _GPU:
        con.execute(f"CREATE TABLE {table} (start INTEGER NOT NULL, globalPid INTEGER, "
                    "deviceId INTEGER, streamId INTEGER, correlationId INTEGER, bytes INTEGER)")
    pid = 7 << 24
    con.executemany(f"INSERT INTO {comm.DRIVER} VALUES (?, ?, ?)",
                    [(s, pid + t, c) for s, t, c in calls])
    for n, (table_index, start, corr) in enumerate(activity):
        con.execute(f"INSERT INTO {_GPU[table_index]} VALUES (?, ?, 0, ?, ?, ?)",
                    (start, pid, n % 5, corr, n))
    con.commit()
    return con


def _parts(con: sqlite3.Connection, size: int, dtype: np.dtype) -> list[Iterator[np.ndarray]]:
    layout = tables.fetch_layout(dtype)
    found = comm.scan_parts(_Schema())
    assert found is not None

    def chunks(sql: str) -> Iterator[np.ndarray]:
        cur = con.execute(sql)
        while rows := cur.fetchmany(size):
            yield rows_to_array(rows, dtype, layout)

    return [chunks(sql) for sql in found[1]]


_calls = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 2), st.integers(0, 30)),
                  max_size=120)
_activity = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 10**4), st.integers(0, 30)),
                     max_size=120)


@settings(max_examples=60, deadline=None)
@given(_calls, _activity, st.integers(1, 9), st.integers(1, 40))
def test_merged_parts_are_the_sorted_union(tmp_path_factory: pytest.TempPathFactory,
                                           calls: list[tuple[int, int, int]],
                                           activity: list[tuple[int, int, int]], block: int,
                                           size: int) -> None:
    """Ties of start across parts and within one (one call, several GPU rows; calls at one
    instant), any disorder, any block and chunk size: SQLite's order, row for row."""
    con = _database(tmp_path_factory.mktemp("j") / "t.sqlite", calls, activity)
    ordered = comm.select_sql(_Schema())
    assert ordered is not None
    expected = con.execute(ordered).fetchall()
    floor, _ = joinscan.floors(con, comm.DRIVER, '"start"', block)
    wide = joinscan.scan_dtype(comm.SPEC.dtype)
    out = list(joinscan.merge(_parts(con, size, wide), floor, comm.SPEC.dtype, size))
    assert all(0 < len(c) <= size for c in out)
    got = np.concatenate(out) if out else np.empty(0, comm.SPEC.dtype)
    want = rows_to_array(expected, comm.SPEC.dtype, tables.LAYOUTS["comm"])
    assert got.tobytes() == want.tobytes()
    con.close()


def test_held_rows_are_bounded_by_the_disorder(tmp_path: Path) -> None:
    """A long, nearly sorted join: what ``merge`` holds stays near the window, not the run."""
    calls = [(i * 10, 0, i) for i in range(6000)]
    calls[3000], calls[3040] = calls[3040], calls[3000]
    con = _database(tmp_path / "t.sqlite", calls, [(i % 3, i * 10 + 3, i) for i in range(6000)])
    floor, window = joinscan.floors(con, comm.DRIVER, '"start"', 64)
    assert 0 < window <= 256
    wide = joinscan.scan_dtype(comm.SPEC.dtype)
    parts = _parts(con, 128, wide)
    pulled = [0]

    def counted(part: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
        for chunk in part:
            pulled[0] += len(chunk)
            yield chunk

    emitted = 0
    most = 0
    for chunk in joinscan.merge([counted(p) for p in parts], floor, comm.SPEC.dtype, 128):
        emitted += len(chunk)
        most = max(most, pulled[0] - emitted)
    assert emitted == 6000
    assert most <= 3 * 128 + 2 * window + 128  # a chunk per part and the disorder
    con.close()


def test_a_part_out_of_rowid_order_is_refused() -> None:
    wide = joinscan.scan_dtype(comm.SPEC.dtype)
    rows = np.zeros(3, wide)
    rows["start"] = [1, 2, 3]
    rows[joinscan.ROWID] = [5, 4, 6]
    floor = joinscan.Floors(0, np.array([0, 0], np.int64), 4)
    with pytest.raises(PrvstreamError, match="PRVSTREAM_PRESORT=0"):
        list(joinscan.merge([iter([rows])], floor, comm.SPEC.dtype, 8))


def test_a_dtype_with_padding_is_refused() -> None:
    with pytest.raises(ValueError, match="packed"):
        joinscan.scan_dtype(np.dtype([("start", "<i8"), ("x", "<i4")], align=True))


def test_no_parts_and_empty_parts_give_no_rows() -> None:
    wide = joinscan.scan_dtype(comm.SPEC.dtype)
    floor = joinscan.Floors(0, np.array([0], np.int64), 4)
    assert list(joinscan.merge([], floor, comm.SPEC.dtype, 8)) == []
    empty = [iter([np.zeros(0, wide)]), iter([])]
    assert list(joinscan.merge(empty, floor, comm.SPEC.dtype, 8)) == []
