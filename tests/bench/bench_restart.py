"""Benchmark a daemon restart: a job of many committed records, then a fresh process opens its
journal and live trace and recovers (truncate, header, .pcf/.row, summaries, the efficiency
model from its checkpoint). Recovery must not depend on the job's size.

Usage: ``python tests/bench/bench_restart.py [--ranks 16] [--steps 400] [--dir DIR]``; prints
the committed records, the .prv size, recovery wall time and the recovering process' peak RSS.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from prvstream.daemon.config import Settings
from prvstream.daemon.live.inputs import report_identity
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.live.livetrace import LiveTrace
from prvstream.daemon.synthetic.synth import SynthSpec, export_name, write_export

_RECOVER = """
import json, resource, sys, time
t0 = time.perf_counter()
from pathlib import Path
from prvstream.daemon.config import Settings
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.live.livetrace import LiveTrace
state, job = sys.argv[1], Path(sys.argv[2])
t1 = time.perf_counter()
journal = JobJournal.open(state, job)
journal.lock()
trace = LiveTrace(journal, job / "prvstream", job.name, Settings(state_dir=state))
trace.recover()
journal.commit()
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "recover_s": t2 - t1,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="bench-restart-"))
    state, job = base / "state", base / "root" / "job"
    job.mkdir(parents=True, exist_ok=True)
    spec = SynthSpec(ranks=args.ranks, hosts=max(1, args.ranks // 4), steps=args.steps)
    settings = Settings(state_dir=str(state))
    journal = JobJournal.open(state, job)
    journal.lock()
    trace = LiveTrace(journal, job / "prvstream", job.name, settings)
    trace.recover()
    started = time.perf_counter()
    for rank in range(spec.ranks):
        path = write_export(job / export_name(spec, rank), spec, rank)
        trace.append(path, report_identity(path))
    build_s = time.perf_counter() - started
    records = sum(r.records for r in journal.reports)
    trace.close()
    journal.unlock()
    done = subprocess.run([sys.executable, "-c", _RECOVER, str(state), str(job)],
                          capture_output=True, text=True, check=True)
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    prv = job / "prvstream" / "job.prv"
    sys.stdout.write(
        f"| {records:,} records | {prv.stat().st_size / 2**20:,.0f} MiB .prv | built in "
        f"{build_s:.1f} s | recover {measured['recover_s']:.3f} s (+ import "
        f"{measured['import_s']:.2f} s) | peak RSS {measured['rss_mib']:.0f} MiB |\n")


if __name__ == "__main__":
    main()
