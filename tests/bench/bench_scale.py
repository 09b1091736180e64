"""Benchmark scale: many small reports (batch and daemon) and Dask against one process.

The benchmarks themselves are ``prvstream bench --scale MODE`` (``daemon/synthetic/
scalebench.py``), so an installed prvstream runs them without this checkout's tests; this
script keeps the names and options docs/benchmarks.md used:

- ``many``: ``convert`` of N small exports against one export with as many rows;
- ``daemon``: N small reports dropped at once into a watched job;
- ``tiny``: N tiny reports and 10 N into a watched job (the daemon's peak RSS);
- ``dask``: R ranks of ROWS rows each: ``convert``, live appends (``watch --dask``) and
  ``finalize``, one process against ``--dask SPEC`` (default ``local:2``).

Usage: ``python tests/bench/bench_scale.py many [--reports 400] [--reps 3] [--fan-in N]``,
``... daemon [--reports 1000] [--dask SPEC] [--no-batch]``, ``... tiny [--reports 1000]``,
``... dask [--ranks 16] [--rows 200000] [--spec local:2]``; ``--dir DIR`` keeps the inputs
(a rerun reuses them), ``--json OUT`` writes the numbers.
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["many", "daemon", "tiny", "dask"])
    parser.add_argument("--reports", type=int, default=0)
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--rows", type=int, default=200_000, help="dask: rows per rank")
    parser.add_argument("--spec", default="local:2", help="dask: the cluster")
    parser.add_argument("--reps", type=int, default=3, help="many: paired runs (medians)")
    parser.add_argument("--fan-in", type=int, default=0, help="many: convert --fan-in N")
    parser.add_argument("--dask", default="", help="daemon: run it with --dask SPEC")
    parser.add_argument("--no-batch", action="store_true",
                        help="daemon: skip the batch convert of the same reports")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--dir", help="work directory (kept; inputs reused)")
    parser.add_argument("--json", help="write the result here too")
    args = parser.parse_args()
    from prvstream.daemon.cli.main import cli

    argv = ["bench", "--scale", args.what, "--timeout", str(args.timeout),
            "--reps", str(args.reps), "--ranks", str(args.ranks),
            "--rows", str(args.rows * args.ranks)]
    if args.reports:
        argv += ["--reports", str(args.reports)]
    if args.fan_in:
        argv += ["--fan-in", str(args.fan_in)]
    spec = args.spec if args.what == "dask" else args.dask
    if spec:
        argv += ["--dask", spec]
    if args.no_batch:
        argv.append("--no-batch")
    if args.dir:
        argv += ["--out", args.dir]
    if args.json:
        argv += ["--json", args.json]
    return cli(*argv)


if __name__ == "__main__":
    sys.exit(main())
