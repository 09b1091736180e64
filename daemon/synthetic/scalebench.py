"""``prvstream bench --scale MODE``: many small reports (batch and daemon) and Dask against one
process, every measured command a child process (wall time, peak RSS of its process tree).

- ``many``: ``convert`` of N small exports against one export with as many rows (paired,
  interleaved runs): the cost per record of the fixed per-report work (target: at most 2x),
  and that cost split into start-up, per report and per record (``costfit``);
- ``daemon``: N small reports dropped at once into a watched job: time until all are
  committed against a batch ``convert`` of the same, the append cost against the tasks
  already in the trace, the daemon's peak RSS;
- ``tiny``: N tiny reports and 10 N into a watched job: the daemon's peak RSS for each;
- ``dask``: a job of R ranks, ``convert`` in one process against ``--dask SPEC``, the range
  merges' write rate; the live job built by ``watch --once``, its ``finalize`` in one process
  against ``--dask SPEC``, and the coordinator's append bandwidth of ``watch --dask``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prvstream.daemon.synthetic.costfit import fit_costs
from prvstream.daemon.synthetic.procmem import wait_with_peak
from prvstream.daemon.synthetic.synth import SynthSpec, export_name, steps_for_rows, write_export
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger

__all__ = ["MODES", "ScaleArgs", "exports_once", "run_scale"]

log = get_logger(__name__)

MODES = ("many", "daemon", "tiny", "dask")
_PRVSTREAM = [sys.executable, "-m", "prvstream.daemon"]


@dataclass
class ScaleArgs:
    """What a scale benchmark is asked for."""

    mode: str
    #: many/daemon/tiny: reports (0: 400 for many, 1,000 otherwise)
    reports: int = 0
    #: dask: ranks and rows of the whole job
    ranks: int = 16
    rows: int = 3_200_000
    #: dask: the cluster (daemon: run the daemon with it, when given)
    spec: str = ""
    reps: int = 3
    fan_in: int = 0
    batch: bool = True
    timeout: float = 3600.0


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRVSTREAM_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _run(cmd: list[str], log_file: Path, timeout: float) -> tuple[float, float]:
    """Run ``prvstream CMD`` to completion: (wall seconds, peak RSS MiB of its tree)."""
    with log_file.open("ab") as out:
        began = time.perf_counter()
        proc = subprocess.Popen([*_PRVSTREAM, *cmd], stdout=out, stderr=subprocess.STDOUT,
                                env=_env())
        peak_kib, timed_out = wait_with_peak(proc, timeout)
        wall = time.perf_counter() - began
    if timed_out or proc.returncode != 0:
        raise PrvstreamError(f"bench: prvstream {cmd[0]} failed ({proc.returncode}); see "
                             f"{log_file}")
    return wall, peak_kib / 1024


def _events(log_file: Path, name: str) -> list[dict[str, Any]]:
    out = []
    for line in log_file.read_text(errors="replace").splitlines():
        if line.startswith("{") and f'"{name}"' in line:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("event") == name:
                out.append(event)
    return out


def _convert(inputs: list[str], out: Path, log_file: Path, timeout: float, *extra: str
             ) -> tuple[float, float]:
    for old in out.parent.glob(out.name + ".*"):  # a rerun's outputs
        old.unlink()
    return _run(["convert", *inputs, "-o", str(out), "--no-progress", "--log-level", "info",
                 "--log-json", *extra], log_file, timeout)


def _records(prv: Path) -> int:
    with open(prv, "rb") as fh:
        return sum(buf.count(b"\n") for buf in iter(lambda: fh.read(1 << 24), b"")) - 1


def _same(a: Path, b: Path) -> bool:
    if a.stat().st_size != b.stat().st_size:
        return False
    with open(a, "rb") as x, open(b, "rb") as y:
        while True:
            p, q = x.read(1 << 24), y.read(1 << 24)
            if p != q:
                return False
            if not p:
                return True


def exports_once(directory: Path, spec: SynthSpec) -> list[Path]:
    """Every rank's export of ``spec`` (written once: a rerun reuses them)."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for rank in range(spec.ranks):
        path = directory / export_name(spec, rank)
        if not path.exists():
            write_export(str(path) + ".tmp", spec, rank)
            os.replace(str(path) + ".tmp", path)
        out.append(path)
    return out


