"""Check the cfgs in ``cfgs/`` with Paraver's own ``paramedir`` against the SQLite rows.

Converts each export to a temporary trace, runs every cfg through paramedir, and compares per
stream thread: time in state Running (``useful_time_per_gpu.cfg``) with the non-NCCL kernels,
time in states 13 + 17 (``comm_time_per_gpu.cfg``) with NCCL kernels + memcpy + memset, bytes
(``memcpy_sizes.cfg``) with memcpy + memset bytes, time with a kernel name
(``kernel_names.cfg``) with all kernels; per task, the kernels-in-flight and NCCL/compute
overlap histograms with a sweep over the kernels. Times are compared with the union of the
intervals (equal to the plain sum, also printed, unless operations overlap on one stream).
Any stderr output of paramedir, an aborted cfg or a missing output file is a failure.

Usage: ``PARAMEDIR=/path/to/paramedir python tests/bench/check_paramedir.py [EXPORT ...]``
(or ``--paramedir PATH``; default exports: the real ones the tests use). Exits 1 on mismatch.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CFG_DIR = ROOT / "cfgs"
#: same default as tests/conftest.py
REAL_DATA = Path(os.environ.get("PRVSTREAM_TEST_DATA",
                                str(ROOT.parent / "shared" / "data" / "nsys")))

#: stream key: (pid, device, stream)
StreamKey = tuple[int, int, int]

_STREAM = re.compile(r"^CUDA-D(\d+)\.S(\d+)(?:-\S+)?$")
_TASK_PID = re.compile(r":(\d+)(?:\s|$)")
_FILTER = re.compile(r"^window_filter_module\s+evt_type\s+(\d+)((?:\s+\d+)+)\s*$")


# -- the trace side ----------------------------------------------------------------------------
@dataclass
class TraceObjects:
    """Threads of a converted trace in object order, and their stream keys where they have one."""

    threads: list[tuple[int, int, str]] = field(default_factory=list)  # (task, thread, name)
    tasks: list[str] = field(default_factory=list)
    keys: dict[tuple[int, int], StreamKey] = field(default_factory=dict)

    @property
    def threads_by_id(self) -> dict[tuple[int, int], str]:
        return {(task, thread): name for task, thread, name in self.threads}


def read_objects(prv: Path) -> TraceObjects:
    """Task and thread names from the .row, threads per task from the .prv header."""
    with prv.open("rb") as fh:
        header = fh.readline().decode().rstrip()
    counts = [int(part.split(":")[0]) for part in
              header.split(":", 5)[5].split("(", 1)[1].split(")", 1)[0].split(",")]
    levels: dict[str, list[str]] = {}
    current = None
    for line in prv.with_suffix(".row").read_text().splitlines():
        if line.startswith("LEVEL "):
            current = line.split()[1]
            levels[current] = []
        elif line.strip() and current is not None:
            levels[current].append(line)
    objs = TraceObjects(tasks=levels.get("TASK", []))
    names = iter(levels.get("THREAD", []))
    for task, n in enumerate(counts, 1):
        found = _TASK_PID.search(objs.tasks[task - 1])
        pid = int(found.group(1)) if found else -1
        for thread in range(1, n + 1):
            name = next(names)
            objs.threads.append((task, thread, name))
            m = _STREAM.match(name)
            if m:
                objs.keys[(task, thread)] = (pid, int(m.group(1)), int(m.group(2)))
    return objs


def trace_event_types(prv: Path) -> set[int]:
    """Event types that occur in the records of a trace."""
    found: set[int] = set()
    with prv.open() as fh:
        next(fh)
        for line in fh:
            if line.startswith("2:"):
                parts = line.rstrip("\n").split(":")
                found.update(int(t) for t in parts[6::2])
    return found


def cfg_event_types(cfg: Path) -> set[int]:
    """Event types a cfg filters on (``window_filter_module evt_type n t1 .. tn``)."""
    types: set[int] = set()
    for line in cfg.read_text().splitlines():
        m = _FILTER.match(line.strip())
        if m:
            types.update(int(t) for t in m.group(2).split())
    return types


def parse_histogram(path: Path) -> tuple[list[str], list[tuple[str, list[float]]]]:
    """paramedir's histogram text: column labels and (row label, values) before the totals."""
    lines = path.read_text().splitlines()
    columns = [c for c in lines[0].split("\t")[1:] if c != ""]
    rows: list[tuple[str, list[float]]] = []
    for line in lines[1:]:
        if not line.strip():
            break
        label, *values = line.split("\t")
        rows.append((label, [float(v) for v in values if v != ""]))
    return columns, rows


