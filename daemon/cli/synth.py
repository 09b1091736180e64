"""``prvstream synth``: write synthetic exports with a real nsys version's schema."""

from __future__ import annotations

import argparse
import sys

from prvstream.daemon.config import Settings
from prvstream.daemon.synthetic.synth import SynthSpec, rows_per_step, static_rows, write_job
from prvstream.sinks.errors import ConfigError
from prvstream.sinks.logger import get_logger

__all__ = ["run"]

log = get_logger(__name__)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """The ``synth`` subcommand."""
    del settings
    spec = SynthSpec(ranks=args.ranks, hosts=args.hosts, gpus_per_rank=args.gpus_per_rank,
                     steps=args.steps, slices=args.slices, nsys_version=args.nsys_version,
                     seed=args.seed, imbalance=args.imbalance)
    if args.interval < 0:
        raise ConfigError("synth: --interval must not be negative")
    paths = write_job(args.outdir, spec, interval=args.interval)
    rows = static_rows(spec) + spec.steps * rows_per_step(spec)
    log.debug("synth_job_written", outdir=str(args.outdir), exports=len(paths),
              rows_per_export=rows)
    sys.stdout.write(f"prvstream: wrote {len(paths)} export(s) to {args.outdir} (about "
                     f"{rows:,} rows each, nsys {spec.nsys_version} schema); convert them with "
                     f"prvstream convert {args.outdir} -o OUT\n")
    return 0

