"""Benchmark the live path: a 64-rank synthetic job arriving over time, watched by a real
``prvstream watch`` process. Measures the lag from an export being renamed into place
(complete) to its block being committed (journal ``committed_ns``) and to ``status.json``
counting it, the finalize time after ``prvstream.done``, and the daemon's peak RSS (VmHWM).

Usage: ``python tests/bench/bench_daemon_lag.py [--ranks 64] [--steps 5] [--gap 0.1 0.5]
[--settle 0.2] [--poll 0] [--seed 0] [--dir DIR]``; prints a markdown table row.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from prvstream.daemon.synthetic.synth import SynthSpec, export_name, write_export
from tests.daemon.daemon_proc import (
    DaemonProcess,
    job_status,
    load_journal,
    wait_for,
)


def vm_hwm_mib(pid: int) -> float:
    """Peak resident set size of ``pid`` (``VmHWM`` in /proc/<pid>/status), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(args: argparse.Namespace, base: Path) -> dict[str, float]:
    spec = SynthSpec(ranks=args.ranks, hosts=max(1, args.ranks // 4), steps=args.steps,
                     seed=args.seed)
    staging = base / "staging"
    staging.mkdir()
    sources = [write_export(staging / export_name(spec, r), spec, r) for r in range(spec.ranks)]
    job = base / "root" / "job"
    job.mkdir(parents=True)
    extra = ("--poll", str(args.poll)) if args.poll > 0 else ()
    daemon = DaemonProcess([job.parent], base / "state", base / "logs", settle=args.settle,
                           extra=extra)
    rng = random.Random(args.seed)
    renamed_ns: dict[str, int] = {}
    seen_ns: dict[int, int] = {}   # status.json report count -> first time seen
    stop = threading.Event()

    def watch_status() -> None:
        while not stop.is_set():
            n = job_status(job).get("reports", 0)
            now = time.time_ns()
            for k in range(1, n + 1):
                seen_ns.setdefault(k, now)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch_status, daemon=True)
    with daemon:
        daemon.start()
        watcher.start()
        began = time.monotonic()
        for i, src in enumerate(sources):
            if i:
                time.sleep(rng.uniform(*args.gap))
            os.rename(src, job / src.name)  # complete the moment it appears
            renamed_ns[src.name] = time.time_ns()
        arrivals_s = time.monotonic() - began
        wait_for(lambda: job_status(job).get("reports") == spec.ranks, 300, "every report",
                 daemon)
        live_peak = vm_hwm_mib(daemon.pid)
        t0 = time.monotonic()
        (job / "prvstream.done").touch()
        wait_for(lambda: bool(job_status(job).get("finalized")), 300, "finalized", daemon)
        finalize_s = time.monotonic() - t0
        stop.set()
        watcher.join(5)
        peak = vm_hwm_mib(daemon.pid)
        status = daemon.terminate()
        if status != 0:
            raise SystemExit(f"daemon exited {status}\n{daemon.tail()}")
    journal = load_journal(base / "state", job)
    assert journal is not None
    commit_lag = [(r.committed_ns - renamed_ns[r.name]) / 1e9 for r in journal.reports]
    order = sorted(renamed_ns.values())
    status_lag = [(seen_ns[k] - order[k - 1]) / 1e9 for k in range(1, spec.ranks + 1)]
    return {
        "ranks": spec.ranks, "records": job_status(job)["records"], "arrivals_s": arrivals_s,
        "median": statistics.median(commit_lag), "p95": pct(commit_lag, 0.95),
        "max": max(commit_lag), "status_median": statistics.median(status_lag),
        "status_p95": pct(status_lag, 0.95), "status_max": max(status_lag),
        "finalize_s": finalize_s, "peak_rss_mib": peak, "live_peak_rss_mib": live_peak,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--gap", type=float, nargs=2, default=(0.1, 0.5), metavar=("MIN", "MAX"),
                        help="seconds between two arrivals (uniform)")
    parser.add_argument("--settle", type=float, default=0.2)
    parser.add_argument("--poll", type=float, default=0.0, help="poll interval (0: inotify)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", help="work directory (default: a temporary one)")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))  # warnings
    if args.dir:  # the parent of the run's temporary directory, made if need be
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        r = run(args, Path(tmp))
    mode = f"poll {args.poll:g} s" if args.poll > 0 else "inotify"
    print("| ranks | steps | records | mode | settle s | arrivals s | commit lag median / p95 / "
          "max s | status.json lag median / p95 / max s | finalize s | "
          "daemon peak RSS MiB live / after finalize |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {r['ranks']:.0f} | {args.steps} | {r['records']:,.0f} | {mode} | {args.settle:g} "
          f"| {r['arrivals_s']:.1f} | {r['median']:.2f} / {r['p95']:.2f} / {r['max']:.2f} "
          f"| {r['status_median']:.2f} / {r['status_p95']:.2f} / {r['status_max']:.2f} "
          f"| {r['finalize_s']:.2f} | {r['live_peak_rss_mib']:.0f} / {r['peak_rss_mib']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
