"""The ``prvstream`` command line: parsers for every subcommand, and exit statuses.

Library code raises ``PrvstreamError``; only ``cli()`` turns errors into exit statuses (2 for
usage and configuration errors, 1 for failed inputs, 0 for success). Each subcommand's work
lives in its own module, imported when the subcommand runs so that ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from prvstream.daemon.kinds.names import ALL_KINDS
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger

if TYPE_CHECKING:
    from prvstream.daemon.config import Settings

__all__ = ["cli", "main"]

log = get_logger(__name__)

#: subcommand -> module whose ``run(args, settings) -> int`` does the work
_HANDLERS = {
    "convert": "prvstream.daemon.cli.convert",
    "watch": "prvstream.daemon.cli.watch",
    "finalize": "prvstream.daemon.cli.finalize",
    "summary": "prvstream.daemon.cli.summary",
    "synth": "prvstream.daemon.cli.synth",
    "demo": "prvstream.daemon.cli.demo",
    "bench": "prvstream.daemon.cli.bench",
}


#: the data kinds ``--trace`` documents (``kinds.names`` imports nothing heavy: the settings
#: module is imported only when a command runs, so that ``--version`` stays fast)
_KINDS = ALL_KINDS


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE",
                   help="TOML settings file (see systemd/prvstream.toml.example)")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default=None)
    p.add_argument("--log-json", action="store_true", default=None,
                   help="log JSON lines even on a terminal")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, so that tests and docs can inspect it."""
    parser = _Parser(
        prog="prvstream",
        description="Turn Nsight Systems SQLite exports into Paraver traces and GPU "
                    "efficiency summaries, live while the job runs.",
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0,
                        help="show the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser)

    p = sub.add_parser("convert", help="convert exports into one Paraver trace (batch)",
                       description="Convert one or more Nsight Systems SQLite exports (files, "
                       "directories of exports, or .nsys-rep with nsys on PATH) into one "
                       "globally sorted Paraver trace OUT.prv/.pcf/.row and OUT.summary.json.")
    p.add_argument("inputs", nargs="+", metavar="INPUT")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="output path without extension")
    p.add_argument("--trace", metavar="KINDS",
                   help=f"comma-separated data kinds to convert (default: all present): "
                        f"{','.join(_KINDS)}")
    p.add_argument("--chunk-rows", type=_positive_int, help="rows per SQLite fetch")
    p.add_argument("--fan-in", type=_positive_int, help="most runs merged at once")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on a TTY")
    _common(p)

    p = sub.add_parser("watch", help="run the daemon: watch job directories, grow traces live",
                       description="Watch ROOT directories for Nsight Systems exports, append "
                       "each complete report to its job's growing Paraver trace, keep rolling "
                       "efficiency summaries, and finalize jobs when they end.")
    p.add_argument("roots", nargs="+", metavar="ROOT")
    p.add_argument("--out", metavar="DIR", help="write outputs under DIR instead of JOB/prvstream")
    p.add_argument("--state", metavar="DIR", help="journal directory (local disk)")
    p.add_argument("--poll", type=float, metavar="SECONDS",
                   help="poll every SECONDS (Lustre/GPFS/NFS) instead of inotify")
    p.add_argument("--settle", type=float, metavar="SECONDS",
                   help="an export must be unchanged this long before it is taken")
    p.add_argument("--idle-finalize", type=float, metavar="SECONDS",
                   help="finalize a job after this long without a new report (0: never)")
    p.add_argument("--workers", type=_positive_int, metavar="N", help="converter workers")
    p.add_argument("--once", action="store_true",
                   help="process what is there (finalizing jobs whose prvstream.done marker "
                        "is present) and exit (for scripts)")
    p.add_argument("--exit-when-finalized", action="store_true",
                   help="exit 0 once every job seen has been finalized (one-job instances, "
                        "e.g. prvstream@.service started by a Slurm prolog)")
    _common(p)

    p = sub.add_parser("finalize", help="compact a job's live trace into its canonical form",
                       description="Merge the blocks of a job's live trace into one globally "
                       "sorted, canonically numbered trace (byte-identical to `prvstream "
                       "convert` of the same reports).")
    p.add_argument("target", metavar="JOB|TRACE")
    p.add_argument("--state", metavar="DIR", help="journal directory")
    p.add_argument("--out", metavar="DIR", help="the --out the daemon used, if any")
    _common(p)

    p = sub.add_parser("summary", help="show a job's GPU efficiency summary",
                       description="Print the efficiency summary of a job (its directory, its "
                       "summary.jsonl or summary.json, or a convert OUT.summary.json).")
    p.add_argument("target", metavar="JOB|SUMMARY")
    p.add_argument("--follow", "-f", action="store_true", help="update as new lines arrive")
    p.add_argument("--view", choices=["cumulative", "window", "phase"], default="cumulative")
    p.add_argument("--json", action="store_true", help="print the latest record as JSON")
    p.add_argument("--plot", metavar="PNG", help="draw bars and metrics over time (matplotlib)")
    p.add_argument("--prom-file", metavar="FILE",
                   help="write Prometheus textfile-collector metrics to FILE")
    p.add_argument("--interval", type=float, default=1.0, help="--follow poll interval (s)")
    _common(p)

    p = sub.add_parser("synth", help="write synthetic exports with the real nsys schema",
                       description="Write one SQLite export per rank (per slice with --slices) "
                       "that a real nsys of the chosen version could have written, modelling "
                       "a data-parallel training loop.")
    p.add_argument("outdir", metavar="OUTDIR")
    p.add_argument("--ranks", type=_positive_int, default=2)
    p.add_argument("--hosts", type=_positive_int, default=None,
                   help="hosts the ranks are spread over (default: one host per rank)")
    p.add_argument("--gpus-per-rank", type=_positive_int, default=1)
    p.add_argument("--steps", type=_positive_int, default=10)
    p.add_argument("--slices", type=_positive_int, default=1,
                   help="capture ranges per rank (like --capture-range-end=repeat)")
    p.add_argument("--interval", type=float, default=0.0, metavar="SECONDS",
                   help="write the files over time, this far apart, renamed into place")
    p.add_argument("--nsys-version", choices=["2022.2", "2024.5", "2026.2"], default="2026.2")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--imbalance", type=float, default=1.25,
                   help="the slowest rank's compute time factor")
    _common(p)

    p = sub.add_parser("demo", help="watch a synthetic multi-rank job being converted live",
                       description="Generate a synthetic multi-rank job whose ranks finish "
                       "over time, run the daemon on it, show the trace and summary growing, "
                       "then finalize.")
    p.add_argument("--ranks", type=_positive_int, default=4)
    p.add_argument("--steps", type=_positive_int, default=20)
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS")
    p.add_argument("--dir", metavar="DIR", help="work here instead of a temporary directory")
    p.add_argument("--keep", action="store_true", help="keep the files")
    _common(p)

    p = sub.add_parser("bench", help="measure conversion speed, memory and live lag",
                       description="Generate a synthetic job, convert it, and print records/s, "
                       "MB/s, peak RSS and the daemon path's lag.")
    p.add_argument("--rows", type=_positive_int, default=1_000_000)
    p.add_argument("--ranks", type=_positive_int, default=1)
    p.add_argument("--out", metavar="DIR", help="work directory (default: temporary)")
    _common(p)
    return parser


