"""Hostile timestamps (``end = INT64_MAX``, ``start = 2^62``, negative, ``end < start``, no
``end`` column): bounded memory, no traceback, a valid trace or a one-line refusal, and every
dropped or clamped row counted in the convert summary and the job's ``status.json``."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.daemon.daemon_proc import DaemonProcess, job_status, place_atomically
from tests.faults.helpers import live_trace, wait_reports
from tests.prv_check import validate

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)
#: peak RSS allowed to one conversion of a small hostile export (a clean one takes ~40 MB;
#: before the bound, one INT64_MAX end took 23 GB)
RSS_LIMIT_KB = 300 * 1024
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"

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


_TABLES = st.sampled_from([KERNEL, "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
                           "NVTX_EVENTS"])
_VALUES = st.one_of(st.sampled_from([I64_MAX, I64_MIN, 2**62, -(2**62), -1, 0,
                                     -5_000_000_000]),
                    st.integers(min_value=I64_MIN, max_value=I64_MAX))
_CHANGE = st.tuples(_TABLES, st.sampled_from(["start", "end", "end<start"]), _VALUES,
                    st.integers(min_value=1, max_value=9))


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(_CHANGE, min_size=1, max_size=3))
def test_random_hostile_times_bounded_memory_and_a_valid_trace(
        tmp_path_factory: pytest.TempPathFactory, clean_export: Path,
        changes: list[tuple[str, str, int, int]]) -> None:
    work = tmp_path_factory.mktemp("case")
    sql = []
    for table, column, value, every in changes:
        what = "end = start - 1000" if column == "end<start" else f"{column} = {value}"
        sql.append(f"UPDATE {table} SET {what} WHERE rowid % {every} = 0")
    export = _hostile(clean_export, work / "in.sqlite", *sql)
    status, stdout = _check(export, work / "out")
    if status == 0 and any(c[1] == "end<start" for c in changes):
        assert "clamped" in stdout or "dropped" in stdout


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
    assert daemon.alive
    assert daemon.terminate() == 0
