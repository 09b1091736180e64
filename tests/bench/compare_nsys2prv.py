"""prvstream against nsys2prv 0.5.8 and the ``sqlite3`` scan floor, on the same exports.

nsys2prv (GPL) is installed from PyPI into its own virtual environment and only run, never
vendored. It shells out to ``nsys``; ``nsys_standin.py`` (ours, documented there) stands in
for it. Both converters get the CUDA data nsys2prv's ``-t cuda_api_trace`` covers: kernels,
memcpy/memset, CUDA API calls and the API->GPU communications (``prvstream convert --trace
kernel,memcpy,memset,runtime,comm``; prvstream also writes its efficiency summary in the same
pass). Per export and repetition the three commands run one after the other (prvstream,
nsys2prv, floor), each in a fresh child process under ``nice``; medians are reported, the ratios
are of medians measured in the same run, and the two traces' kernel, memory-operation and API
event counts are checked against each other and against the export.

The inputs: ``prvstream synth`` exports (NVTX-heavy training ranks) of ``--sizes`` rows, a
``gen_pipeline`` export (two inference pipeline stages in one export, a different shape of
data) of ``--pipeline`` rows, and the real exports. Ratios are of medians, with the range of
the per-repetition (paired) ratios. Start-up is measured too: ``prvstream --version`` and, for
exports small enough that reading them is nothing, a conversion's wall time beyond the floor's.

Usage: ``python tests/bench/compare_nsys2prv.py [--sizes 10000,100000,1000000] [--reps 5]
[--pipeline 180000] [--dir DIR] [--json OUT]``. Needs network access to PyPI once (the venv
is cached in ``--venv``, default ``$PRVSTREAM_COMPAT_CACHE/nsys2prv-0.5.8``, i.e.
``~/.cache/prvstream-compat/nsys2prv-0.5.8``, shared with tests/compat) and the
``sqlite3`` shell.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

from _benchlib import (
    GPU_TABLES,
    Run,
    add_context_info,
    compile_bytecode,
    count_events,
    export_rows,
    load,
    median,
    real_data_dir,
    run_measured,
    spread,
    sqlite_floor_cmd,
    synth_export,
)
from gen_pipeline import write_export as pipeline_export

NSYS2PRV = "nsys2prv==0.5.8"
KINDS = "kernel,memcpy,memset,runtime,comm"
HERE = Path(__file__).resolve().parent


def commit() -> str:
    """The checked-out commit of the source tree being measured (``+dirty`` if modified)."""
    try:
        head = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(HERE), "status", "--porcelain", "--",
                                "../../daemon", "../../sinks"], capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def ensure_venv(where: Path) -> Path:
    """The nsys2prv console script inside its own venv (created on first use)."""
    exe = where / "bin" / "nsys2prv"
    if exe.exists():
        return exe
    venv.create(where, with_pip=True, clear=True)
    subprocess.run([str(where / "bin" / "python"), "-m", "pip", "install", "-q", NSYS2PRV],
                   check=True)
    return exe


def standin_bin(work: Path) -> Path:
    """A directory holding ``nsys``: the stand-in, run by this Python."""
    bindir = work / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    nsys = bindir / "nsys"
    nsys.write_text(f"#!/bin/sh\nexec {sys.executable} {HERE / 'nsys_standin.py'} \"$@\"\n")
    nsys.chmod(0o755)
    return bindir


def last_error(log: Path) -> str:
    """The last line of a failed run's output that names an error."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ("Error" in ln or "error" in ln)
              and "Background on this error" not in ln] or lines or ["no output"]
    return errors[-1][:100]


def present_tables(path: Path) -> list[str]:
    return [t for t in GPU_TABLES if t in export_rows(path, GPU_TABLES)]


