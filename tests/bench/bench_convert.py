"""Benchmark ``prvstream convert`` at 1M and 10M rows: rows/s, records/s, MB/s, peak RSS, floor.

Each conversion runs in a fresh child process (``python -m prvstream.daemon convert``, all data
kinds, efficiency summary in the same pass) whose peak RSS (VmHWM, ``ru_maxrss`` from ``wait4``,
plus the reader process's peak) is recorded, alternating with the ``sqlite3`` shell reading the
same tables ``ORDER BY start`` into /dev/null (the floor); the export is read into the page
cache before each run. Memory must be flat: 10x the rows, < 1.2x the RSS. The inputs are
``prvstream synth`` exports (every data kind, NVTX-heavy) and ``gen_pipeline`` exports (two
inference pipeline stages in one export; its CUDA API rows are stored one process after the
other, so they are read as runs, and the comm join run by run). Ratios to the floor are of
medians, with the range of the per-repetition (paired) ratios.

Usage: ``python tests/bench/bench_convert.py [--sizes 1000000,10000000] [--reps 5]
[--big-reps 5] [--generators synth,pipeline] [--dir DIR] [--json OUT]`` (sizes of 5M rows
and more run ``--big-reps`` times).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

from _benchlib import (
    Run,
    compile_bytecode,
    export_rows,
    load,
    median,
    run_measured,
    spread,
    sqlite_floor_cmd,
    synth_export,
)
from compare_nsys2prv import commit
from gen_pipeline import write_export as pipeline_export


def prv_records(prv: Path) -> int:
    """Record lines of a .prv (everything after the header)."""
    with open(prv, "rb") as fh:
        return sum(buf.count(b"\n") for buf in iter(lambda: fh.read(1 << 24), b"")) - 1


def measure(export: Path, label: str, reps: int, work: Path) -> dict[str, object]:
    rows = export_rows(export)
    total = sum(rows.values())
    out = work / "out"
    cmd = [sys.executable, "-m", "prvstream.daemon", "convert", str(export), "-o", str(out),
           "--no-progress", "--log-level", "error"]
    floor_cmd = sqlite_floor_cmd(export, sorted(rows))
    conv: list[Run] = []
    floor: list[Run] = []
    records = size = 0
    for rep in range(reps):
        conv.append(run_measured(cmd, log=work / "convert.log", warm_first=export))
        if conv[-1].returncode != 0:
            raise SystemExit(f"convert failed; see {work / 'convert.log'}")
        prv = out.with_name("out.prv")
        records, size = prv_records(prv), prv.stat().st_size
        for ext in (".prv", ".pcf", ".row", ".summary.json"):
            out.with_name("out" + ext).unlink(missing_ok=True)
        floor.append(run_measured(floor_cmd, warm_first=export))
        print(f"  {label} {total:,} rows rep {rep + 1}/{reps}: convert {conv[-1].wall_s:.2f} s "
              f"(CPU {conv[-1].cpu_s:.2f} s) {conv[-1].peak_rss_mib:.1f} MiB, "
              f"floor {floor[-1].wall_s:.2f} s, "
              f"load {max(conv[-1].load, floor[-1].load):.2f}", flush=True)
    wall = median([r.wall_s for r in conv])
    return {
        "input": label, "rows": total, "tables": rows, "reps": reps, "records": records,
        "prv_mb": size / 1e6, "convert_s": wall, "convert_s_all": [r.wall_s for r in conv],
        "convert_spread": spread([r.wall_s for r in conv]),
        "floor_spread": spread([r.wall_s for r in floor]),
        "convert_cpu_spread": spread([r.cpu_s for r in conv]),
        "floor_cpu_spread": spread([r.cpu_s for r in floor]),
        "paired_multiple_of_floor": spread([c.wall_s / f.wall_s
                                            for c, f in zip(conv, floor, strict=True)]),
        "rss_spread": spread([r.peak_rss_mib for r in conv]),
        "floor_s": median([r.wall_s for r in floor]),
        "rows_per_s": total / wall, "records_per_s": records / wall, "mb_per_s": size / 1e6 / wall,
        "peak_rss_mib": max(r.peak_rss_mib for r in conv),
        "multiple_of_floor": wall / median([r.wall_s for r in floor]),
        "max_load": max(r.load for r in conv + floor),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--big-reps", type=int, default=5)
    parser.add_argument("--generators", default="synth,pipeline",
                        help="which generators' exports to convert: synth, pipeline")
    parser.add_argument("--version", default="2026.2", choices=["2022.2", "2024.5", "2026.2"])
    parser.add_argument("--dir", help="work directory (default: a temporary one)")
    parser.add_argument("--json", help="also write the results as JSON here")
    args = parser.parse_args()
    if shutil.which("sqlite3") is None:
        raise SystemExit("the sqlite3 command-line shell is needed for the floor")
    compile_bytecode()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, python "
          f"{platform.python_version()}, prvstream commit {commit()}, load {load():.2f}",
          flush=True)
    results = []
    if args.dir:  # the parent of the run's temporary directory, made if need be
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="prvstream-bench-") as tmp:
        work = Path(tmp)
        for generator in (g for g in args.generators.split(",") if g):
            for size in (int(s) for s in args.sizes.split(",") if s):
                path = work / f"{generator}_{size}.sqlite"
                if generator == "synth":
                    export = synth_export(path, size, args.version)
                elif generator == "pipeline":
                    export = pipeline_export(path, size)
                else:
                    raise SystemExit(f"unknown generator {generator!r}: synth or pipeline")
                reps = args.big_reps if size >= 5_000_000 else args.reps
                results.append(measure(export, generator, reps, work))
                export.unlink()
    print("| input | rows | runs | convert s (min–max) | rows/s | records/s | MB/s written | "
          "peak RSS MiB (min–max) | sqlite3 floor s (min–max) | × floor (paired min–max) | "
          "CPU s convert / floor | max load |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        c, f, m, rss = (r["convert_spread"], r["floor_spread"], r["paired_multiple_of_floor"],
                        r["rss_spread"])
        cc, fc = r["convert_cpu_spread"], r["floor_cpu_spread"]
        assert isinstance(cc, dict) and isinstance(fc, dict)
        assert isinstance(c, dict) and isinstance(f, dict) and isinstance(m, dict)
        assert isinstance(rss, dict)
        print(f"| {r['input']} | {r['rows']:,} | {r['reps']} | {c['median']:.2f} "
              f"({c['min']:.2f}–{c['max']:.2f}) | {r['rows_per_s']:,.0f} | "
              f"{r['records_per_s']:,.0f} | {r['mb_per_s']:.1f} | {rss['max']:.1f} "
              f"({rss['min']:.1f}–{rss['max']:.1f}) | {f['median']:.2f} "
              f"({f['min']:.2f}–{f['max']:.2f}) | {r['multiple_of_floor']:.2f} "
              f"({m['min']:.2f}–{m['max']:.2f}) | {cc['median']:.2f} / {fc['median']:.2f} | "
              f"{r['max_load']:.2f} |")
    for generator in {str(r["input"]) for r in results}:
        mine = [r for r in results if r["input"] == generator]
        if len(mine) >= 2:
            a, b = mine[0], mine[-1]
            assert isinstance(a["peak_rss_mib"], float) and isinstance(b["peak_rss_mib"], float)
            print(f"RSS growth {generator} {a['rows']:,} -> {b['rows']:,} rows: "
                  f"{b['peak_rss_mib'] / a['peak_rss_mib']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
