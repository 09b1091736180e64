"""``prvstream bench``: generate a synthetic job, convert it, append it live; print the rates.

Each phase runs in its own child process so that its peak RSS (``ru_maxrss`` of that child,
plus the peaks of the processes it starts: the reader) is
its own: ``synth`` writes the job, ``convert`` turns it into one trace and summary, and the live
path appends every report to a growing trace the way the daemon does (readiness check, append,
summary, journal commit), timing each report from "in place" to "committed", then finalizes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec

from prvstream.daemon.config import Settings
from prvstream.daemon.synthetic.procmem import wait_with_peak
from prvstream.daemon.synthetic.synth import SynthSpec, steps_for_rows
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger

__all__ = ["BenchReport", "live_child"]

log = get_logger(__name__)


@dataclass
class _Child:
    """One finished child process: wall time, peak RSS (MiB; with its helpers'), its stdout."""

    seconds: float
    peak_rss_mib: float
    stdout: str


@dataclass
class BenchReport:
    """Everything ``prvstream bench`` measured."""

    rows: int
    reports: int
    synth: _Child
    convert: _Child
    records: int
    prv_bytes: int
    live: _Child
    lags: list[float]
    finalize_s: float
    floor_s: float | None


def _run_child(cmd: list[str], what: str, env: dict[str, str] | None = None) -> _Child:
    """Run ``cmd``; raise ``PrvstreamError`` with its output when it fails."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        peak_kib, _ = wait_with_peak(proc)  # the reader process's peak counts too
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if proc.returncode != 0:
        tail = (stderr or stdout).strip().splitlines()[-5:]
        raise PrvstreamError(f"bench: the {what} step failed (exit {proc.returncode}): "
                             + " | ".join(tail))
    return _Child(seconds, peak_kib / 1024, stdout)


def _prv_records(prv: Path) -> int:
    with open(prv, "rb") as fh:
        return sum(buf.count(b"\n") for buf in iter(lambda: fh.read(1 << 24), b"")) - 1


def _export_tables(exports: list[Path]) -> dict[Path, tuple[list[str], int]]:
    """Per export: its time-ordered tables (those with a ``start`` column) and their rows."""
    import sqlite3

    found = {}
    for path in exports:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            names = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
            timed = [n for n in names
                     if "start" in {c[1] for c in conn.execute(f"PRAGMA table_info({n})")}]
            rows = sum(conn.execute(f"SELECT count(*) FROM {n}").fetchone()[0] for n in timed)
        finally:
            conn.close()
        found[path] = (timed, rows)
    return found


def _floor(tables: dict[Path, tuple[list[str], int]]) -> float | None:
    """Seconds the ``sqlite3`` shell takes to read the same rows ``ORDER BY start``."""
    shell = shutil.which("sqlite3")
    if shell is None:
        return None
    started = time.perf_counter()
    for path, (names, _) in tables.items():
        sql = "; ".join(f"SELECT * FROM {n} ORDER BY start" for n in names) + ";"
        subprocess.run([shell, f"file:{path}?mode=ro", sql], stdout=subprocess.DEVNULL,
                       check=True)
    return time.perf_counter() - started


def live_child(argv: list[str]) -> None:
    """In a child: append every export of a job like the daemon does; print JSON timings."""
    from prvstream.daemon.live.journal import JobJournal
    from prvstream.daemon.live.livetrace import LiveTrace
    from prvstream.daemon.service.readiness import Ready, check_export, report_identity

    job_dir, out_dir, state_dir, settings_json = argv
    settings = msgspec.json.decode(settings_json, type=Settings)
    journal = JobJournal.open(state_dir, job_dir, root=job_dir)
    journal.lock()
    lags = []
    try:
        trace = LiveTrace(journal, Path(out_dir), "bench", settings)
        trace.recover()
        journal.commit()
        for path in sorted(Path(job_dir).glob("*.sqlite")):
            started = time.perf_counter()
            verdict = check_export(path)
            if not isinstance(verdict, Ready):
                raise PrvstreamError(f"bench: {path} is not a complete export ({verdict})")
            trace.append(path, report_identity(path))
            lags.append(time.perf_counter() - started)
        started = time.perf_counter()
        trace.finalize()
        finalize_s = time.perf_counter() - started
    finally:
        journal.unlock()
    sys.stdout.write(json.dumps({"lags": lags, "finalize_s": finalize_s}) + "\n")


def measure(rows: int, ranks: int, work: Path, settings: Settings,
            config: str | None = None) -> BenchReport:
    """Run the three phases in ``work`` and collect their numbers."""
    spec = SynthSpec(ranks=ranks)
    steps = steps_for_rows(max(1, rows // ranks), spec)
    job = work / "job"
    py = sys.executable
    common = ["--log-level", "error", *(["--config", config] if config else [])]
    synth = _run_child([py, "-m", "prvstream.daemon", "synth", str(job), "--ranks", str(ranks),
                        "--steps", str(steps), *common], "synth")
    exports = sorted(job.glob("*.sqlite"))
    tables = _export_tables(exports)
    total = sum(n for _, n in tables.values())
    out = work / "convert" / "trace"
    dask = ["--dask", settings.dask] if settings.dask else []  # convert on the cluster
    convert = _run_child([py, "-m", "prvstream.daemon", "convert", str(job), "-o", str(out),
                          "--no-progress", *dask, *common], "convert")
    prv = out.with_name("trace.prv")
    records, prv_bytes = _prv_records(prv), prv.stat().st_size
    live_settings = msgspec.structs.replace(settings, out_dir="", state_dir=str(work / "state"))
    live = _run_child([py, "-c", "import sys; "
                       "from prvstream.daemon.synthetic.bench import live_child; "
                       "live_child(sys.argv[1:])", str(job), str(work / "live"),
                       str(work / "state"), msgspec.json.encode(live_settings).decode()],
                      "live append")
    timings = json.loads(live.stdout.strip().splitlines()[-1])
    floor = _floor(tables)
    return BenchReport(rows=total, reports=len(exports), synth=synth, convert=convert,
                       records=records, prv_bytes=prv_bytes, live=live, lags=timings["lags"],
                       finalize_s=timings["finalize_s"], floor_s=floor)


def format_report(r: BenchReport, settle: float) -> str:
    """The lines ``prvstream bench`` prints."""
    lags = sorted(r.lags)
    med = lags[len(lags) // 2]
    lines = [
        f"prvstream bench: {r.reports} report(s), {r.rows:,} rows (load {os.getloadavg()[0]:.2f},"
        f" {os.cpu_count()} cpus)",
        f"synth:   {r.synth.seconds:8.2f} s  {r.rows / r.synth.seconds:12,.0f} rows/s"
        f"  peak RSS {r.synth.peak_rss_mib:.1f} MiB",
        f"convert: {r.convert.seconds:8.2f} s  {r.records / r.convert.seconds:12,.0f} records/s"
        f"  {r.rows / r.convert.seconds:,.0f} rows/s  "
        f"{r.prv_bytes / 1e6 / r.convert.seconds:.1f} MB/s written"
        f"  peak RSS {r.convert.peak_rss_mib:.1f} MiB  ({r.records:,} records,"
        f" {r.prv_bytes / 1e6:.1f} MB .prv, summary in the same pass)",
    ]
    if r.floor_s is not None:
        lines.append(f"floor:   {r.floor_s:8.2f} s  sqlite3 shell reading the same rows ORDER BY"
                     f" start; convert = {r.convert.seconds / r.floor_s:.1f}x the floor")
    lines.append(
        f"live:    lag per report min {lags[0]:.2f} s, median {med:.2f} s, max {lags[-1]:.2f} s"
        f" (report in place -> trace, summary and journal committed; the daemon adds its"
        f" settle time, {settle:g} s); finalize {r.finalize_s:.2f} s;"
        f" peak RSS {r.live.peak_rss_mib:.1f} MiB")
    return "\n".join(lines) + "\n"
