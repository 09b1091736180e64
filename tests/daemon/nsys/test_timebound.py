"""The trusted times of an export: its own session (start + recorded length + margin) where it
records one, the sampled median +- 7 days only where it does not; never a row inside the
session dropped, however many rows are hostile."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.config import load_settings
from prvstream.daemon.kinds.registry import TABLE_KINDS
from prvstream.daemon.nsys.export import open_export
from prvstream.daemon.nsys.timebound import (
    BOUND_MARGIN_NS,
    CLOCK_SLACK_NS,
    SANE_NS,
    _sampled_ids,
    _sampled_rowids_sql,
    session_margin,
)
from prvstream.daemon.stream.batch import convert
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from tests.conftest import real_export_params
from tests.prv_check import validate

DAY = 86_400 * 10**9
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


@pytest.fixture(scope="module")
def small_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_job(tmp_path_factory.mktemp("bound"), SynthSpec(ranks=1, steps=3, seed=5))[0]


def _session_start(path: Path) -> int:
    con = sqlite3.connect(path)
    (sysclk,) = con.execute("SELECT systemClockNs FROM TARGET_INFO_SESSION_START_TIME"
                            ).fetchone()
    con.close()
    return int(sysclk)


def _with(src: Path, dest: Path, *statements: str, duration: object = None) -> Path:
    """A copy of ``src`` changed by ``statements``, with an ANALYSIS_DETAILS row recording a
    session of ``duration`` (none when None: the table is absent)."""
    shutil.copyfile(src, dest)
    con = sqlite3.connect(dest)
    if duration is not None:
        start = _session_start(dest)
        con.execute("CREATE TABLE ANALYSIS_DETAILS (globalVid INTEGER, duration INTEGER, "
                    "startTime INTEGER, stopTime INTEGER)")
        stop = min(start + duration, 2**63 - 1) if isinstance(duration, int) else None
        con.execute("INSERT INTO ANALYSIS_DETAILS VALUES (?, ?, ?, ?)",
                    (1 << 48, duration, start, stop))
    for sql in statements:
        con.execute(sql)
    con.commit()
    con.close()
    return dest


def _convert(export: Path, out: Path) -> tuple[dict[str, int], int]:
    """(hostile counts of the one report, end time of the valid trace)."""
    result = convert([str(export)], out, load_settings(None, {}, environ={}))
    validate(out.with_name(out.name + ".prv"), globally_sorted=True)
    return result.hostile.get(export.name, {}), result.end_time


@pytest.mark.parametrize("path", real_export_params())
def test_real_exports_are_bounded_by_their_own_session(path: Path) -> None:
    with open_export(path) as export:
        duration = export.session_duration()
        assert duration is not None, "every real export records its session's length"
        start = export.meta.session_start_ns
        lo, hi = export.time_bound()
        assert (lo, hi) == (start - CLOCK_SLACK_NS, start + duration + session_margin(duration))
        for kind in TABLE_KINDS:  # every row of every data table lies inside: none dropped
            for src in export.sources(kind):
                end = src.end if src.end and export.has(src.table, src.end) else src.start
                where = f" WHERE {src.where}" if src.where else ""
                first, last = export.connection.execute(
                    f'SELECT MIN("{src.start}"), MAX(MAX("{end}"), MAX("{src.start}")) '
                    f'FROM "{src.table}"{where}').fetchone()
                if first is not None:
                    assert lo <= first and last <= hi, (src.table, first, last, lo, hi)


def test_a_session_longer_than_seven_days_keeps_its_far_rows(
        tmp_path: Path, small_export: Path) -> None:
    (n,) = sqlite3.connect(small_export).execute(f"SELECT COUNT(*) FROM {KERNEL}").fetchone()
    late = (f"UPDATE {KERNEL} SET start = start + {9 * DAY}, end = end + {9 * DAY} "
            f"WHERE rowid > (SELECT MAX(rowid) FROM {KERNEL}) * 6 / 10")
    (n_late,) = sqlite3.connect(
        _with(small_export, tmp_path / "probe.sqlite", late)).execute(
        f"SELECT COUNT(*) FROM {KERNEL} WHERE start > (SELECT MIN(start) FROM {KERNEL}) "
        f"+ {8 * DAY}").fetchone()
    assert 0 < n_late < n // 2
    long = _with(small_export, tmp_path / "long.sqlite", late, duration=10 * DAY)
    hostile, end = _convert(long, tmp_path / "long")
    assert hostile == {}, "rows inside a recorded 10-day session were dropped"
    assert end > 9 * DAY
    # without a recorded length the sampled bound (median +- 7 days) loses them, counted
    sampled = _with(small_export, tmp_path / "sampled.sqlite", late)
    hostile, end = _convert(sampled, tmp_path / "sampled")
    assert hostile.pop("kernel dropped") == n_late
    assert set(hostile) <= {"comm dropped"}, hostile  # and their launch links
    assert end < DAY


@pytest.mark.parametrize("share", [6, 9])
def test_most_rows_hostile_lose_no_row_inside_the_session(
        tmp_path: Path, small_export: Path, share: int) -> None:
    """``share`` tenths of the kernel and runtime rows start at 2^62 or INT64_MIN: the sampled
    median is hostile, the recorded session is not."""
    statements = [f"UPDATE {table} SET start = {value} WHERE rowid % 10 < {share}"
                  for table, value in ((KERNEL, 2**62),
                                       ("CUPTI_ACTIVITY_KIND_RUNTIME", -(2**63)))]
    probe = sqlite3.connect(_with(small_export, tmp_path / "probe.sqlite", *statements))
    counts = {kind: probe.execute(f"SELECT COUNT(*) FROM {table} WHERE rowid % 10 < {share}"
                                  ).fetchone()[0]
              for kind, table in (("kernel", KERNEL), ("runtime",
                                                       "CUPTI_ACTIVITY_KIND_RUNTIME"))}
    probe.close()
    clean_end = _convert(small_export, tmp_path / "clean")[1]
    export = _with(small_export, tmp_path / "in.sqlite", *statements, duration=DAY)
    with open_export(export) as opened:
        assert opened.meta.clock_anchor == "system_clock"
        assert opened.time_bound()[0] == _session_start(export) - CLOCK_SLACK_NS
    hostile, end = _convert(export, tmp_path / "out")
    for kind, n in counts.items():
        assert hostile.pop(f"{kind} dropped") == n
    assert set(hostile) <= {"comm dropped"}, hostile  # the launch links of those rows
    assert end <= clean_end


@pytest.mark.parametrize("duration", [0, -5, 2**63 - 1, "zz", 400 * DAY])
def test_a_recorded_length_that_is_not_one_falls_back_to_the_sample(
        tmp_path: Path, small_export: Path, duration: object) -> None:
    with open_export(_with(small_export, tmp_path / "odd.sqlite", duration=duration)) as odd, \
            open_export(small_export) as plain:
        assert odd.session_duration() is None
        assert plain.session_duration() is None
        assert odd.time_bound() == plain.time_bound()
        lo, hi = plain.time_bound()
        assert hi - lo <= 2 * BOUND_MARGIN_NS and lo >= -SANE_NS and hi <= SANE_NS


def test_a_length_about_other_events_is_not_trusted(tmp_path: Path, small_export: Path) -> None:
    """A recorded length that holds none of the sampled rows is not this session's: the
    sampled bound is used, and nothing is dropped."""
    shift = [f"UPDATE {t} SET start = start + {3600 * 10**9}, end = end + {3600 * 10**9}"
             for t in (KERNEL, "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
                       "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
                       "NVTX_EVENTS", "OSRT_API")]
    export = _with(small_export, tmp_path / "late.sqlite", *shift, duration=10**6)
    with open_export(export) as opened:
        assert opened.session_duration() == 10**6
        lo, hi = opened.time_bound()
        assert hi - lo > DAY
    assert _convert(export, tmp_path / "out")[0] == {}


@pytest.mark.parametrize(("column", "value"), [
    ("utcEpochNs", 2**63 - 1), ("utcEpochNs", -(2**63)), ("utcEpochNs", -1),
    ("systemClockNs", 2**63 - 1), ("systemClockNs", -(2**63)), ("systemClockNs", 2**62)])
def test_an_impossible_session_clock_is_ignored(
        tmp_path: Path, small_export: Path, column: str, value: int) -> None:
    """A session start no clock can show (negative, 2^62 ns and beyond) is not believed: the
    trace is the export's without it, with every row kept (it used to overflow int64)."""
    export = _with(small_export, tmp_path / "odd.sqlite",
                   f"UPDATE TARGET_INFO_SESSION_START_TIME SET {column} = {value}",
                   duration=DAY)
    with open_export(export) as opened:
        assert value not in (opened.meta.utc_epoch_ns, opened.meta.system_clock_ns)
        lo, hi = opened.time_bound()
        assert -SANE_NS <= lo <= opened.meta.first_ns <= opened.meta.last_ns <= hi <= SANE_NS
    hostile, end = _convert(export, tmp_path / "out")
    assert hostile == {}
    assert 0 < end < DAY