def parse_timeline_nonzero(path: Path) -> dict[str, float]:
    """paramedir's timeline CSV: per object (``appl.task.thread``), time with value != 0."""
    out: dict[str, float] = defaultdict(float)
    with path.open(newline="") as fh:
        for obj, _begin, duration, value in csv.reader(fh, delimiter="\t"):
            if float(value) != 0:
                out[obj] += float(duration)
    return out


# -- the SQLite side ---------------------------------------------------------------------------
def _has(con: sqlite3.Connection, table: str) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                       (table,)).fetchone() is not None


def _union(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals."""
    total, cur_start, cur_end = 0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None and cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None and cur_start is not None:
        total += cur_end - cur_start
    return total


@dataclass
class Expected:
    """Per (pid, device, stream) numbers computed straight from the SQLite rows.

    ``union`` holds the time metrics as the union of their intervals (what a timeline can
    show), ``sums`` as plain sums of durations; they differ only where operations of one
    stream overlap. ``bytes`` is the summed memcpy + memset size.
    """

    union: dict[str, dict[StreamKey, float]]
    sums: dict[str, dict[StreamKey, float]]


def sqlite_expectations(export: Path) -> Expected:
    """useful (non-NCCL kernels), comm (NCCL kernels + memcpy + memset), kernel (all kernels)
    and bytes, per (pid, device, stream)."""
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    spans: dict[str, dict[StreamKey, list[tuple[int, int]]]] = {
        m: defaultdict(list) for m in ("useful", "comm", "kernel")}
    nbytes: dict[StreamKey, float] = defaultdict(float)
    pid = "((globalPid >> 24) & 16777215)"
    try:
        if _has(con, "CUPTI_ACTIVITY_KIND_KERNEL"):
            rows = con.execute(
                f"SELECT {pid}, deviceId, streamId, lower(s.value) LIKE 'nccl%', k.start, k.end "
                "FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN StringIds AS s ON s.id = k.shortName")
            for p, d, s, nccl, start, end in rows:
                spans["comm" if nccl else "useful"][(p, d, s)].append((start, end))
                spans["kernel"][(p, d, s)].append((start, end))
        for table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            if _has(con, table):
                rows = con.execute(f"SELECT {pid}, deviceId, streamId, start, end, bytes "
                                   f"FROM {table}")
                for p, d, s, start, end, size in rows:
                    spans["comm"][(p, d, s)].append((start, end))
                    nbytes[(p, d, s)] += max(size or 0, 0)
    finally:
        con.close()
    union = {m: {k: float(_union(v)) for k, v in by.items()} for m, by in spans.items()}
    sums = {m: {k: float(sum(e - b for b, e in v)) for k, v in by.items()}
            for m, by in spans.items()}
    union["bytes"] = sums["bytes"] = dict(nbytes)
    return Expected(union, sums)


def task_sweeps(export: Path) -> dict[int, dict[str, dict[int, float]]]:
    """Per pid, from a sweep over all its kernels: ``inflight`` = ns with k >= 1 kernels
    running; ``overlap`` = ns with compute only (1), NCCL only (2), both (3)."""
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    try:
        if not _has(con, "CUPTI_ACTIVITY_KIND_KERNEL"):
            return {}
        rows = con.execute(
            "SELECT (globalPid >> 24) & 16777215, lower(s.value) LIKE 'nccl%', k.start, k.end, "
            "k.deviceId, k.streamId "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN StringIds AS s ON s.id = k.shortName "
            "ORDER BY k.start"
        ).fetchall()
    finally:
        con.close()
    # a stream shows one kernel at a time: one overlapping its predecessor on the same stream
    # is shown from the predecessor's end (as the converter writes it)
    stream_end: dict[tuple[int, int, int], int] = {}
    edges: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for p, nccl, start, end, dev, stream in rows:
        prev = stream_end.get((p, dev, stream), start)
        shown = min(max(start, prev), end)
        stream_end[(p, dev, stream)] = max(prev, end)
        edges[p] += [(shown, 1, nccl), (end, -1, nccl)]
    out: dict[int, dict[str, dict[int, float]]] = {}
    for p, evs in edges.items():
        evs.sort(key=lambda e: (e[0], e[1]))
        running = [0, 0]
        inflight: dict[int, float] = defaultdict(float)
        overlap: dict[int, float] = defaultdict(float)
        last = evs[0][0]
        for t, delta, nccl in evs:
            if t > last:
                if sum(running):
                    inflight[sum(running)] += t - last
                    overlap[(2 if running[1] else 0) + (1 if running[0] else 0)] += t - last
                last = t
            running[nccl] += delta
        out[p] = {"inflight": dict(inflight), "overlap": dict(overlap)}
    return out


def stream_overlaps(export: Path) -> int:
    """GPU operations (kernels, copies, memsets) that start before the previous one on their
    stream ended: Paraver state records may not overlap on one thread."""
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    try:
        parts = [f"SELECT globalPid AS g, deviceId AS d, streamId AS s, start, end FROM {t}"
                 for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                           "CUPTI_ACTIVITY_KIND_MEMSET") if _has(con, t)]
        if not parts:
            return 0
        sql = ("SELECT COUNT(*) FROM (SELECT start, MAX(end) OVER (PARTITION BY g, d, s "
               "ORDER BY start, end ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev "
               f"FROM ({' UNION ALL '.join(parts)})) WHERE start < prev")
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()


# -- running paramedir -------------------------------------------------------------------------
@dataclass
class RunResult:
    """One paramedir invocation over several cfgs."""

    outputs: dict[str, Path]
    stdout: str
    stderr: str
    returncode: int
    notes: list[str]
    failures: list[str]


def run_paramedir(paramedir: str, prv: Path, cfgs: list[Path], workdir: Path,
                  timeout: float = 300) -> RunResult:
    """Run paramedir once on ``prv`` with ``cfgs`` (outputs land in ``workdir``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # a throw-away home: paramedir writes ~/.paraver/paraver.xml on its first run
    env["HOME"] = str(workdir)
    proc = subprocess.run([paramedir, "-npr", str(prv), *map(str, cfgs)], cwd=workdir,
                          capture_output=True, text=True, timeout=timeout, env=env,
                          check=False)
    outputs: dict[str, Path] = {}
    failures: list[str] = []
    notes: list[str] = []
    for cfg in cfgs:
        plain, csv_out = workdir / cfg.stem, workdir / f"{cfg.stem}.csv"
        found = plain if plain.exists() else csv_out if csv_out.exists() else None
        if found is None:
            failures.append(f"{cfg.name}: no output file")
        else:
            outputs[cfg.stem] = found
    for line in proc.stdout.splitlines():
        if "aborted" in line.lower():
            failures.append(line.strip())
        elif "appear in the trace" in line:
            notes.append(line.strip())
    if proc.stderr.strip():
        failures.append("stderr: " + proc.stderr.strip().replace("\n", " | "))
    if proc.returncode != 0:
        failures.append(f"exit status {proc.returncode}")
    return RunResult(outputs, proc.stdout, proc.stderr, proc.returncode, notes, failures)


# -- comparison --------------------------------------------------------------------------------
@dataclass
class Row:
    """One stream thread's numbers: paramedir's, and SQLite's (union of intervals, and sum)."""

    export: str
    thread: str
    metric: str
    paramedir: float
    sqlite: float
    sqlite_sum: float

    @property
    def ok(self) -> bool:
        return abs(self.paramedir - self.sqlite) <= 0.5


#: cfg stem -> metric compared (histogram column "1" per thread)
HISTOGRAM_METRICS = {"useful_time_per_gpu": "useful", "comm_time_per_gpu": "comm",
                     "memcpy_sizes": "bytes"}


def compare(export: Path, prv: Path, run: RunResult) -> tuple[list[Row], list[str]]:
    """Rows for every stream thread and metric, and problems (unmapped rows, shape)."""
    objs = read_objects(prv)
    want = sqlite_expectations(export)
    rows: list[Row] = []
    problems: list[str] = []
    label = export.stem
    for stem, metric in HISTOGRAM_METRICS.items():
        path = run.outputs.get(stem)
        if path is None:
            continue
        columns, hist = parse_histogram(path)
        if columns != ["1"] or len(hist) != len(objs.threads):
            problems.append(f"{stem}: columns {columns}, {len(hist)} rows for "
                            f"{len(objs.threads)} threads")
            continue
        seen: set[StreamKey] = set()
        for (task, thread, name), (row_label, values) in zip(objs.threads, hist, strict=True):
            if row_label != name:
                problems.append(f"{stem}: row {row_label!r} where {name!r} was expected")
            key = objs.keys.get((task, thread))
            got = values[0] if values else 0.0
            if key is None:
                if got:
                    problems.append(f"{stem}: {got} on non-stream thread {name}")
                continue
            seen.add(key)
            rows.append(Row(label, f"{task}.{thread} {name}", metric, got,
                            want.union[metric].get(key, 0.0), want.sums[metric].get(key, 0.0)))
        for key, value in want.union[metric].items():
            if key not in seen and value:
                problems.append(f"{stem}: SQLite has {value} for {key}, no thread in trace")
    sweeps = task_sweeps(export)
    for stem, metric in (("kernels_in_flight", "inflight"), ("nccl_compute_overlap", "overlap")):
        path = run.outputs.get(stem)
        if path is None:
            continue
        columns, hist = parse_histogram(path)
        if len(hist) != len(objs.tasks):
            problems.append(f"{stem}: {len(hist)} rows for {len(objs.tasks)} tasks")
            continue
        for task, (row_label, values) in enumerate(hist, 1):
            found = _TASK_PID.search(objs.tasks[task - 1])
            want_task = sweeps.get(int(found.group(1)) if found else -1, {}).get(metric, {})
            # column 0 (nothing running) also counts the trace's time outside the kernels
            for col, got in zip(columns[1:], values[1:], strict=True):
                expect = want_task.get(int(col), 0.0)
                if got or expect:
                    rows.append(Row(label, f"{task} col {col} {row_label}", metric, got,
                                    expect, expect))
    path = run.outputs.get("kernel_names")
    if path is not None:
        nonzero = parse_timeline_nonzero(path)
        for (task, thread), key in objs.keys.items():
            rows.append(Row(label, f"{task}.{thread} {objs.threads_by_id[(task, thread)]}",
                            "kernel", nonzero.get(f"1.{task}.{thread}", 0.0),
                            want.union["kernel"].get(key, 0.0), want.sums["kernel"].get(key, 0.0)))
    return rows, problems


def convert_export(export: Path, out: Path) -> Path:
    """Batch-convert one export with prvstream; the .prv path."""
    from prvstream.daemon.config import load_settings
    from prvstream.daemon.stream.batch import convert

    settings = load_settings(None, {"state_dir": str(out.parent / "state")}, environ={})
    convert([str(export)], out, settings)
    return out.with_name(out.name + ".prv")


def check_export(paramedir: str, export: Path, workdir: Path,
                 cfg_dir: Path = CFG_DIR) -> tuple[list[Row], list[str], list[str]]:
    """Convert, run every applicable cfg, compare: (rows, failures, notes)."""
    prv = convert_export(export, workdir / "trace" / "out")
    present = trace_event_types(prv)
    cfgs, notes = [], []
    for cfg in sorted(cfg_dir.glob("*.cfg")):
        types = cfg_event_types(cfg)
        if types and not types & present:
            notes.append(f"{cfg.name}: n/a (none of {sorted(types)} in this trace)")
        else:
            cfgs.append(cfg)
    run = run_paramedir(paramedir, prv, cfgs, workdir / "run")
    rows, problems = compare(export, prv, run)
    failures = run.failures + problems + [
        f"{r.metric} {r.thread}: paramedir {r.paramedir:.0f} != SQLite {r.sqlite:.0f} "
        f"(union; sum {r.sqlite_sum:.0f})"
        for r in rows if not r.ok]
    return rows, failures, notes + run.notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exports", nargs="*", type=Path, help="exports (default: real ones)")
    parser.add_argument("--paramedir", default=os.environ.get("PARAMEDIR"),
                        help="paramedir executable (default: $PARAMEDIR)")
    parser.add_argument("--all-threads", action="store_true",
                        help="print threads whose numbers are both zero as well")
    args = parser.parse_args(argv)
    if not args.paramedir:
        parser.error("give --paramedir or set PARAMEDIR")
    exports = args.exports or sorted(REAL_DATA.glob("*.sqlite"))
    if not exports:
        parser.error(f"no exports given and none found in {REAL_DATA}")
    bad = 0
    print(f"{'export':<40} {'metric':<7} {'thread':<20} {'paramedir':>14} "
          f"{'sqlite union':>14} {'sqlite sum':>14}  ok")
    for export in exports:
        with tempfile.TemporaryDirectory(prefix="prvstream-paramedir-") as tmp:
            rows, failures, notes = check_export(args.paramedir, export, Path(tmp))
        for r in rows:
            if r.paramedir or r.sqlite or args.all_threads:
                print(f"{r.export[:40]:<40} {r.metric:<7} {r.thread[:20]:<20} "
                      f"{r.paramedir:>14.0f} {r.sqlite:>14.0f} {r.sqlite_sum:>14.0f}  "
                      f"{'yes' if r.ok else 'NO'}")
        overlaps = stream_overlaps(export)
        print(f"  {export.name}: {len(rows)} comparisons, {len(failures)} failure(s), "
              f"{overlaps} overlapping GPU operation(s) on a stream")
        for note in notes:
            print(f"  note: {note}")
        for failure in failures:
            print(f"  FAIL: {failure}")
        bad += len(failures)
    print("all numbers agree, paramedir silent" if not bad else f"{bad} failure(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
