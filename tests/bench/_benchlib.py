"""Helpers shared by the benchmark scripts: measured child runs, synthetic exports, the floor.

Every measured command runs in its own child process; its peak RSS is the child's own
``ru_maxrss`` (VmHWM) from ``wait4`` plus the peaks of the processes it starts (sampled by
``procmem.TreeSampler``), so one measurement never inherits another's peak and prvstream's
reader process is counted.
"""

from __future__ import annotations

import os
import re
import resource
import sqlite3
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from prvstream.daemon.synthetic.procmem import wait_with_peak

__all__ = [
    "GPU_TABLES",
    "Run",
    "add_context_info",
    "compile_bytecode",
    "count_events",
    "export_rows",
    "load",
    "median",
    "real_data_dir",
    "run_measured",
    "spread",
    "sqlite_floor_cmd",
    "synth_export",
    "warm",
]

#: the tables a CUDA-only comparison reads (kernels, memory operations, CUDA API)
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME")


@dataclass
class Run:
    """One measured child process."""

    wall_s: float
    peak_rss_mib: float
    returncode: int
    load: float
    timed_out: bool = False
    #: user + system CPU seconds of the process and the children it waited for (prvstream's
    #: reader, nsys2prv's ``nsys`` calls): steadier than wall time on a loaded machine
    cpu_s: float = 0.0


def load() -> float:
    """The 1-minute load average (other work on the machine skews timings)."""
    return os.getloadavg()[0]


def warm(path: Path) -> None:
    """Read a file once so that it is in the page cache (this machine's memory reclaim evicts
    files left alone for a while, and a read from disk would time the disk, not the tool)."""
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass


def run_measured(cmd: list[str], *, cwd: Path | None = None, timeout: float = 3600.0,
                 env: dict[str, str] | None = None, log: Path | None = None,
                 warm_first: Path | None = None) -> Run:
    """Run ``cmd`` under ``nice``; its wall time and peak RSS (MiB): its own plus the peaks of
    the processes it starts (prvstream's reader, nsys2prv's ``nsys`` calls). ``warm_first``:
    a file (the input) read into the page cache before the clock starts."""
    if warm_first is not None:
        warm(warm_first)
    before = load()
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    before_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        start = time.perf_counter()
        proc = subprocess.Popen(["nice", "-n", "5", *cmd], cwd=cwd, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
        peak_kib, timed_out = wait_with_peak(proc, timeout)  # with prvstream's reader
        wall = time.perf_counter() - start
    finally:
        if log is not None:
            out.close()  # type: ignore[union-attr]
    after_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after_cpu.ru_utime - before_cpu.ru_utime) + (after_cpu.ru_stime - before_cpu.ru_stime)
    return Run(wall, peak_kib / 1024, proc.returncode, max(before, load()),
               timed_out=timed_out, cpu_s=cpu)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: list[float]) -> dict[str, float]:
    """Median, min and max of a list of measurements (nan when empty)."""
    if not values:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan")}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def compile_bytecode() -> None:
    """Compile prvstream's modules the way ``pip install`` does, so that the measured start-up
    is an installed prvstream's (an editable install under ``PYTHONDONTWRITEBYTECODE``
    otherwise compiles every module at every start)."""
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "daemon"),
                    str(root / "sinks")], check=True, stdout=subprocess.DEVNULL)


def real_data_dir() -> Path:
    """Where the real exports are: ``$PRVSTREAM_TEST_DATA`` or the tests' default."""
    default = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "nsys"
    return Path(os.environ.get("PRVSTREAM_TEST_DATA", str(default)))


def synth_export(path: Path, rows: int, version: str = "2024.5") -> Path:
    """A one-rank synthetic export of about ``rows`` rows (written in a child process)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    code = ("import sys\n"
            "from prvstream.daemon.synthetic.synth import SynthSpec, steps_for_rows, write_export\n"
            "rows, version, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]\n"
            "spec = SynthSpec(ranks=1, nsys_version=version)\n"
            "spec = SynthSpec(ranks=1, nsys_version=version, steps=steps_for_rows(rows, spec))\n"
            "write_export(path + '.tmp', spec, 0)\n")
    subprocess.run([sys.executable, "-c", code, str(rows), version, str(path)], check=True)
    os.replace(str(path) + ".tmp", path)
    return path


def add_context_info(path: Path) -> None:
    """Add ``TARGET_INFO_CUDA_CONTEXT_INFO`` (derived from the kernel rows) to a synthetic export.

    Real nsys writes this table and nsys2prv requires it; the synthetic model does not write it.
    prvstream does not read it, so adding it changes nothing for prvstream.
    """
    with sqlite3.connect(path) as conn:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name="
                        "'TARGET_INFO_CUDA_CONTEXT_INFO'").fetchone():
            return
        conn.execute("CREATE TABLE TARGET_INFO_CUDA_CONTEXT_INFO (nullStreamId INTEGER NOT NULL, "
                     "hwId INTEGER NOT NULL, vmId INTEGER NOT NULL, processId INTEGER NOT NULL, "
                     "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
                     "parentContextId INTEGER, isGreenContext INTEGER)")
        conn.execute("INSERT INTO TARGET_INFO_CUDA_CONTEXT_INFO SELECT DISTINCT 7, 0, 0, "
                     "(globalPid >> 24) & 16777215, deviceId, contextId, NULL, 0 "
                     "FROM CUPTI_ACTIVITY_KIND_KERNEL")


def export_rows(path: Path, tables: tuple[str, ...] | None = None) -> dict[str, int]:
    """Row counts of ``tables`` (default: every table with a ``start`` column)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        counts = {}
        for name in names:
            if tables is not None and name not in tables:
                continue
            cols = {r[1] for r in conn.execute(f"PRAGMA table_info({name})")}
            if tables is None and "start" not in cols:
                continue
            counts[name] = conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
        return counts
    finally:
        conn.close()


def sqlite_floor_cmd(path: Path, tables: list[str]) -> list[str]:
    """The floor: the ``sqlite3`` shell reading the same rows in time order, to /dev/null."""
    sql = "; ".join(f"SELECT * FROM {t} ORDER BY start" for t in tables) + ";"
    return ["sh", "-c", f"sqlite3 'file:{path}?mode=ro' '{sql}' > /dev/null"]


_EV_LINE = re.compile(rb"^2:")


def count_events(prv: Path) -> dict[str, int]:
    """Events that begin something, by group: (type, value != 0) pairs in event records."""
    groups = {b"63000006": "kernel", b"63000007": "kernel", b"63000001": "memop",
              b"63000000": "api"}
    counts = dict.fromkeys(("kernel", "memop", "api"), 0)
    with open(prv, "rb") as fh:
        next(fh)  # header
        for line in fh:
            if not _EV_LINE.match(line):
                continue
            fields = line.rstrip().split(b":")
            pairs = fields[6:]
            for i in range(0, len(pairs) - 1, 2):
                group = groups.get(pairs[i])
                if group is not None and pairs[i + 1] != b"0":
                    counts[group] += 1
    return counts