class _VersionAction(argparse.Action):
    """``--version``, without reading the installed metadata (importing it costs 40 ms)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        from prvstream.daemon import __version__

        parser.exit(message=f"prvstream {__version__}\n")


def _settings_for(args: argparse.Namespace) -> Settings:
    from prvstream.daemon.config import load_settings

    overrides: dict[str, Any] = {
        "log_level": args.log_level,
        "log_json": args.log_json,
    }
    for flag, key in (("chunk_rows", "chunk_rows"), ("fan_in", "fan_in"), ("poll", "poll"),
                      ("settle", "settle"), ("idle_finalize", "idle_finalize"),
                      ("workers", "workers"), ("state", "state_dir"), ("out", "out_dir")):
        if getattr(args, flag, None) is not None:
            overrides[key] = getattr(args, flag)
    if getattr(args, "trace", None):
        overrides["kinds"] = [k.strip() for k in args.trace.split(",") if k.strip()]
    return load_settings(args.config, overrides)


def cli(*argv: str) -> int:
    """Run the command line with ``argv`` (without the program name); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    from prvstream.daemon.logs import configure_logging
    from prvstream.sinks.errors import ConfigError

    try:
        settings = _settings_for(args)
    except ConfigError as exc:
        sys.stderr.write(f"prvstream: error: {exc}\n")
        return exc.exit_status
    configure_logging(settings.log_level, json=settings.log_json)
    handler = importlib.import_module(_HANDLERS[args.command])
    try:
        status: int = handler.run(args, settings)
    except PrvstreamError as exc:
        log.error("command_failed", command=args.command, error=str(exc),
                  kind=type(exc).__name__)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point."""
    try:
        return cli(*(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # argparse's --help / usage errors
        return exc.code if isinstance(exc.code, int) else 1
