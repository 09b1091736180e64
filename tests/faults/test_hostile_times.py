"""Hostile timestamps (``end = INT64_MAX``, ``start = 2^62``, negative, ``end < start``, no
``end`` column): bounded memory, no traceback, a valid trace or a one-line refusal, and every
dropped or clamped row counted in the convert summary and the job's ``status.json``."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from prvstream.daemon.kinds.nvtx import NVTX_WHERE
from prvstream.daemon.nsys.timebound import CLOCK_SLACK_NS, session_margin
from tests.daemon.daemon_proc import DaemonProcess, job_status, place_atomically
from tests.faults.helpers import live_trace, wait_reports
from tests.prv_check import validate

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)
#: peak RSS allowed to one conversion of a small hostile export (a clean one takes ~40 MB;
#: before the bound, one INT64_MAX end took 23 GB)
RSS_LIMIT_KB = 300 * 1024
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"

#: run ``prvstream convert`` in a child of a fresh interpreter that reports the child's peak
#: RSS; the address space is capped so that a regression fails instead of swapping the machine
_MEASURE = """
import resource, subprocess, sys
def cap():
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
done = subprocess.run([sys.executable, "-m", "prvstream.daemon", "convert", *sys.argv[1:]],
                      capture_output=True, text=True, preexec_fn=cap)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(done.returncode)
