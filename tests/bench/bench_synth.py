"""Benchmark ``synth``: rows/s and peak RSS for exports of growing size (memory must stay flat).

Each size runs in a fresh child process, which reports its own peak RSS (``ru_maxrss``).
Usage: ``python tests/bench/bench_synth.py [--big] [--version 2026.2] [--dir DIR]``
(``--big`` adds a 10-million-row export).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, resource, sqlite3, sys, time
from prvstream.daemon.synthetic.synth import SynthSpec, steps_for_rows, write_export
rows, version, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
spec = SynthSpec(ranks=1, nsys_version=version)
spec = SynthSpec(ranks=1, nsys_version=version, steps=steps_for_rows(rows, spec))
wall, cpu = time.perf_counter(), time.process_time()
write_export(path, spec, 0)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    total = sum(conn.execute(f"SELECT count(*) FROM {n}").fetchone()[0] for n in names)
print(json.dumps(dict(rows=total, steps=spec.steps, wall_s=wall, cpu_s=cpu, peak_rss_mib=peak)))
"""


def measure(rows: int, version: str, workdir: Path) -> dict[str, float]:
    """Write one export of about ``rows`` rows in a child process; its numbers."""
    path = workdir / f"bench_{rows}.sqlite"
    out = subprocess.run([sys.executable, "-c", CHILD, str(rows), version, str(path)],
                         check=True, capture_output=True, text=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    result["mib"] = path.stat().st_size / 2**20
    path.unlink()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--big", action="store_true", help="also write a 10M-row export")
    parser.add_argument("--version", default="2026.2", choices=["2022.2", "2024.5", "2026.2"])
    parser.add_argument("--dir", help="work directory (default: a temporary one)")
    args = parser.parse_args()
    sizes = [100_000, 1_000_000] + ([10_000_000] if args.big else [])
    if args.dir:  # the parent of the run's temporary directory, made if need be
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        print(f"{'rows':>10} {'steps':>6} {'wall s':>7} {'cpu s':>7} {'rows/s':>9} "
              f"{'rows/cpu-s':>10} {'MiB':>7} {'peak RSS MiB':>12}")
        for size in sizes:
            r = measure(size, args.version, Path(tmp))
            print(f"{r['rows']:>10,.0f} {r['steps']:>6.0f} {r['wall_s']:>7.2f} "
                  f"{r['cpu_s']:>7.2f} {r['rows'] / r['wall_s']:>9,.0f} "
                  f"{r['rows'] / r['cpu_s']:>10,.0f} {r['mib']:>7.1f} "
                  f"{r['peak_rss_mib']:>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