def compare(export: Path, label: str, reps: int, work: Path, n2p: Path, bindir: Path,
            timeout: float, slow: float) -> dict[str, object]:
    """Alternate prvstream, nsys2prv and the floor on one export; medians and checks."""
    case = work / label
    shutil.rmtree(case, ignore_errors=True)
    (case / "n2p").mkdir(parents=True)
    (case / "prv").mkdir()
    (case / "n2p" / export.name).symlink_to(export.resolve())
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    rows = export_rows(export, GPU_TABLES)
    total = sum(rows.values())
    runs: dict[str, list[Run]] = {"prvstream": [], "nsys2prv": [], "floor": []}
    n2p_note = ""
    prv_out = case / "prv" / "out"
    prv_cmd = [sys.executable, "-m", "prvstream.daemon", "convert", str(export), "-o",
               str(prv_out), "--trace", KINDS, "--no-progress", "--log-level", "error"]
    n2p_cmd = [str(n2p), "-t", "cuda_api_trace", export.name, "out"]
    floor_cmd = sqlite_floor_cmd(export, present_tables(export))
    for rep in range(reps):
        runs["prvstream"].append(run_measured(prv_cmd, timeout=timeout, warm_first=export,
                                              log=case / "prvstream.log"))
        if not n2p_note:
            for stale in (case / "n2p").glob("out.*"):
                stale.unlink()
            r = run_measured(n2p_cmd, cwd=case / "n2p", env=env, timeout=timeout,
                             warm_first=export,
                             log=case / "nsys2prv.log")
            if r.timed_out:
                n2p_note = f"did not finish in {timeout:.0f} s"
            elif r.returncode != 0:
                n2p_note = f"failed: {last_error(case / 'nsys2prv.log')}"
            else:
                runs["nsys2prv"].append(r)
                if r.wall_s > slow and rep + 1 < reps:
                    n2p_note = f"{len(runs['nsys2prv'])} run(s) only: {r.wall_s:.0f} s each"
        ran_n2p = len(runs["nsys2prv"]) == rep + 1
        runs["floor"].append(run_measured(floor_cmd, timeout=timeout, warm_first=export))
        n2p_s = f"{runs['nsys2prv'][-1].wall_s:.2f} s" if ran_n2p else "skipped"
        print(f"  {label} rep {rep + 1}/{reps}: prvstream {runs['prvstream'][-1].wall_s:.2f} s "
              f"(CPU {runs['prvstream'][-1].cpu_s:.2f} s), nsys2prv {n2p_s}, "
              f"floor {runs['floor'][-1].wall_s:.3f} s, load {runs['floor'][-1].load:.2f}",
              flush=True)
    bad = [r for r in runs["prvstream"] if r.returncode != 0]
    if bad:
        raise SystemExit(f"prvstream convert failed on {export}; see {case / 'prvstream.log'}")
    prv_events = count_events(prv_out.with_name("out.prv"))
    n2p_events = count_events(case / "n2p" / "out.prv") if runs["nsys2prv"] else {}
    export_events = {"kernel": rows.get("CUPTI_ACTIVITY_KIND_KERNEL", 0),
                     "memop": rows.get("CUPTI_ACTIVITY_KIND_MEMCPY", 0)
                     + rows.get("CUPTI_ACTIVITY_KIND_MEMSET", 0),
                     "api": rows.get("CUPTI_ACTIVITY_KIND_RUNTIME", 0)}
    med = {k: median([r.wall_s for r in v]) for k, v in runs.items()}
    rss = {k: max((r.peak_rss_mib for r in v), default=float("nan")) for k, v in runs.items()}
    paired = [n.wall_s / p.wall_s for p, n in zip(runs["prvstream"], runs["nsys2prv"],
                                                   strict=False)]
    floor_paired = [p.wall_s / f.wall_s for p, f in zip(runs["prvstream"], runs["floor"],
                                                        strict=True)]
    result: dict[str, object] = {
        "export": label, "rows": total, "reps": {k: len(v) for k, v in runs.items()},
        "median_s": med, "peak_rss_mib": rss,
        "spread_s": {k: spread([r.wall_s for r in v]) for k, v in runs.items()},
        "cpu_s": {k: spread([r.cpu_s for r in v]) for k, v in runs.items()},
        "paired_speedup": spread(paired), "paired_multiple_of_floor": spread(floor_paired),
        "beyond_floor_s": spread([p.wall_s - f.wall_s for p, f in zip(
            runs["prvstream"], runs["floor"], strict=True)]),
        "records_per_s": {k: total / v if v == v and v > 0 else None for k, v in med.items()},
        "speedup_vs_nsys2prv": med["nsys2prv"] / med["prvstream"] if runs["nsys2prv"] else None,
        "multiple_of_floor": med["prvstream"] / med["floor"],
        "max_load": max(r.load for v in runs.values() for r in v),
        "events": {"export": export_events, "prvstream": prv_events, "nsys2prv": n2p_events},
        "events_match": prv_events == n2p_events if n2p_events else None,
        "prvstream_matches_export": prv_events == export_events,
        "nsys2prv_note": n2p_note,
    }
    shutil.rmtree(case / "prv", ignore_errors=True)
    for f in (case / "n2p").glob("out*"):
        f.unlink()
    return result