"""


@pytest.fixture(scope="module")
def clean_export(synth_sources: list[Path]) -> Path:
    return synth_sources[0]


def _hostile(src: Path, dest: Path, *statements: str) -> Path:
    shutil.copyfile(src, dest)
    con = sqlite3.connect(dest)
    for sql in statements:
        con.execute(sql)
    con.commit()
    con.close()
    return dest


def _convert(export: Path, out: Path) -> tuple[int, str, str, int]:
    """(exit status, stdout, stderr, peak RSS in KB) of ``prvstream convert``."""
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(export), "-o", str(out),
                           "--no-progress"], capture_output=True, text=True, timeout=120,
                          check=False)
    *lines, rss = done.stdout.rstrip("\n").split("\n")
    return done.returncode, "\n".join(lines), done.stderr, int(rss)


def _check(export: Path, out: Path) -> tuple[int, str]:
    """Bounded memory, no traceback, and a valid trace or a one-line refusal."""
    status, stdout, stderr, rss = _convert(export, out)
    assert rss < RSS_LIMIT_KB, f"peak RSS {rss} KB"
    assert "Traceback" not in stdout + stderr, stderr
    if status == 0:
        validate(out.with_name(out.name + ".prv"), globally_sorted=True)
    else:
        assert len([ln for ln in stderr.splitlines() if "error" in ln.lower()]) == 1, stderr
    return status, stdout


def test_int64_max_end_and_2_62_starts_are_dropped_and_counted(
        tmp_path: Path, clean_export: Path) -> None:
    export = _hostile(clean_export, tmp_path / "in.sqlite",
                      f"UPDATE {KERNEL} SET end = {I64_MAX} WHERE rowid = "
                      f"(SELECT MIN(rowid) FROM {KERNEL})",
                      f"UPDATE {KERNEL} SET start = {2**62} WHERE rowid % 7 = 3")
    n62 = sqlite3.connect(export).execute(
        f"SELECT COUNT(*) FROM {KERNEL} WHERE start = {2**62}").fetchone()[0]
    status, stdout = _check(export, tmp_path / "out")
    assert status == 0
    assert "in.sqlite: " in stdout
    assert f"{n62 + 1} kernel dropped" in stdout
    clean_status, _ = _check(clean_export, tmp_path / "clean")
    assert clean_status == 0
    # the span is the clean export's: no hostile time reached the trace
    spans = [validate(tmp_path / f"{n}.prv").end_time for n in ("out", "clean")]
    assert spans[0] <= spans[1]


def test_missing_end_column_is_refused_and_counted(tmp_path: Path, clean_export: Path) -> None:
    export = _hostile(clean_export, tmp_path / "in.sqlite",
                      f'ALTER TABLE {KERNEL} DROP COLUMN "end"')
    n = sqlite3.connect(export).execute(f"SELECT COUNT(*) FROM {KERNEL}").fetchone()[0]
    status, stdout = _check(export, tmp_path / "out")
    assert status == 0
    assert f"in.sqlite: {n} kernel no end column" in stdout, stdout


#: (kind, table, the kind's rows in it)
_TABLES = st.sampled_from([("kernel", KERNEL, "1"), ("runtime", "CUPTI_ACTIVITY_KIND_RUNTIME", "1"),
                           ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY", "1"),
                           ("nvtx", "NVTX_EVENTS", NVTX_WHERE)])
_VALUES = st.one_of(st.sampled_from([I64_MAX, I64_MIN, 2**62, -(2**62), -1, 0,
                                     -5_000_000_000, "'x'"]),
                    st.integers(min_value=I64_MIN, max_value=I64_MAX))
#: (kind, table, rows, column, value, every, share): rows with rowid % every < share change
_CHANGE = st.tuples(_TABLES, st.sampled_from(["start", "end", "end<start"]), _VALUES,
                    st.integers(min_value=1, max_value=9), st.integers(min_value=1, max_value=9))


def _with_session(src: Path, dest: Path) -> tuple[Path, int, int]:
    """A copy of ``src`` recording its session's length (ANALYSIS_DETAILS, as nsys does), and
    the times that session trusts: its start less the slack to its end plus the margin."""
    shutil.copyfile(src, dest)
    con = sqlite3.connect(dest)
    (start,) = con.execute("SELECT systemClockNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    (last,) = con.execute(f"SELECT MAX(end) FROM {KERNEL}").fetchone()
    duration = last - start + 10**9
    con.execute("CREATE TABLE ANALYSIS_DETAILS (globalVid INTEGER, duration INTEGER, "
                "startTime INTEGER, stopTime INTEGER)")
    con.execute("INSERT INTO ANALYSIS_DETAILS VALUES (?, ?, ?, ?)",
                (1 << 48, duration, start, start + duration))
    con.commit()
    con.close()
    return dest, start - CLOCK_SLACK_NS, start + duration + session_margin(duration)


def _expected(export: Path, lo: int, hi: int) -> Counter[str]:
    """Rows each kind must lose (outside the session) or clamp (an end before its start): the
    rest, inside the session, must all be kept."""
    con = sqlite3.connect(export)
    want: Counter[str] = Counter()
    for kind, table, rows in (("kernel", KERNEL, "1"), ("runtime", "CUPTI_ACTIVITY_KIND_RUNTIME",
                                                        "1"),
                              ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY", "1"),
                              ("nvtx", "NVTX_EVENTS", NVTX_WHERE)):
        out = f"(start < {lo} OR start > {hi} OR COALESCE(end, {lo}) > {hi})"
        back = "end < start" + (" AND end >= 0" if kind == "nvtx" else "")
        dropped, clamped = con.execute(
            f"SELECT SUM({out}), SUM(NOT {out} AND {back}) FROM {table} WHERE {rows}").fetchone()
        want[f"{kind} dropped"] = dropped or 0
        want[f"{kind} clamped"] = clamped or 0
    con.close()
    return +want


def _counted(stdout: str) -> Counter[str]:
    """The ``hostile`` line of convert's summary, without the launch links (``comm``) that
    follow their kernel or call out."""
    got: Counter[str] = Counter()
    for n, kind, what in re.findall(r"(\d+) (\w+) (dropped|clamped)", stdout):
        if kind != "comm":
            got[f"{kind} {what}"] += int(n)
    return got


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(_CHANGE, min_size=1, max_size=3))
@example(changes=[(("runtime", RUNTIME, "1"), "start", I64_MIN, 1, 9),
                  (("runtime", RUNTIME, "1"), "end<start", 0, 1, 9)])
def test_random_hostile_times_bounded_memory_and_a_valid_trace(
        tmp_path_factory: pytest.TempPathFactory, clean_export: Path,
        changes: list[tuple[tuple[str, str, str], str, int | str, int, int]]) -> None:
    """Up to every row hostile: bounded RSS, no traceback, a valid trace or a one-line
    refusal, and exactly the rows outside the recorded session dropped (none inside)."""
    work = tmp_path_factory.mktemp("case")
    export, lo, hi = _with_session(clean_export, work / "in.sqlite")
    con = sqlite3.connect(export)
    for (_, table, rows), column, value, every, share in changes:
        what = "end = start - 1000" if column == "end<start" else f"{column} = {value}"
        con.execute(f"UPDATE {table} SET {what} WHERE ({rows}) AND rowid % {every} < {share}")
    con.commit()
    # text, or a float where SQLite's integer overflowed (``start - 1000`` of INT64_MIN)
    not_integers = any(con.execute(
        f"SELECT 1 FROM {table} WHERE typeof(start) NOT IN ('integer', 'null') "
        f"OR typeof(end) NOT IN ('integer', 'null') LIMIT 1").fetchone()
        for (_, table, _), *_ in changes)
    con.close()
    status, stdout = _check(export, work / "out")
    if not_integers:
        return  # where nsys writes integers: a one-line refusal (checked) or skipped rows
    assert status == 0
    assert _counted(stdout) == _expected(export, lo, hi), stdout


def test_a_daemon_counts_hostile_rows_in_status_json(
        tmp_path: Path, synth_sources: list[Path],
        start_daemon: Callable[..., DaemonProcess]) -> None:
    job = tmp_path / "root" / "job"
    job.mkdir(parents=True)
    daemon = start_daemon(job.parent)
    hostile = _hostile(synth_sources[0], tmp_path / "h.sqlite",
                       f"UPDATE {KERNEL} SET end = {I64_MAX} WHERE rowid = "
                       f"(SELECT MIN(rowid) FROM {KERNEL})",
                       f"UPDATE {KERNEL} SET start = {2**62} WHERE rowid % 7 = 3")
    n62 = sqlite3.connect(hostile).execute(
        f"SELECT COUNT(*) FROM {KERNEL} WHERE start = {2**62}").fetchone()[0]
    place_atomically(hostile, job / "hostile.sqlite")
    place_atomically(synth_sources[1], job / "clean.sqlite")
    wait_reports(daemon, job, 2)
    status = job_status(job)
    assert status["state"] == "ok", status
    assert list(status["hostile"]) == ["hostile.sqlite"], json.dumps(status)
    assert status["hostile"]["hostile.sqlite"]["kernel dropped"] == n62 + 1
    validate(live_trace(job))
    assert daemon.alive()
    assert daemon.terminate() == 0