def _sampled(path: Path) -> tuple[list[int], list[int]]:
    """(the samples of every table together, the samples of each table by its own one-table
    statement) of the export at ``path``."""
    export = open_export(path)
    try:
        seen = {s.table: s for k in TABLE_KINDS for s in export.sources(k)}
        together = sorted(export._sample_all(list(seen.values())))
        alone = sorted(v for s in seen.values() for v in export._sample_starts(s))
    finally:
        export.close()
    return together, alone


@pytest.mark.parametrize("path", real_export_params())
def test_all_tables_sampled_together_are_the_rows_each_table_gives_alone(path: Path) -> None:
    together, alone = _sampled(path)
    assert together == alone and together


@pytest.mark.parametrize("rowid", [
    "x * 7 + 3",  # gaps between rowids
    "x - 1000000",  # negative rowids
    f"x + {2**62}",  # large rowids
    f"CASE WHEN x = 1 THEN -{2**62} ELSE x END",  # a range whose arithmetic overflows
])
def test_sampled_rowids_are_sqlites_own(tmp_path: Path, small_export: Path,
                                        rowid: str) -> None:
    """The rowids computed in Python are the ones SQLite's integer arithmetic picks, and a
    range too wide for it is left to SQLite's own statement."""
    new = rowid.replace("x", "(-rowid)")
    path = _with(small_export, tmp_path / "r.sqlite",
                 f"UPDATE {KERNEL} SET rowid = -rowid",  # out of the way of the new rowids
                 f"UPDATE {KERNEL} SET rowid = {new}")
    together, alone = _sampled(path)
    assert together == alone and together


