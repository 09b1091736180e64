"""The comm join read in storage order: the same rows in the same order as SQLite's sorted
UNION ALL (ties across parts and within a part included), with bounded held rows."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from prvstream.daemon.config import load_settings
from prvstream.daemon.kinds import comm
from prvstream.daemon.nsys import joinscan, presort, runscan, sources, tables
from prvstream.daemon.nsys.rowfill import rows_to_array
from prvstream.daemon.nsys.storage_order import BLOCK
from prvstream.daemon.stream.batch import convert
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from prvstream.sinks.errors import PrvstreamError
from tests.daemon.nsys.apiruns import api_calls_as_processes

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


def _assert_rows(chunks: list[np.ndarray], expected: list[tuple[object, ...]]) -> None:
    """The chunks, concatenated, are SQLite's rows of the ordered comm join, byte for byte."""
    got = np.concatenate(chunks) if chunks else np.empty(0, comm.SPEC.dtype)
    want = rows_to_array(expected, comm.SPEC.dtype, tables.LAYOUTS["comm"])
    assert got.tobytes() == want.tobytes()


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
    _assert_rows(out, expected)
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


class _TableSchema:
    """A database's tables and their columns in table order (``kinds.base.Schema``)."""

    def __init__(self, con: sqlite3.Connection) -> None:
        names = [n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        self.tables = {n: [str(r[1]) for r in con.execute(f"PRAGMA table_info({n})")]
                       for n in names}

    def has(self, table: str, column: str | None = None) -> bool:
        return table in self.tables and (column is None or column in self.tables[table])


def _open_on(con: sqlite3.Connection, size: int) -> Any:
    layout_of = tables.fetch_layout

    def open_part(sql: str, dtype: np.dtype) -> Iterator[np.ndarray]:
        cur = con.execute(sql)  # statements run as soon as the part is started
        while rows := cur.fetchmany(size):
            yield rows_to_array(rows, dtype, layout_of(dtype))

    return open_part


_runs = st.lists(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 2), st.integers(0, 30)),
                          min_size=12, max_size=50), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None)
@given(_runs, _activity, st.integers(1, 40))
def test_a_driving_table_in_runs_reads_as_the_sorted_union(
        tmp_path_factory: pytest.TempPathFactory, runs: list[list[tuple[int, int, int]]],
        activity: list[tuple[int, int, int]], size: int) -> None:
    """API calls stored as runs, each sorted and each starting again at the beginning (one
    block per process), far beyond the window: read run by run against TEMP copies of the
    GPU tables, SQLite's order row for row (ties across parts, runs and GPU rows of one call
    with a shared correlation id included)."""
    calls = [call for run in runs for call in sorted(run)]
    con = _database(tmp_path_factory.mktemp("r") / "t.sqlite", calls, activity)
    schema = _TableSchema(con)
    ordered = comm.select_sql(schema)
    found = comm.scan_parts(schema)
    assert ordered is not None and found is not None
    expected = con.execute(ordered).fetchall()
    out = joinscan.stream(con, comm.DRIVER, found[1], comm.SPEC.dtype, size,
                          _open_on(con, size), max_window=16,
                          copies=lambda: comm.copied_parts(schema), block=4)
    # runs, or one scan within the window; else (runs whose windows add up beyond it) the
    # ordered join runs, SQLite's order by definition
    assume(out is not None)
    assert out is not None
    chunks = list(out)
    assert all(0 < len(c) <= size for c in chunks)
    _assert_rows(chunks, expected)
    con.close()


def test_runs_sharing_a_block_hold_few_rows(tmp_path: Path) -> None:
    """Two processes' calls share a block: the first run's floor there comes from its own
    rows, so its rows leave as they come (the whole block's least, the second process's
    first start, held the first run back until it ended)."""
    n = 203  # the second process starts three rows into a block
    calls = [(10 * i + 5000, 0, i) for i in range(n)] + [(10 * i, 1, n + i) for i in range(n)]
    activity = [(0, 10 * i + 3, i) for i in range(2 * n)]
    con = _database(tmp_path / "t.sqlite", calls, activity)
    schema = _TableSchema(con)
    found = comm.scan_parts(schema)
    assert found is not None
    read = [0]
    opened = _open_on(con, 8)

    def counted(sql: str, dtype: np.dtype) -> Iterator[np.ndarray]:
        for chunk in opened(sql, dtype):
            read[0] += len(chunk)
            yield chunk

    out = joinscan.stream(con, comm.DRIVER, found[1], comm.SPEC.dtype, 8, counted,
                          max_window=64, copies=lambda: comm.copied_parts(schema), block=4)
    assert out is not None
    first = next(out)
    assert first["start"].tolist() == [10 * i for i in range(8)]
    assert read[0] < 64  # a few chunks of each run, not the first run's 203 rows
    ordered = comm.select_sql(schema)
    assert ordered is not None
    _assert_rows([first, *out], con.execute(ordered).fetchall())
    con.close()


def test_without_copies_a_table_beyond_the_window_is_left_to_sqlite(tmp_path: Path) -> None:
    calls = [(i, 0, i) for i in range(40)] + [(i, 0, 100 + i) for i in range(40)]
    con = _database(tmp_path / "t.sqlite", calls, [(0, i + 1, i) for i in range(40)])
    found = comm.scan_parts(_TableSchema(con))
    assert found is not None
    assert joinscan.stream(con, comm.DRIVER, found[1], comm.SPEC.dtype, 16,
                           _open_on(con, 16), max_window=8, block=4) is None
    con.close()


def test_an_export_whose_api_calls_are_two_runs_converts_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond the window, the comm arrows are read run by run (in the reader and in-process)
    and the bytes are those of SQLite's ordered join (``presort = false``)."""
    job = write_job(tmp_path / "job", SynthSpec(ranks=1, steps=40, seed=3))
    window = api_calls_as_processes(job[0])
    assert window > 4 * BLOCK
    monkeypatch.setattr(sources, "_READER_MIN_ROWS", 0)
    monkeypatch.setattr(presort, "MAX_WINDOW", 2 * BLOCK)  # a run's window, not the table's
    cut: list[tuple[runscan.Run, ...] | None] = []
    real_table_runs = runscan.table_runs

    def spy(*args: Any, **kw: Any) -> tuple[runscan.Run, ...] | None:
        cut.append(real_table_runs(*args, **kw))
        return cut[-1]

    monkeypatch.setattr(runscan, "table_runs", spy)
    outs = []
    for use_reader, use_presort in ((True, True), (False, True), (True, False)):
        settings = load_settings(None, {"reader": use_reader, "presort": use_presort},
                                 environ={})
        out = tmp_path / f"out{use_reader}{use_presort}"
        convert([str(p) for p in job], out, settings)
        outs.append(b"".join(out.with_suffix(s).read_bytes() for s in (".prv", ".pcf", ".row")))
    assert cut and all(runs is not None and len(runs) == 2 for runs in cut)
    assert outs[0] == outs[1] == outs[2]