def fmt(value: object, spec: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "—"
    return format(value, spec)


def _range(sp: object, spec: str) -> str:
    assert isinstance(sp, dict)
    return (f"{fmt(sp['median'], spec)} ({fmt(sp['min'], spec)}–{fmt(sp['max'], spec)})"
            if sp["median"] == sp["median"] else "—")


def table(results: list[dict[str, object]]) -> str:
    lines = ["| export | rows | prvstream s (min–max) | nsys2prv s (min–max) | floor s | "
             "speedup (paired min–max) | × floor (paired min–max) | CPU s prvstream / "
             "nsys2prv / floor | RSS prvstream MiB | RSS nsys2prv MiB | events equal | "
             "runs (p/n/f) | max load |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|"]
    for r in results:
        sp, rss, reps, cpu = r["spread_s"], r["peak_rss_mib"], r["reps"], r["cpu_s"]
        assert isinstance(sp, dict) and isinstance(rss, dict) and isinstance(reps, dict)
        assert isinstance(cpu, dict)
        ev = r["events_match"]
        events = ("yes" if ev else "NO" if ev is not None else "—") + (
            "" if r["prvstream_matches_export"] else " (prvstream≠export)")
        note = f" ({r['nsys2prv_note']})" if r["nsys2prv_note"] else ""
        ps = r["paired_speedup"]
        assert isinstance(ps, dict)
        speed = (f"{fmt(r['speedup_vs_nsys2prv'], '.1f')} ({fmt(ps['min'], '.1f')}–"
                 f"{fmt(ps['max'], '.1f')})" if r["speedup_vs_nsys2prv"] else "—")
        pf = r["paired_multiple_of_floor"]
        assert isinstance(pf, dict)
        lines.append(
            f"| {r['export']} | {r['rows']:,} | {_range(sp['prvstream'], '.3f')} | "
            f"{_range(sp['nsys2prv'], '.2f')}{note} | {fmt(sp['floor']['median'], '.3f')} | "
            f"{speed} | {fmt(r['multiple_of_floor'], '.2f')} ({fmt(pf['min'], '.2f')}–"
            f"{fmt(pf['max'], '.2f')}) | {fmt(cpu['prvstream']['median'], '.2f')} / "
            f"{fmt(cpu['nsys2prv']['median'], '.2f')} / {fmt(cpu['floor']['median'], '.3f')} | "
            f"{fmt(rss['prvstream'], '.0f')} | "
            f"{fmt(rss['nsys2prv'], '.0f')} | {events} | "
            f"{reps['prvstream']}/{reps['nsys2prv']}/{reps['floor']} | "
            f"{fmt(r['max_load'], '.2f')} |")
    return "\n".join(lines)


def startup(reps: int) -> dict[str, object]:
    """``python -c pass`` and ``prvstream --version``, alternated, ``reps`` times each."""
    runs: dict[str, list[float]] = {"python": [], "version": []}
    loads = []
    for _ in range(reps):
        for key, cmd in (("python", [sys.executable, "-c", "pass"]),
                         ("version", [sys.executable, "-m", "prvstream.daemon", "--version"])):
            r = run_measured(cmd)
            if r.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)} failed")
            runs[key].append(r.wall_s)
            loads.append(r.load)
    return {k: spread(v) for k, v in runs.items()} | {"max_load": max(loads)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000",
                        help="synthetic export sizes in rows (comma-separated)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--no-real", action="store_true", help="skip the real exports")
    parser.add_argument("--dir", help="work directory (default: a temporary one)")
    parser.add_argument("--venv", default=str(Path(os.environ.get(
        "PRVSTREAM_COMPAT_CACHE", str(Path.home() / ".cache" / "prvstream-compat")))
        / "nsys2prv-0.5.8"), help="nsys2prv's virtual environment (default: the one the "
                                  "compatibility tests cache; created when missing)")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="give up on a single run after this many seconds")
    parser.add_argument("--slow", type=float, default=float("inf"),
                        help="run nsys2prv only once on an export where one run takes longer "
                             "(default: never, every export gets --reps runs)")
    parser.add_argument("--pipeline", type=int, default=180_000,
                        help="rows of the gen_pipeline export (0: none)")
    parser.add_argument("--json", help="also write the results as JSON here")
    args = parser.parse_args()
    if shutil.which("sqlite3") is None:
        raise SystemExit("the sqlite3 command-line shell is needed for the floor")
    n2p = ensure_venv(Path(args.venv))
    compile_bytecode()
    if args.dir:  # the parent of the run's temporary directory, made if need be
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="prvstream-compare-") as tmp:
        work = Path(tmp)
        bindir = standin_bin(work)
        exports: list[tuple[Path, str]] = []
        for size in (int(s) for s in args.sizes.split(",") if s):
            path = synth_export(work / "exports" / f"synth_{size}.sqlite", size)
            add_context_info(path)
            exports.append((path, f"synth {size:,}"))
        if args.pipeline:
            path = pipeline_export(work / "exports" / f"pipeline_{args.pipeline}.sqlite",
                                   args.pipeline)
            add_context_info(path)
            exports.append((path, f"pipeline {args.pipeline:,}"))
        real = real_data_dir()
        if not args.no_real and real.is_dir():
            exports += [(p, p.stem) for p in sorted(real.glob("*.sqlite"))]
        print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, python "
              f"{platform.python_version()}, prvstream commit {commit()}, load {load():.2f}",
              flush=True)
        start = startup(args.reps)
        results = []
        for path, label in exports:
            results.append(compare(path, label, args.reps, work, n2p, bindir, args.timeout,
                                   args.slow))
        print(table(results))
        py, ver = start["python"], start["version"]
        assert isinstance(py, dict) and isinstance(ver, dict)
        print(f"\nstart-up: python -c pass {_range(py, '.3f')} s, prvstream --version "
              f"{_range(ver, '.3f')} s (median, min–max of {args.reps}; max load "
              f"{start['max_load']:.2f})")
        for r in results:
            if int(r["rows"]) <= 20_000:  # type: ignore[call-overload]
                print(f"start-up beyond reading, {r['export']}: prvstream − floor "
                      f"{_range(r['beyond_floor_s'], '.3f')} s")
        if args.json:
            Path(args.json).write_text(json.dumps({"startup": start, "exports": results},
                                                  indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