@settings(max_examples=200, deadline=None)
@given(lo=st.integers(-2**62, 2**62), span=st.one_of(
    st.integers(0, 200), st.integers(0, 1100), st.integers(0, 10**7),
    st.integers(0, 2**63 // 65 + 10)))
def test_the_sampled_rowids_condition_picks_the_sampled_rowids(lo: int, span: int) -> None:
    """The rowid condition of the samples statement holds for exactly ``_sampled_ids``: of
    the sampled rowids, their neighbours and both ends, SQLite keeps the sampled ones."""
    hi = min(lo + span, 2**63 - 1)
    sampled = {int(r) for r in _sampled_ids(lo, hi).split(",")}
    near = {r + e for r in sampled for e in (-1, 0, 1)} | {lo - 1, lo, hi, hi + 1}
    near = {r for r in near if -2**63 <= r < 2**63}
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (start INTEGER)")
    con.executemany("INSERT INTO t (rowid, start) VALUES (?, 0)", [(r,) for r in near])
    picked = {r for (r,) in con.execute(f"SELECT rowid FROM t WHERE {_sampled_rowids_sql(lo, hi)}")}
    con.close()
    assert picked == sampled


def test_the_sampled_rowids_condition_on_every_rowid_of_small_ranges() -> None:
    """Every range of up to 1,100 rowids (sampled whole, by reading the range, by a list),
    each rowid in it present: the condition keeps exactly the sampled ones."""
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (start INTEGER)")
    for lo in (1, -350):
        con.execute("DELETE FROM t")
        con.executemany("INSERT INTO t (rowid, start) VALUES (?, 0)",
                        [(r,) for r in range(lo - 1, lo + 1102)])
        for span in range(1100):
            sampled = {int(r) for r in _sampled_ids(lo, lo + span).split(",")}
            cond = _sampled_rowids_sql(lo, lo + span)
            assert {r for (r,) in con.execute(f"SELECT rowid FROM t WHERE {cond}")} == sampled
    con.close()