def _small_job(directory: Path, reports: int, layers: int = 12) -> list[Path]:
    """``reports`` one-rank exports (about 1,200 records each; ``layers=1``: about 150)."""
    return exports_once(directory, SynthSpec(ranks=reports, hosts=max(1, reports // 8), steps=1,
                                         layers=layers))


def bench_many(a: ScaleArgs, work: Path) -> dict[str, Any]:
    """Paired, interleaved runs: medians, and the range of the per-pair ratios; the same
    number of smaller reports and one of them alone as well, for ``costfit``'s split of the
    wall time into start-up, a fixed cost per report and a cost per record."""
    reports = a.reports or 400
    small = _small_job(work / f"many-{reports}", reports)
    lean = _small_job(work / f"many-{reports}-l1", reports, layers=1)
    one = SynthSpec(ranks=1)
    rows = _job_rows(small[:5]) // min(5, len(small)) * reports
    one = SynthSpec(ranks=1, steps=steps_for_rows(rows, one))
    big = exports_once(work / f"big-{rows}", one)[0]
    extra = ("--fan-in", str(a.fan_in)) if a.fan_in else ()
    times: dict[str, list[float]] = {"many": [], "one": [], "lean": [], "single": []}
    runs = {"many": ([str(small[0].parent)], extra), "one": ([str(big)], ()),
            "lean": ([str(lean[0].parent)], extra), "single": ([str(lean[0])], ())}
    loads: list[float] = []
    for _ in range(a.reps):
        loads.append(_load())
        for name, (inputs, options) in runs.items():
            times[name].append(_convert(inputs, work / f"out-{name}", work / f"{name}.log",
                                        a.timeout, *options)[0])
    records = {name: _records(work / f"out-{name}.prv") for name in runs}
    med = {name: statistics.median(t) for name, t in times.items()}
    n_small, n_big = records["many"], records["one"]
    ms, mb = med["many"], med["one"]
    per = n_big / n_small
    result: dict[str, Any] = {
        "reports": reports, "reps": a.reps, "records_many": n_small, "records_one": n_big,
        "seconds_many": round(ms, 2), "seconds_one": round(mb, 2),
        "ratio": round(ms / mb * per, 2),
        "ratio_pairs": sorted(round(x / y * per, 2) for x, y in zip(times["many"],
                                                                    times["one"],
                                                                    strict=True)),
        "fixed_ms_per_report": round((ms - n_small * mb / n_big) / reports * 1e3, 1),
        "records_lean": records["lean"], "seconds_lean": round(med["lean"], 2),
        "seconds_single": round(med["single"], 3), "load": loads}
    if reports >= 2 and records["lean"] != n_small:
        fit = fit_costs(reports=reports, many_s=ms, many_records=n_small, lean_s=med["lean"],
                        lean_records=records["lean"], single_s=med["single"], one_s=mb,
                        one_records=n_big)
        result["fit"] = {"startup_s": round(fit.startup_s, 3),
                         "fixed_ms_per_report": round(fit.fixed_s_per_report * 1e3, 2),
                         "us_per_record_many": round(fit.s_per_record_many * 1e6, 3),
                         "us_per_record_one": round(fit.s_per_record_one * 1e6, 3),
                         "fixed_ms_allowed_at_2x": round(fit.fixed_s_allowed * 1e3, 2)}
    return result


def _job_rows(exports: Sequence[Path]) -> int:
    import sqlite3

    total = 0
    for path in exports:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            names = [n for (n,) in con.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")]
            total += sum(con.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0]
                         for n in names if n.startswith(("CUPTI_", "NVTX_", "OSRT_")))
        finally:
            con.close()
    return total


def _vm_hwm_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _status(job: Path) -> dict[str, Any]:
    try:
        found: dict[str, Any] = json.loads((job / "prvstream" / "status.json").read_bytes())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return found


def _wait(cond: Callable[[], bool], timeout: float, proc: subprocess.Popen[bytes],
          log_file: Path, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None:
            raise PrvstreamError(f"bench: the daemon exited ({proc.returncode}) before "
                                 f"{what}; see {log_file}")
        if time.monotonic() > deadline:
            raise PrvstreamError(f"bench: timed out waiting for {what}; see {log_file}")
        time.sleep(0.5)


def bench_daemon(a: ScaleArgs, work: Path, *, layers: int = 12, batch: bool = True,
                 reports: int = 0) -> dict[str, Any]:
    """N small reports hard-linked at once into one watched job."""
    reports = reports or a.reports or 1000
    sources = _small_job(work / (f"daemon-src-{reports}" + ("" if layers == 12
                                                             else f"-l{layers}")),
                         reports, layers)
    base = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    job = base / "root" / "job"
    job.mkdir(parents=True)
    log_file = base / "daemon.jsonl"
    extra = ["--dask", a.spec] if a.spec else []
    with log_file.open("wb") as out:
        proc = subprocess.Popen([*_PRVSTREAM, "watch", str(job.parent), "--state",
                                 str(base / "state"), "--settle", "0.2", "--idle-finalize",
                                 "0", "--log-json", *extra], stdout=out,
                                stderr=subprocess.STDOUT, env=_env())
    try:
        _wait(lambda: bool(_events(log_file, "service_ready")), 120, proc, log_file,
              "service_ready")
        began = time.monotonic()
        for src in sources:  # all at once: complete the moment they appear
            os.link(src, job / src.name)
        peak = 0.0

        def all_in() -> bool:
            nonlocal peak
            peak = max(peak, _vm_hwm_mib(proc.pid))
            return int(_status(job).get("reports", 0)) >= reports

        _wait(all_in, a.timeout, proc, log_file, "every report committed")
        committed = time.monotonic() - began
        peak = max(peak, _vm_hwm_mib(proc.pid))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    appends = [(e.get("tasks", 0), e["seconds"]) for e in _events(log_file, "report_appended")]
    groups = [e["reports"] for e in _events(log_file, "group_committed")]
    tenth = max(1, len(appends) // 10)
    result: dict[str, Any] = {
        "reports": reports, "layers": layers, "dask": a.spec,
        "all_committed_s": round(committed, 1),
        "append_first_tenth_s": round(statistics.median(s for _, s in appends[:tenth]), 4),
        "append_last_tenth_s": round(statistics.median(s for _, s in appends[-tenth:]), 4),
        "commits": len(groups) + len(appends) - sum(groups),
        "largest_group": max(groups, default=1), "daemon_peak_rss_mib": round(peak, 1),
        "load": _load()}
    if batch:
        t_batch, _ = _convert([str(sources[0].parent)], base / "batch", base / "batch.log",
                              a.timeout)
        result.update(batch_convert_s=round(t_batch, 1), ratio=round(committed / t_batch, 2))
    return result


def bench_tiny(a: ScaleArgs, work: Path) -> dict[str, Any]:
    """Daemon peak RSS for N tiny reports and for ten times as many."""
    n = a.reports or 1000
    few = bench_daemon(a, work, layers=1, batch=False, reports=n)
    many = bench_daemon(a, work, layers=1, batch=False, reports=10 * n)
    return {"few": few, "many": many, "memory_ratio": round(
        many["daemon_peak_rss_mib"] / max(few["daemon_peak_rss_mib"], 1e-9), 2)}


def _live_job(exports: list[Path], base: Path, timeout: float, *extra: str
              ) -> tuple[Path, Path, float]:
    """A job of ``exports`` (hard links) appended by ``watch --once``, not finalized:
    (job, state, seconds)."""
    job = base / "root" / "job"
    job.mkdir(parents=True)
    for src in exports:
        os.link(src, job / src.name)
    state = base / "state"
    wall, _ = _run(["watch", str(job.parent), "--once", "--settle", "0", "--idle-finalize",
                    "0", "--state", str(state), "--log-json", *extra], base / "watch.log",
                   timeout)
    return job, state, wall


def _finalize(job: Path, state: Path, log_file: Path, timeout: float, *extra: str
              ) -> tuple[float, float]:
    return _run(["finalize", str(job), "--state", str(state), "--log-level", "info",
                 "--log-json", *extra],
                log_file, timeout)


def bench_dask(a: ScaleArgs, work: Path) -> dict[str, Any]:
    """convert, finalize and live appends: one process against ``--dask SPEC``."""
    spec = a.spec or "local:2"
    shape = SynthSpec(ranks=a.ranks, hosts=max(1, a.ranks // 4))
    shape = SynthSpec(ranks=a.ranks, hosts=max(1, a.ranks // 4),
                      steps=steps_for_rows(a.rows // a.ranks, shape))
    exports = exports_once(work / f"dask-{a.ranks}x{a.rows // a.ranks}", shape)
    inputs = [str(exports[0].parent)]
    loads = [_load()]
    t_one, rss_one = _convert(inputs, work / "one", work / "one.log", a.timeout)
    loads.append(_load())
    log_file = work / "dask.log"
    log_file.unlink(missing_ok=True)
    t_dask, rss_dask = _convert(inputs, work / "dask", log_file, a.timeout, "--dask", spec)
    loads.append(_load())
    ranges = next(iter(_events(log_file, "dask_ranges_written")), {})
    replay = next(iter(_events(log_file, "dask_model_replayed")), {})
    same = all(_same(work / f"one{e}", work / f"dask{e}") for e in (".prv", ".pcf", ".row"))
    size = (work / "one.prv").stat().st_size
    result: dict[str, Any] = {
        "ranks": a.ranks, "rows": a.rows, "spec": spec, "prv_mb": round(size / 1e6, 1),
        "records": _records(work / "one.prv"),
        "convert_one_process_s": round(t_one, 1), "convert_dask_s": round(t_dask, 1),
        "convert_speedup": round(t_one / t_dask, 2),
        "convert_one_peak_mib": round(rss_one, 1), "convert_dask_peak_mib": round(rss_dask, 1),
        "ranges_written_mb_per_s": ranges.get("mb_per_s"),
        "ranges_written_s": ranges.get("seconds"),
        "model_replay_s": replay.get("seconds"), "model_replay_cpu_s": replay.get("cpu_s"),
        "convert_byte_identical": same}
    # finalize: one live job, kept aside while the one-process finalize runs on it
    base = work / "live"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    job, state, t_live = _live_job(exports, base, a.timeout, "--dask", spec)
    appends = _events(base / "watch.log", "report_appended")
    live_mb = (job / "prvstream" / "job.prv").stat().st_size / 1e6
    append_s = sum(e.get("seconds", 0.0) for e in appends)
    # kept aside: the trace by a hard link (the journal knows its inode), the rest copied
    prv = job / "prvstream" / "job.prv"
    kept, kept_prv = work / "live-kept", work / "live-committed.prv"
    shutil.rmtree(kept, ignore_errors=True)
    kept_prv.unlink(missing_ok=True)
    os.link(prv, kept_prv)
    shutil.copytree(base, kept, symlinks=True,
                    ignore=lambda d, names: [prv.name] if Path(d) == prv.parent else [])
    loads.append(_load())
    f_one, f_rss_one = _finalize(job, state, work / "final-one.log", a.timeout)
    shutil.copyfile(prv, work / "final-one.prv")
    shutil.rmtree(base)
    shutil.copytree(kept, base, symlinks=True)
    os.link(kept_prv, prv)
    kept_prv.unlink()
    shutil.rmtree(kept)
    loads.append(_load())
    log_file = base / "final-dask.log"
    f_dask, f_rss_dask = _finalize(job, state, log_file, a.timeout, "--dask", spec)
    loads.append(_load())
    event = next(iter(_events(log_file, "dask_finalize_ranges")), {})
    result.update({
        "watch_dask_s": round(t_live, 1), "appends": len(appends),
        "live_prv_mb": round(live_mb, 1), "append_coordinator_s": round(append_s, 2),
        "append_mb_per_s": round(live_mb / max(append_s, 1e-9), 1),
        # of which the block copy into the trace alone, and the model replay
        "append_copy_mb_per_s": round(sum(e.get("block_mb", 0.0) for e in appends) / max(
            sum(e.get("copy_s", 0.0) for e in appends), 1e-9), 1),
        "append_replay_s": round(sum(e.get("replay_s", 0.0) for e in appends), 2),
        "append_replay_cpu_s": round(sum(e.get("replay_cpu_s", 0.0) for e in appends), 2),
        "finalize_one_process_s": round(f_one, 1), "finalize_dask_s": round(f_dask, 1),
        "finalize_speedup": round(f_one / f_dask, 2),
        "finalize_one_peak_mib": round(f_rss_one, 1),
        "finalize_dask_peak_mib": round(f_rss_dask, 1),
        "finalize_dask_ranges": event.get("ranges"),
        "finalize_dask_index_s": event.get("index_s"),
        "finalize_dask_merge_s": event.get("merge_s"),
        "finalize_dask_place_s": event.get("place_s"),
        "finalize_dask_rebuilt": bool(_events(log_file, "trace_replaced_uncommitted_rebuilding")),
        "finalize_byte_identical": _same(work / "final-one.prv", job / "prvstream" / "job.prv")
        and _same(job / "prvstream" / "job.prv", work / "one.prv"),
        "load": loads})
    return result


def run_scale(a: ScaleArgs, work: Path) -> dict[str, Any]:
    """Run the scale benchmark ``a.mode`` in ``work``; its numbers."""
    if a.mode not in MODES:
        raise PrvstreamError(f"bench --scale {a.mode!r}: use one of {', '.join(MODES)}")
    bench: dict[str, Callable[[ScaleArgs, Path], dict[str, Any]]] = {
        "many": bench_many, "tiny": bench_tiny, "dask": bench_dask,
        "daemon": lambda a, w: bench_daemon(a, w, batch=a.batch)}
    return bench[a.mode](a, work)
