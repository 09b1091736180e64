"""The rowid-order scan with a reorder buffer: start order, ties in rowid order, bounded."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from prvstream.daemon.config import load_settings
from prvstream.daemon.nsys import presort, sources, tables
from prvstream.daemon.nsys.export import Export, open_export
from prvstream.daemon.nsys.presort import reorder
from prvstream.daemon.nsys.storage_order import block_bounds, reorder_window, window_of
from prvstream.daemon.stream.batch import convert
from prvstream.daemon.synthetic.synth import SynthSpec, write_job

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


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(0, 60), max_size=120), min_size=1, max_size=4),
       st.integers(1, 40), st.integers(0, 20), st.sampled_from([1, 2, 3, 8]))
@example(blocks=[[5], [3, 4, 6], [6]], size=2, slack=20, most_runs=8)  # a tie across runs
def test_reorder_of_sorted_runs_one_per_process(blocks: list[list[int]], size: int,
                                               slack: int, most_runs: int) -> None:
    """A table stored as one sorted block per process (each starting back at the beginning
    of time), with ties across blocks: a stable sort, whatever the run limit."""
    starts = [s for block in blocks for s in sorted(block)]
    window = _displaced(starts) + slack
    saved = presort._MOST_RUNS
    presort._MOST_RUNS = most_runs
    try:
        out = list(reorder(iter(_chunks(starts, size)), window, size))
    finally:
        presort._MOST_RUNS = saved
    got = np.concatenate(out) if out else np.empty(0, _DTYPE)
    assert all(len(c) <= size for c in out)
    assert got["rowid"].tolist() == sorted(range(len(starts)), key=lambda i: starts[i])


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
    assert window == window_of(bounds, 100)  # the reader's int64 columns: the same window
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


@pytest.mark.parametrize("max_window", [32768, 1])
def test_conversion_bytes_do_not_depend_on_presort_or_the_reader(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_window: int) -> None:
    """Storage order with a reorder buffer, SQLite's sort (``presort = false``, or a window
    over the limit), in-process or in the reader: the same bytes."""
    job = write_job(tmp_path / "job", SynthSpec(ranks=1, steps=6, seed=3))
    with open_export(job[0]) as export:  # the synthetic model stores rows out of order
        assert reorder_window(export.connection, "CUPTI_ACTIVITY_KIND_KERNEL", "start") > 0
    monkeypatch.setattr(sources, "_READER_MIN_ROWS", 0)
    monkeypatch.setattr(presort, "MAX_WINDOW", max_window)
    outs = []
    for use_reader, use_presort in (("1", "1"), ("0", "1"), ("1", "0"), ("0", "0")):
        settings = load_settings(None, {"reader": use_reader == "1",
                                        "presort": use_presort == "1"}, environ={})
        out = tmp_path / f"out{use_reader}{use_presort}"
        convert([str(p) for p in job], out, settings)
        outs.append(b"".join(out.with_suffix(s).read_bytes() for s in (".prv", ".pcf", ".row")))
    assert all(o == outs[0] for o in outs[1:])


@pytest.mark.parametrize("use_reader", [True, False], ids=["reader", "in-process"])
def test_the_presort_setting_reaches_every_chunk_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_reader: bool) -> None:
    """``presort = false`` never plans a storage-order scan, in-process or in the reader."""
    job = write_job(tmp_path / "job", SynthSpec(ranks=1, steps=2, seed=5))
    monkeypatch.setattr(sources, "_READER_MIN_ROWS", 0)
    planned: list[str] = []
    real_plan = tables.scan_plan

    def spy(export: Export, kind: str) -> tuple[str, str, str, str] | None:
        planned.append(kind)
        return real_plan(export, kind)

    monkeypatch.setattr(tables, "scan_plan", spy)
    for on in (False, True):
        planned.clear()
        settings = load_settings(None, {"reader": use_reader, "presort": on}, environ={})
        convert([str(p) for p in job], tmp_path / f"out{on}", settings)
        assert bool(planned) is on
