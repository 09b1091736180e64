"""A table stored as runs read run by run: the rows and order of SQLite's ``ORDER BY start``
(ties in rowid order), runs cut inside the block two processes' rows share, and a whole
conversion's bytes unchanged."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.config import load_settings
from prvstream.daemon.kinds import comm
from prvstream.daemon.nsys import presort, runscan, sources
from prvstream.daemon.nsys.storage_order import BLOCK
from prvstream.daemon.stream.batch import convert
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from tests.daemon.nsys.apiruns import api_calls_as_processes

_ROW = np.dtype([("start", np.int64), ("id", np.int64)])


def _chunks(rows: list[tuple[int, int]], size: int) -> Iterator[np.ndarray]:
    for lo in range(0, len(rows), size):
        yield np.array(rows[lo:lo + size], dtype=_ROW)


_sorted_runs = st.lists(st.lists(st.integers(0, 30), max_size=40).map(sorted), max_size=5)


@given(_sorted_runs, st.integers(1, 9), st.integers(1, 12))
def test_merged_runs_are_a_stable_sort_of_their_concatenation(
        runs: list[list[int]], piece: int, size: int) -> None:
    """Merged by start, ties to the earlier run, then in the run's own order; every chunk
    holds one to ``size`` rows."""
    tagged = [[(start, 1000 * r + i) for i, start in enumerate(run)]
              for r, run in enumerate(runs)]
    out = list(runscan.merge([_chunks(run, piece) for run in tagged], size))
    assert all(0 < len(c) <= size for c in out)
    got = [tuple(map(int, row)) for c in out for row in c.tolist()]
    assert got == sorted((row for run in tagged for row in run), key=lambda row: row[0])


def test_a_run_behind_the_others_is_read_first() -> None:
    """The run furthest behind is read next, so no run holds more than a chunk or two beyond
    what has left (here: one long run and one that starts late)."""
    seen: list[int] = []

    def counted(rows: list[tuple[int, int]], tag: int) -> Iterator[np.ndarray]:
        for chunk in _chunks(rows, 4):
            seen.append(tag)
            yield chunk

    early = [(t, 0) for t in range(100)]
    late = [(t, 1) for t in range(50, 150)]
    out = runscan.merge([counted(early, 0), counted(late, 1)], 4)
    first = next(out)
    assert first["start"].tolist() == [0, 1, 2, 3]
    for _ in out:
        pass
    # the late run is read once at the start (to know where it stands), then only when the
    # early run has caught up with it
    assert seen[:3] == [0, 1, 0] and seen.index(1, 2) > 12


def _table(path: Path, starts: list[int]) -> sqlite3.Connection:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (start INTEGER NOT NULL, kind INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(s, s % 3) for s in starts])
    con.commit()
    return con


def _processes(draw: Any) -> list[int]:
    """A table's starts as a few processes' rows one after the other, each nearly in start
    order (neighbours swapped now and then), each starting near the beginning of time."""
    rows: list[int] = []
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, 90))
        starts = sorted(draw(st.lists(st.integers(0, 500), min_size=n, max_size=n)))
        for i in draw(st.lists(st.integers(0, max(0, n - 2)), max_size=4)):
            if i + 1 < n:
                starts[i], starts[i + 1] = starts[i + 1], starts[i]
        rows += starts
    return rows


@settings(max_examples=80, deadline=None)
@given(st.data(), st.sampled_from(["", "kind IN (0, 2)"]), st.integers(1, 7))
def test_a_table_in_runs_reads_as_its_ordered_select(
        tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, where: str,
        size: int) -> None:
    """Cut into runs (where that works) and each run scanned with its own reorder buffer,
    the merged rows are ``ORDER BY start``'s, rowid for rowid; the runs' windows together stay
    within the largest window."""
    starts = _processes(data.draw)
    con = _table(tmp_path_factory.mktemp("t") / "t.sqlite", starts)
    block, most = 4, 16
    first, least, greatest = runscan.block_columns(con, '"t"', '"start"', where, block)
    cond = f" WHERE {where}" if where else ""
    want = [r for (r,) in con.execute(f"SELECT rowid FROM t{cond} ORDER BY start")]
    runs = runscan.table_runs(con, '"t"', '"start"', where, first, least, greatest, most,
                              block)
    if runs is None:
        con.close()
        return
    assert 2 <= len(runs) <= runscan.MOST_RUNS and sum(r.window for r in runs) <= most
    assert all(a.last < b.first for a, b in itertools.pairwise(runs))
    scan = f'SELECT start, rowid FROM "t"{cond}'

    def read(run: runscan.Run) -> Iterator[np.ndarray]:
        rows = con.execute(runscan.ranged(scan, '"t"', where, run)).fetchall()
        return presort.reorder(_chunks(rows, size), run.window, size)

    got = [int(r) for c in runscan.merge([read(r) for r in runs], size) for r in c["id"]]
    assert got == want
    con.close()


def test_two_processes_sharing_a_block_are_cut_inside_it(tmp_path: Path) -> None:
    """One process's last rows and the next one's first share a block: the cut falls between
    them, so neither run holds more than a block (taken whole, that block held the second
    run's every row behind the first run's latest start)."""
    block = 4
    starts = list(range(100, 130)) + list(range(0, 30))  # 30 rows: the 8th block is shared
    con = _table(tmp_path / "t.sqlite", starts)
    first, least, greatest = runscan.block_columns(con, '"t"', '"start"', "", block)
    assert runscan.window(least, greatest, block) > 8 * block
    runs = runscan.table_runs(con, '"t"', '"start"', "", first, least, greatest, 4 * block,
                              block)
    assert runs == (runscan.Run(1, 30, block), runscan.Run(31, 60, block))
    con.close()


def _at_rowids(path: Path, rows: list[tuple[int, int]]) -> sqlite3.Connection:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (start INTEGER NOT NULL, kind INTEGER)")
    con.executemany("INSERT INTO t (rowid, start, kind) VALUES (?, ?, 0)", rows)
    con.commit()
    return con


def test_runs_are_cut_where_the_table_starts_again(tmp_path: Path) -> None:
    """Cuts at block edges where a block starts back at the beginning; an empty block (a
    gap in the rowids) belongs to the run it lies in; a sorted table is not runs."""
    block = 4
    first = [(r, 10 * r) for r in range(1, 41)]  # ten sorted blocks
    second = [(r, 10 * (r - 40) + 5) for r in range(41, 81)]  # ten more, starting again
    con = _at_rowids(tmp_path / "two.sqlite", first + second)
    cols = runscan.block_columns(con, '"t"', '"start"', "", block)
    assert runscan.table_runs(con, '"t"', '"start"', "", *cols, 8, block) == (
        runscan.Run(1, 40, block), runscan.Run(41, 80, block))
    con.close()
    gap = [(r, s) for r, s in first + second if not 13 <= r <= 16]  # block 4 of the first
    con = _at_rowids(tmp_path / "gap.sqlite", gap)
    cols = runscan.block_columns(con, '"t"', '"start"', "", block)
    assert runscan.table_runs(con, '"t"', '"start"', "", *cols, 8, block) == (
        runscan.Run(1, 40, block), runscan.Run(41, 80, block))
    con.close()
    con = _at_rowids(tmp_path / "one.sqlite", first)
    cols = runscan.block_columns(con, '"t"', '"start"', "", block)
    assert runscan.table_runs(con, '"t"', '"start"', "", *cols, 8, block) is None
    con.close()


def test_too_many_runs_or_wide_windows_are_left_to_sqlite(tmp_path: Path) -> None:
    block = 4
    many = [s for _ in range(runscan.MOST_RUNS + 1) for s in range(40)]
    con = _table(tmp_path / "many.sqlite", many)
    cols = runscan.block_columns(con, '"t"', '"start"', "", block)
    assert runscan.table_runs(con, '"t"', '"start"', "", *cols, 8 * block, block) is None
    con.close()
    shuffled = [s for _ in range(2) for s in range(40)[::-1]]  # each run fully reversed
    con = _table(tmp_path / "wide.sqlite", shuffled)
    cols = runscan.block_columns(con, '"t"', '"start"', "", block)
    assert runscan.table_runs(con, '"t"', '"start"', "", *cols, 8 * block, block) is None
    con.close()


def test_a_range_keeps_the_scan_condition() -> None:
    run = runscan.Run(5, 9, 4)
    assert runscan.ranged('SELECT a FROM "t"', '"t"', "", run) == \
        'SELECT a FROM "t" WHERE "t".rowid BETWEEN 5 AND 9'
    assert runscan.ranged('SELECT a FROM "t" WHERE x = 1 OR y = 2', '"t"', "x = 1 OR y = 2",
                          run) == \
        'SELECT a FROM "t" WHERE (x = 1 OR y = 2) AND "t".rowid BETWEEN 5 AND 9'
    with pytest.raises(ValueError, match="not a storage-order scan"):
        runscan.ranged('SELECT a FROM "u"', '"t"', "", run)


@pytest.mark.parametrize(("shared", "kinds"), [(0, []), (BLOCK // 3, []),
                                               (BLOCK // 3, ["runtime", "kernel"])])
def test_an_export_whose_api_calls_are_runs_converts_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared: int, kinds: list[str]) -> None:
    """The API calls, beyond the window, are read run by run for their own kind too (in the
    reader and in-process; the runs cut inside a shared block or at a block's edge; found by
    the comm join's bounds, or without the comm kind by the reader process itself), and the
    bytes are SQLite's sort's (``presort = false``)."""
    job = write_job(tmp_path / "job", SynthSpec(ranks=1, steps=60, seed=5))
    window = api_calls_as_processes(job[0], shared)
    monkeypatch.setattr(sources, "_READER_MIN_ROWS", 0)
    monkeypatch.setattr(presort, "MAX_WINDOW", 4 * BLOCK)
    assert window > presort.MAX_WINDOW
    cut: list[tuple[str, int]] = []
    merged: list[int] = []
    real_runs, real_merge = runscan.table_runs, runscan.merge

    def runs_spy(con: sqlite3.Connection, table: str, *args: Any) -> Any:
        found = real_runs(con, table, *args)
        cut.append((table, 0 if found is None else len(found)))
        return found

    def merge_spy(runs: list[Iterator[np.ndarray]], size: int) -> Iterator[np.ndarray]:
        merged.append(len(runs))
        return real_merge(runs, size)

    monkeypatch.setattr(runscan, "table_runs", runs_spy)
    monkeypatch.setattr(runscan, "merge", merge_spy)
    outs = []
    for use_reader, use_presort in ((True, True), (False, True), (True, False)):
        settings_ = load_settings(None, {"reader": use_reader, "presort": use_presort,
                                         "kinds": kinds}, environ={})
        out = tmp_path / f"out{use_reader}{use_presort}"
        cut.clear()
        merged.clear()
        convert([str(p) for p in job], out, settings_)
        # the API table is two runs (cut in this process, or in the reader's when no comm
        # join read its bounds here), and its kind is read as those runs merged; without
        # presort no table is cut
        here = use_presort and (not use_reader or not kinds)
        assert ((f'"{comm.DRIVER}"', 2) in cut) == here
        assert (2 in merged) == use_presort
        outs.append(b"".join(out.with_suffix(s).read_bytes() for s in (".prv", ".pcf", ".row")))
    assert outs[0] == outs[1] == outs[2]
