"""Benchmark scale: many small reports (batch and daemon) and Dask against one process.

- ``many``: ``convert`` of N small exports against one export with as many rows: the cost per
  record of the fixed per-report work (target: at most 2x).
- ``daemon``: N small reports dropped at once into a watched job: time until all are
  committed against a batch ``convert`` of the same, the append cost against the number of
  tasks already in the trace (first and last tenth), and the daemon's peak RSS.
- ``tiny``: N tiny reports (about 150 records each) and 10 N into a watched job: the daemon's
  peak RSS for each and their ratio (target: 10x the reports for < 1.3x the memory).
- ``dask``: R ranks of ROWS rows each, ``convert`` in one process against ``--dask SPEC``
  (default ``local:2``), and the rate at which the range merges write the trace in place
  (the coordinator's ``dask_ranges_written`` log event: it copies no bytes itself).

Every measured command runs in a child process (``_benchlib.run_measured``: wall time, peak
RSS of the process and its children, Dask's workers included).

Usage: ``python tests/bench/bench_scale.py many [--reports 400] [--reps 3] [--fan-in N]``,
``... daemon [--reports 1000] [--dask SPEC]``, ``... tiny [--reports 1000]``,
``... dask [--ranks 16] [--rows 1000000] [--spec local:2]``; ``--dir DIR`` keeps the inputs,
``--json OUT`` writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from _benchlib import export_rows, load, run_measured, synth_export

from prvstream.daemon.synthetic.synth import (
    SynthSpec,
    export_name,
    steps_for_rows,
    write_export,
)
from tests.daemon.daemon_proc import DaemonProcess, job_status, wait_for

_PRVSTREAM = [sys.executable, "-m", "prvstream.daemon"]


def _small_job(directory: Path, reports: int, steps: int = 1, layers: int = 12) -> list[Path]:
    """``reports`` one-rank exports (about 1,200 records each; ``layers=1``: tiny, about
    150), written once."""
    directory.mkdir(parents=True, exist_ok=True)
    spec = SynthSpec(ranks=reports, hosts=max(1, reports // 8), steps=steps, layers=layers)
    out = []
    for rank in range(reports):
        path = directory / export_name(spec, rank)
        if not path.exists():
            write_export(str(path) + ".tmp", spec, rank)
            os.replace(str(path) + ".tmp", path)
        out.append(path)
    return out


def _convert(inputs: list[str], out: Path, log: Path, *extra: str) -> tuple[float, float]:
    for old in out.parent.glob(out.name + ".*"):  # a rerun's outputs (convert never overwrites)
        old.unlink()
    run = run_measured([*_PRVSTREAM, "convert", *inputs, "-o", str(out), "--no-progress",
                        "--log-level", "info", "--log-json", *extra], log=log)
    if run.returncode != 0:
        raise SystemExit(f"convert failed; see {log}")
    return run.wall_s, run.peak_rss_mib


def _records(prv: Path) -> int:
    with open(prv, "rb") as fh:
        return sum(buf.count(b"\n") for buf in iter(lambda: fh.read(1 << 24), b"")) - 1


def bench_many(args: argparse.Namespace, work: Path) -> dict[str, object]:
    """Paired, interleaved runs (small, big, small, big, ...): medians, and the range of the
    per-pair ratios (other work on the machine moves both of a pair alike)."""
    small = _small_job(work / f"many-{args.reports}", args.reports)
    rows = sum(sum(export_rows(p).values()) for p in small[:5]) // 5 * args.reports
    big = synth_export(work / f"big-{rows}.sqlite", rows)
    extra = ("--fan-in", str(args.fan_in)) if args.fan_in else ()
    t_small: list[float] = []
    t_big: list[float] = []
    loads: list[float] = []
    for _ in range(args.reps):
        loads.append(load())
        t_small.append(_convert([str(small[0].parent)], work / "out-many", work / "many.log",
                                *extra)[0])
        t_big.append(_convert([str(big)], work / "out-big", work / "big.log")[0])
    n_small = _records(work / "out-many.prv")
    n_big = _records(work / "out-big.prv")
    per = n_big / n_small
    pairs = sorted(a / b * per for a, b in zip(t_small, t_big, strict=True))
    ms, mb = statistics.median(t_small), statistics.median(t_big)
    return {"reports": args.reports, "reps": args.reps, "records_many": n_small,
            "records_one": n_big, "seconds_many": round(ms, 2), "seconds_one": round(mb, 2),
            "seconds_many_all": [round(t, 2) for t in t_small],
            "seconds_one_all": [round(t, 2) for t in t_big],
            "us_per_record_many": round(ms / n_small * 1e6, 2),
            "us_per_record_one": round(mb / n_big * 1e6, 2),
            "ratio": round(ms / mb * per, 2), "ratio_pairs": [round(r, 2) for r in pairs],
            "fixed_ms_per_report": round((ms - n_small * mb / n_big) / args.reports * 1e3, 1),
            "load": [round(x, 2) for x in loads]}


def _vm_hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _append_profile(appends: list[tuple[int, float]], parts: int = 5) -> list[list[float]]:
    """[tasks in the trace, median seconds per append] over ``parts`` slices of the run."""
    size = max(1, len(appends) // parts)
    out = []
    for i in range(0, len(appends), size):
        part = appends[i:i + size]
        out.append([part[-1][0], round(statistics.median(s for _, s in part), 4)])
    return out


def bench_daemon(args: argparse.Namespace, work: Path, *, layers: int = 12,
                 batch: bool = True) -> dict[str, object]:
    name = f"daemon-src-{args.reports}" + ("" if layers == 12 else f"-l{layers}")
    sources = _small_job(work / name, args.reports, layers=layers)
    base = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    job = base / "root" / "job"
    job.mkdir(parents=True)
    extra = ("--dask", args.dask) if args.dask else ()
    daemon = DaemonProcess([job.parent], base / "state", base / "logs", settle=0.2,
                           extra=extra)
    with daemon:
        daemon.start(ready_timeout=120)
        began = time.monotonic()
        for src in sources:  # all at once: hard links, complete the moment they appear
            os.link(src, job / src.name)
        peak = 0.0

        def all_in() -> bool:
            nonlocal peak
            peak = max(peak, _vm_hwm_mib(daemon.pid))
            return int(job_status(job).get("reports", 0)) >= args.reports

        wait_for(all_in, timeout=args.timeout, what="every report committed", every=0.5)
        committed = time.monotonic() - began
        peak = max(peak, _vm_hwm_mib(daemon.pid))
        appends = [(e.get("tasks", 0), e["seconds"]) for e in daemon.named("report_appended")]
        groups = [e["reports"] for e in daemon.named("group_committed")]
        load_during = load()
    tenth = max(1, len(appends) // 10)
    first = statistics.median(s for _, s in appends[:tenth])
    last = statistics.median(s for _, s in appends[-tenth:])
    result: dict[str, object] = {
        "reports": args.reports, "layers": layers, "dask": args.dask or "",
        "all_committed_s": round(committed, 1), "append_first_tenth_s": round(first, 4),
        "append_last_tenth_s": round(last, 4), "tasks_at_end": appends[-1][0],
        "append_s_by_tasks": _append_profile(appends), "commits": len(groups) + (
            len(appends) - sum(groups)), "largest_group": max(groups, default=1),
        "daemon_peak_rss_mib": round(peak, 1), "load_during": round(load_during, 2)}
    if batch:
        t_batch, _ = _convert([str(sources[0].parent)], base / "batch", base / "batch.log")
        result.update(batch_convert_s=round(t_batch, 1), ratio=round(committed / t_batch, 2))
    result["load"] = round(load(), 2)
    return result


def bench_tiny(args: argparse.Namespace, work: Path) -> dict[str, object]:
    """Daemon peak RSS for ``--reports`` tiny reports and for ten times as many."""
    few = bench_daemon(args, work, layers=1, batch=False)
    args.reports *= 10
    many = bench_daemon(args, work, layers=1, batch=False)
    return {"few": few, "many": many, "memory_ratio": round(
        float(many["daemon_peak_rss_mib"]) / float(few["daemon_peak_rss_mib"]), 2)}


def _rank_exports(directory: Path, ranks: int, rows: int) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    spec = SynthSpec(ranks=ranks, hosts=max(1, ranks // 4))
    spec = SynthSpec(ranks=ranks, hosts=max(1, ranks // 4), steps=steps_for_rows(rows, spec))
    out = []
    for rank in range(ranks):
        path = directory / export_name(spec, rank)
        if not path.exists():
            write_export(str(path) + ".tmp", spec, rank)
            os.replace(str(path) + ".tmp", path)
        out.append(path)
    return out


def bench_dask(args: argparse.Namespace, work: Path) -> dict[str, object]:
    exports = _rank_exports(work / f"dask-{args.ranks}x{args.rows}", args.ranks, args.rows)
    inputs = [str(exports[0].parent)]
    t_one, rss_one = _convert(inputs, work / "one", work / "one.log")
    log = work / "dask.log"
    log.unlink(missing_ok=True)
    t_dask, rss_dask = _convert(inputs, work / "dask", log, "--dask", args.spec)
    same = all((work / f"one{e}").read_bytes() == (work / f"dask{e}").read_bytes()
               for e in (".pcf", ".row"))
    with open(work / "one.prv", "rb") as a, open(work / "dask.prv", "rb") as b:
        while same:
            x, y = a.read(1 << 24), b.read(1 << 24)
            same = x == y
            if not x:
                break
    event = next((json.loads(line) for line in log.read_text().splitlines()
                  if '"dask_ranges_written"' in line), {})
    size = (work / "one.prv").stat().st_size
    return {"ranks": args.ranks, "rows_per_rank": args.rows, "spec": args.spec,
            "prv_mb": round(size / 1e6, 1), "one_process_s": round(t_one, 1),
            "dask_s": round(t_dask, 1), "speedup": round(t_one / t_dask, 2),
            "one_process_peak_mib": round(rss_one, 1), "dask_peak_mib_all_processes":
            round(rss_dask, 1), "ranges_written_mb_per_s": event.get("mb_per_s"),
            "ranges_written_s": event.get("seconds"), "byte_identical": same,
            "load": round(load(), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["many", "daemon", "tiny", "dask"])
    parser.add_argument("--reports", type=int, default=0)
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--spec", default="local:2")
    parser.add_argument("--reps", type=int, default=3, help="many: paired runs (medians)")
    parser.add_argument("--fan-in", type=int, default=0, help="many: convert --fan-in N")
    parser.add_argument("--dask", default="", help="daemon: run it with --dask SPEC")
    parser.add_argument("--no-batch", action="store_true",
                        help="daemon: skip the batch convert of the same reports")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--dir", help="work directory (kept; inputs reused)")
    parser.add_argument("--json", help="write the result here too")
    args = parser.parse_args()
    args.reports = args.reports or (400 if args.what == "many" else 1000)
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="prvstream-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.what == "daemon":
        result = bench_daemon(args, work, batch=not args.no_batch)
    else:
        result = {"many": bench_many, "tiny": bench_tiny, "dask": bench_dask}[args.what](
            args, work)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
