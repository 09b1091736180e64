"""The ``prvstream`` command line: parsers for every subcommand, and exit statuses.

Library code raises ``PrvstreamError``; only ``cli()`` turns errors into exit statuses (2 for
usage and configuration errors, 1 for failed inputs, 0 for success). Each subcommand's work
lives in its own module, imported when the subcommand runs so that ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
import time
import types
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from prvstream.daemon.kinds.names import ALL_KINDS
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger

if TYPE_CHECKING:
    from prvstream.daemon.config import Settings

__all__ = ["cli", "console", "main"]

log = get_logger(__name__)

# The settings module is imported only when a command runs, so that --version stays fast;
# tests check that these copies match it.
#: the data kinds as --trace spells them (``config.USER_KINDS``: Paraver communication
#: records are "links" to a person)
_KINDS = tuple("links" if k == "comm" else k for k in ALL_KINDS)
#: built-in values of the settings that have flags, shown in --help (``config.Settings``)
_DEFAULTS: dict[str, object] = {
    "chunk_rows": 2048, "fan_in": 16, "poll": 0.0, "settle": 5.0, "idle_finalize": 900.0,
    "workers": 2,
    "state_dir": "$STATE_DIRECTORY, else $XDG_STATE_HOME/prvstream, else "
                 "~/.local/state/prvstream",
}

#: subcommand -> module whose ``run(args, settings) -> int`` does the work
_HANDLERS = {
    "convert": "prvstream.daemon.cli.convert",
    "watch": "prvstream.daemon.cli.watch",
    "finalize": "prvstream.daemon.cli.finalize",
    "summary": "prvstream.daemon.cli.summary",
    "report": "prvstream.daemon.cli.report",
    "synth": "prvstream.daemon.cli.synth",
    "demo": "prvstream.daemon.cli.demo",
    "bench": "prvstream.daemon.cli.bench",
    "doctor": "prvstream.daemon.cli.doctor",
    "completion": "prvstream.daemon.cli.completion",
}

#: commands run by a service manager rather than a person (JSON logs off a terminal)
_SERVICE_COMMANDS = frozenset({"watch"})

_TOUR = """\
commands (prvstream COMMAND --help for each one's options):
  demo        a synthetic job converted live: start here     prvstream demo
  convert     exports -> one Paraver trace + efficiency      prvstream convert run/*.sqlite -o run
  summary     a job's or a conversion's GPU efficiency       prvstream summary run.summary.json
  report      a job's efficiency as one HTML page            prvstream report run -o run.html
  watch       the daemon: traces grow as reports land        prvstream watch /scratch/profiles
  finalize    compact a job's live trace (canonical form)    prvstream finalize /scratch/profiles/42
  doctor      check this machine for the daemon              prvstream doctor /scratch/profiles
  synth       synthetic exports with the real nsys schema    prvstream synth /tmp/job --ranks 4
  bench       conversion speed, memory and live lag          prvstream bench --rows 100000
  completion  shell completion script                        prvstream completion bash
"""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _terminal_columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` finds it (``COLUMNS``, then the
    terminal of standard output, then 80), without importing ``shutil``: argparse imports it
    for every parser it builds, and it loads ``bz2``, ``lzma`` and ``zlib`` with it."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, when it has one worth showing."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         _terminal_columns() - 2 if width is None else width)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default:" in text or "%(default)" in text or action.option_strings == []:
            return text
        if action.default in (None, False, argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


class _TourFormatter(_HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The top-level help: the tour keeps its columns."""


def _default(key: str) -> str:
    """``(default: X)`` for a flag backed by a setting: the built-in value (a --config file
    or a PRVSTREAM_<KEY> variable overrides it)."""
    return f"(default: {_DEFAULTS[key]}; or {key} in --config, PRVSTREAM_{key.upper()})"


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _kinds(text: str) -> list[str]:
    from prvstream.daemon.config import parse_kinds
    from prvstream.sinks.errors import ConfigError

    try:
        return parse_kinds(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _dask(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dask", metavar="SPEC",
                   help="run per-report work on Dask: local:N (N worker processes here), "
                        "tcp://HOST:PORT or a scheduler file; the exports and outputs must be "
                        "on a file system every worker sees (needs the distributed package; "
                        "or dask in --config, PRVSTREAM_DASK)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE",
                   help="TOML settings file (see systemd/prvstream.toml.example)")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default=None,
                   help="least severe log events shown (default: warning; info for watch)")
    p.add_argument("--log-json", action="store_true", default=None,
                   help="log JSON lines (default: readable lines; watch writes JSON under "
                        "systemd or when stderr is not a terminal)")


def _add(sub: Any, name: str, description: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, description=description, formatter_class=_HelpFormatter)
    return parser


def _convert_parser(sub: Any) -> None:
    p = _add(sub, "convert", "Convert one or more Nsight Systems SQLite exports (files, "
             "directories of exports, or .nsys-rep with nsys on PATH) into one globally "
             "sorted Paraver trace OUT.prv/.pcf/.row and OUT.summary.json, then print the "
             "records written and the efficiency (PE, LB, CE, OE and the verdict).")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help=".sqlite export, directory of exports, or .nsys-rep")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="output path without extension (OUT.prv, OUT.pcf, ...)")
    p.add_argument("--trace", metavar="KINDS", type=_kinds,
                   help=f"comma-separated data kinds to convert, from: {', '.join(_KINDS)} "
                        "(default: every kind present)")
    p.add_argument("--chunk-rows", type=_positive_int, metavar="N",
                   help=f"rows per SQLite fetch; memory grows with it {_default('chunk_rows')}")
    p.add_argument("--fan-in", type=_positive_int, metavar="N",
                   help=f"most runs merged at once {_default('fan_in')}")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (it is shown only on a terminal)")
    p.add_argument("--force", action="store_true",
                   help="replace output files even when prvstream did not write them")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print nothing on success (errors still go to stderr)")
    p.add_argument("--timings", action="store_true",
                   help="also print where the time went: start-up, planning, converting "
                        "(and waiting for the reader process), writing out")
    _dask(p)
    _common(p)


def _watch_parser(sub: Any) -> None:
    p = _add(sub, "watch", "Watch ROOT directories for Nsight Systems exports, append each "
             "complete report to its job's growing Paraver trace, keep rolling efficiency "
             "summaries, and finalize jobs when they end (touch JOB/prvstream.done).")
    p.add_argument("roots", nargs="+", metavar="ROOT", help="directory holding job directories")
    p.add_argument("--out", metavar="DIR",
                   help="write outputs under DIR instead of JOB/prvstream (default: JOB/prvstream;"
                        " or out_dir in --config, PRVSTREAM_OUT_DIR)")
    p.add_argument("--state", metavar="DIR",
                   help=f"journal directory, on local disk {_default('state_dir')}")
    p.add_argument("--poll", type=float, metavar="SECONDS",
                   help="poll every SECONDS instead of inotify; needed on Lustre/GPFS/NFS "
                        f"{_default('poll')}")
    p.add_argument("--settle", type=float, metavar="SECONDS",
                   help=f"an export must be unchanged this long before it is taken "
                        f"{_default('settle')}")
    p.add_argument("--idle-finalize", type=float, metavar="SECONDS",
                   help=f"finalize a job after this long without a new report, 0: never "
                        f"{_default('idle_finalize')}")
    p.add_argument("--workers", type=_positive_int, metavar="N",
                   help=f"reports converted at once {_default('workers')}")
    p.add_argument("--expect", type=_positive_int, metavar="N",
                   help="ranks every job should have: status.json lists the missing ones and "
                        "`prvstream summary` warns (a job's prvstream.expect file holding N "
                        "wins; or expect_ranks in --config, PRVSTREAM_EXPECT_RANKS)")
    p.add_argument("--once", action="store_true",
                   help="process what is there (finalizing jobs whose prvstream.done marker "
                        "is present) and exit (for scripts)")
    p.add_argument("--exit-when-finalized", action="store_true",
                   help="exit 0 once every job seen has been finalized (one-job instances, "
                        "e.g. prvstream@.service started by a Slurm prolog)")
    _dask(p)
    _common(p)


def _finalize_parser(sub: Any) -> None:
    p = _add(sub, "finalize", "Merge the blocks of a job's live trace into one globally "
             "sorted, canonically numbered trace (byte-identical to `prvstream convert` of the "
             "same reports). While the daemon runs, touch JOB/prvstream.done instead.")
    p.add_argument("target", metavar="JOB|TRACE",
                   help="the job directory the daemon watched, or its .prv")
    p.add_argument("--state", metavar="DIR",
                   help=f"the journal directory the daemon used {_default('state_dir')}")
    p.add_argument("--out", metavar="DIR",
                   help="the --out the daemon used (default: JOB/prvstream)")
    _dask(p)
    _common(p)


def _summary_parser(sub: Any) -> None:
    p = _add(sub, "summary", "Print the efficiency summary of a job (its directory, its "
             "summary.jsonl or summary.json, or a convert OUT.summary.json).")
    p.add_argument("target", metavar="JOB|SUMMARY",
                   help="job directory, summary.jsonl, summary.json or OUT.summary.json")
    p.add_argument("--follow", "-f", action="store_true",
                   help="keep printing updates as new lines arrive, until Ctrl-C")
    p.add_argument("--view", choices=["cumulative", "window", "phase", "kernels", "nccl",
                                      "memcpy", "nvtx"], default="cumulative",
                   help="the whole job, per time window, per NVTX phase, or a top-N table "
                        "(kernels, NCCL collectives, memcpy by kind, NVTX ranges)")
    p.add_argument("--top", type=_positive_int, default=None, metavar="N",
                   help="with a table view: the N largest names, then one 'other' row")
    p.add_argument("--phase", metavar="NAME", default=None,
                   help="with a table view: the table of NVTX phase NAME (its occurrences "
                        "summed, e.g. ProfilerStep) instead of the whole job's")
    p.add_argument("--json", action="store_true", help="print the latest record as JSON")
    p.add_argument("--plot", metavar="PNG",
                   help="draw bars and metrics over time into PNG (needs matplotlib: the "
                        "plot extra)")
    p.add_argument("--prom-file", metavar="FILE",
                   help="write Prometheus textfile-collector metrics to FILE")
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                   help="how often --follow looks for new lines")
    _common(p)


def _report_parser(sub: Any) -> None:
    p = _add(sub, "report", "Write one self-contained HTML page (inline SVG, no network) of a "
             "job's efficiency: metrics tree, verdict and culprit, devices, metrics over time "
             "and phases. SRC is a job directory, a summary, or Nsight Systems exports "
             "(converted with windows sized to the job's span).")
    p.add_argument("sources", nargs="+", metavar="SRC",
                   help="job directory, summary.json(l), or .sqlite exports")
    p.add_argument("-o", "--output", required=True, metavar="FILE.html",
                   help="the HTML file to write")
    _common(p)


def _synth_parser(sub: Any) -> None:
    p = _add(sub, "synth", "Write one SQLite export per rank (per slice with --slices) that "
             "a real nsys of the chosen version could have written, modelling a data-parallel "
             "training loop.")
    p.add_argument("outdir", metavar="OUTDIR", help="directory to write the exports into")
    p.add_argument("--ranks", type=_positive_int, default=2, metavar="N",
                   help="ranks (one export each)")
    p.add_argument("--hosts", type=_positive_int, default=None, metavar="N",
                   help="hosts the ranks are spread over (default: one host per rank)")
    p.add_argument("--gpus-per-rank", type=_positive_int, default=1, metavar="N",
                   help="GPUs each rank drives")
    p.add_argument("--steps", type=_positive_int, default=10, metavar="N",
                   help="training steps (NVTX step ranges) per rank")
    p.add_argument("--slices", type=_positive_int, default=1, metavar="N",
                   help="capture ranges per rank (like --capture-range-end=repeat)")
    p.add_argument("--interval", type=float, default=0.0, metavar="SECONDS",
                   help="write the files over time, this far apart, renamed into place")
    p.add_argument("--nsys-version", choices=["2022.2", "2024.5", "2026.2"], default="2026.2",
                   help="the nsys whose export schema is written")
    p.add_argument("--seed", type=int, default=0, help="random seed (same seed, same files)")
    p.add_argument("--imbalance", type=float, default=1.25, metavar="FACTOR",
                   help="the slowest rank's compute time factor")
    _common(p)


def _demo_parser(sub: Any) -> None:
    p = _add(sub, "demo", "Generate a synthetic multi-rank job whose ranks finish over time, "
             "run the daemon on it, show the trace and summary growing, then finalize.")
    p.add_argument("--ranks", type=_positive_int, default=4, metavar="N",
                   help="ranks in the synthetic job (one export each)")
    p.add_argument("--steps", type=_positive_int, default=20, metavar="N",
                   help="training steps per rank")
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                   help="time between two ranks' exports appearing")
    p.add_argument("--dir", metavar="DIR",
                   help="work here and keep the files (default: a temporary directory)")
    p.add_argument("--keep", action="store_true",
                   help="keep the files of the temporary directory")
    _common(p)


def _bench_parser(sub: Any) -> None:
    p = _add(sub, "bench", "Generate a synthetic job, convert it, and print records/s, MB/s, "
             "peak RSS and the daemon path's lag; with --scale, a scale-out benchmark.")
    p.add_argument("--rows", type=_positive_int, default=None, metavar="N",
                   help="rows in the synthetic job (default 1,000,000; --scale dask: "
                        "3,200,000)")
    p.add_argument("--ranks", type=_positive_int, default=None, metavar="N",
                   help="ranks (exports) the rows are spread over (default 1; --scale dask: "
                        "16)")
    p.add_argument("--out", metavar="DIR", help="work directory (default: temporary)")
    p.add_argument("--scale", choices=["many", "daemon", "tiny", "dask"], metavar="MODE",
                   help="many: N small exports against one as big; daemon: N small reports "
                        "dropped at once into a watched job; tiny: N and 10 N tiny reports "
                        "(daemon memory); dask: convert, live appends and finalize, one "
                        "process against --dask SPEC (default local:2). Prints JSON")
    p.add_argument("--reports", type=_positive_int, default=0, metavar="N",
                   help="--scale many/daemon/tiny: reports (default 400 for many, else 1,000)")
    p.add_argument("--reps", type=_positive_int, default=3, metavar="N",
                   help="--scale many: paired runs (medians)")
    p.add_argument("--fan-in", type=_positive_int, metavar="N",
                   help="--scale many: convert the small exports with --fan-in N")
    p.add_argument("--no-batch", action="store_true",
                   help="--scale daemon: skip the batch convert of the same reports")
    p.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                   help="--scale: longest a measured command may take")
    p.add_argument("--json", metavar="FILE", help="--scale: write the numbers here too")
    _dask(p)
    _common(p)


def _doctor_parser(sub: Any) -> None:
    p = _add(sub, "doctor", "Check what the daemon needs on this machine: inotify limits, "
             "network file systems (which need --poll), write access and free disk for "
             "outputs and state, nsys for .nsys-rep reports, the C extensions. Exit status 1 "
             "when a check fails.")
    p.add_argument("roots", nargs="*", metavar="ROOT",
                   help="the roots watch will watch (none: only this machine's checks)")
    p.add_argument("--out", metavar="DIR",
                   help="the --out watch will use (default: JOB/prvstream under each root)")
    p.add_argument("--state", metavar="DIR",
                   help=f"the journal directory watch will use {_default('state_dir')}")
    p.add_argument("--poll", type=float, metavar="SECONDS",
                   help=f"the --poll watch will use {_default('poll')}")
    _common(p)


def _completion_parser(sub: Any) -> None:
    p = _add(sub, "completion", "Print a shell completion script generated from this command "
             "line. bash: prvstream completion bash > ~/.local/share/bash-completion/"
             "completions/prvstream; zsh: prvstream completion zsh > ~/.zfunc/_prvstream "
             "(with ~/.zfunc in fpath).")
    p.add_argument("shell", choices=["bash", "zsh"], help="the shell to complete for")
    p.set_defaults(build_parser=build_parser)


#: subcommand -> adds its parser, in the order completion lists them
_PARSERS: dict[str, Callable[[Any], None]] = {
    "convert": _convert_parser,
    "watch": _watch_parser,
    "finalize": _finalize_parser,
    "summary": _summary_parser,
    "report": _report_parser,
    "synth": _synth_parser,
    "demo": _demo_parser,
    "bench": _bench_parser,
    "doctor": _doctor_parser,
    "completion": _completion_parser,
}


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line, so that tests, docs and shell completion can inspect it; with
    ``commands``, only those subcommands (``_wanted``: building all ten parsers is most of the
    command line's start-up)."""
    parser = _Parser(
        prog="prvstream", usage="prvstream [-h] [--version] COMMAND [ARGS...]",
        description="Turn Nsight Systems SQLite exports into Paraver traces and GPU\n"
                    "efficiency summaries, live while the job runs.\n\n" + _TOUR,
        formatter_class=_TourFormatter,
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0,
                        help="show the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser, help=argparse.SUPPRESS, prog="prvstream")
    wanted = _PARSERS.keys() if commands is None else set(commands)
    for name, add in _PARSERS.items():
        if name in wanted:
            add(sub)
    return parser


def _wanted(argv: Sequence[str]) -> list[str] | None:
    """The subcommands whose parsers a run with ``argv`` needs: its own, none for
    ``--version``, every one otherwise (help, usage errors, the tour)."""
    if argv and argv[0] in _PARSERS:
        return [argv[0]]
    return [] if list(argv) == ["--version"] else None


class _VersionAction(argparse.Action):
    """``--version``, without reading the installed metadata (importing it costs 40 ms)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        from prvstream.daemon import __version__

        parser.exit(message=f"prvstream {__version__}\n")


def _settings_for(args: argparse.Namespace) -> Settings:
    from prvstream.daemon.config import FLAGS, load_settings

    overrides: dict[str, Any] = {}
    for key, flag in FLAGS.items():
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is not None:
            overrides[key] = value
    if getattr(args, "quiet", False) and args.log_level is None:
        overrides["log_level"] = "error"
    return load_settings(getattr(args, "config", None), overrides)


def cli(*argv: str) -> int:
    """Run the command line with ``argv`` (without the program name); return the exit status."""
    entered = time.perf_counter()  # ``--timings`` of a call from Python start here
    parser = build_parser(_wanted(argv))
    if not argv:  # a first look: the tour
        sys.stderr.write(parser.format_help())
        return 2
    args = parser.parse_args(list(argv))
    from prvstream.daemon.logs import configure_logging
    from prvstream.sinks.errors import ConfigError

    try:
        settings = _settings_for(args)
    except ConfigError as exc:  # before logging is set up: --log-json still means JSON
        if getattr(args, "log_json", None):
            import json

            sys.stderr.write(json.dumps({"command": args.command, "error": str(exc),
                                         "kind": type(exc).__name__, "event": "config_invalid",
                                         "level": "error"}) + "\n")
        else:
            sys.stderr.write(f"prvstream: error: {exc}\n")
        return exc.exit_status
    as_json = configure_logging(settings.log_level, json=settings.log_json,
                                service=args.command in _SERVICE_COMMANDS)
    if args.command == "convert" and not settings.dask:
        # one large export: its reader process starts while the converter's modules load
        from prvstream.daemon.nsys import readerstart

        readerstart.start_early(args.inputs, settings.reader and not settings.pure_python)
    if _numpy_pending:
        _load_numpy()
    from prvstream.daemon import runtime

    runtime.apply(settings)
    handler = importlib.import_module(_HANDLERS[args.command])
    _started()
    timed = bool(getattr(args, "timings", False))  # ``convert --timings``
    if timed:
        from prvstream.daemon import stages

        stages.start(None if _whole_process else entered)  # the console: the process's start
        stages.mark("loaded")
    try:
        status: int = handler.run(args, settings)
    except PrvstreamError as exc:
        if as_json:
            log.error("command_failed", command=args.command, error=str(exc),
                      kind=type(exc).__name__)
        else:
            sys.stderr.write(f"prvstream: error: {exc}\n")
        return exc.exit_status
    except KeyboardInterrupt:
        return 130
    finally:
        if timed:
            stages.stop()
    return status


#: whether ``main`` paused the cyclic garbage collector for this process's start-up
_paused = False
#: whether ``cli`` is to load numpy (``_load_numpy``) before the command's modules
_numpy_pending = False
#: whether this process is the console script's (``convert --timings`` counts from its start)
_whole_process = False


def _starting() -> None:
    """Pause the cyclic garbage collector while the command's modules load: they make tens of
    thousands of objects that live until exit and next to no garbage, and the collector's
    passes over them were 3% of a small conversion's instructions."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def _started() -> None:
    """The command's modules are loaded: what exists now lives until exit, so it leaves the
    collector's generations for good (``gc.freeze``: later passes, and the interpreter's
    at exit, skip it), and the collector runs again for what the command makes."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()


def _load_msgspec() -> None:
    """Import msgspec without ``typing_extensions`` when nothing has imported either yet.

    msgspec's C module imports ``msgspec._utils`` as it loads, which takes
    ``get_type_hints``, ``Required`` and ``NotRequired`` from ``typing_extensions`` when it
    can and from ``typing`` otherwise; on Python 3.11 and later those are the same objects
    (``typing_extensions`` re-exports them), but importing ``typing_extensions`` (with
    ``inspect``, ``ast``, ``dis`` and ``tokenize``) was 17 M of a small conversion's 686 M
    instructions. The module is hidden only while msgspec loads, in the console script's
    own process before any other thread exists; a later ``import typing_extensions``
    works as usual."""
    if "msgspec" in sys.modules or "typing_extensions" in sys.modules:
        return
    sys.modules["typing_extensions"] = None  # type: ignore[assignment]  # import fails
    try:
        import msgspec  # noqa: F401
    finally:
        if sys.modules.get("typing_extensions", 0) is None:
            del sys.modules["typing_extensions"]


def _as_written(doc: str) -> str:
    return doc


def _load_numpy() -> None:
    """Import numpy with its docstrings left as written, when nothing has imported it yet.

    As it loads, numpy attaches about 400 docstrings to its compiled functions and methods,
    each cleaned first: ``inspect.cleandoc`` (its lines' common indentation removed, line by
    line in Python) and, for the array methods, ``textwrap.dedent`` (regular expressions).
    That cleaning was 47 M of a small conversion's 621 M instructions (callgrind), for text
    only ``help()`` shows. Both are swapped for the identity only while numpy's modules load,
    in the console script's own process before any other thread exists: what changes is the
    indentation of numpy's docstrings in this process (their signature lines are the same);
    nothing of numpy's that a conversion calls reads them, and a module imported later
    (``numpy.ma`` formats with ``dedent``) gets the real ones.

    Likewise ``numpy._typing`` (the static types behind ``numpy.typing``: about 7 ms and
    46 M instructions of ``Literal`` unions built as it loads) stands aside: numpy 2's
    ``linalg`` takes only ``NDArray`` from it, to annotate the fields of its result tuples
    (``EigResult`` and the like), and gets ``numpy.ndarray`` instead (``_TypingStandIn``).
    The stand-in leaves ``sys.modules`` once numpy has loaded, so ``import numpy.typing``
    later loads the real module; a numpy that asks it for anything else gets the real
    module's, loaded there and then (numpy's compiled core cannot load twice in a process,
    so a failed import could not be tried again)."""
    if "numpy" in sys.modules:
        return
    import importlib
    import inspect
    import textwrap

    cleaners = ((inspect, "cleandoc", inspect.cleandoc), (textwrap, "dedent", textwrap.dedent))
    for module, name, _ in cleaners:
        setattr(module, name, _as_written)
    stand_in = _TypingStandIn("numpy._typing")
    sys.modules.setdefault(stand_in.__name__, stand_in)
    try:
        importlib.import_module("numpy")
    except Exception:  # a numpy whose loading needs them: loaded again, as it is everywhere
        for loaded in [m for m in sys.modules if m == "numpy" or m.startswith("numpy.")]:
            del sys.modules[loaded]
    finally:
        for module, name, cleaner in cleaners:
            setattr(module, name, cleaner)
        if sys.modules.get(stand_in.__name__) is stand_in:  # never an attribute of numpy's:
            del sys.modules[stand_in.__name__]  # the import system sets those as it loads one
    if "numpy" not in sys.modules:
        importlib.import_module("numpy")


class _TypingStandIn(types.ModuleType):
    """``numpy._typing`` while numpy loads (``_load_numpy``): ``NDArray`` is the array type
    itself; any other name is the real module's, which then takes the stand-in's place."""

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):  # what the import system looks for (``__path__``...)
            raise AttributeError(name)
        if sys.modules.get(self.__name__) is self:
            array = getattr(sys.modules.get("numpy"), "ndarray", None)
            if name == "NDArray" and array is not None:
                return array
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point (``argv`` given: a call from Python, which leaves the
    process's garbage collector alone)."""
    global _numpy_pending, _whole_process
    # numpy's BLAS starts a thread per core as numpy loads (about 0.1 s of CPU a process on
    # two cores); prvstream does no linear algebra: one thread unless the user chose. The
    # reader process inherits it.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if argv is None:
        _whole_process = True
        _starting()
        if sys.argv[1:2] and sys.argv[1] in _HANDLERS:  # every command's modules use msgspec
            _load_msgspec()
        if sys.argv[1:2] == ["convert"]:  # a process of its own, one thread per connection
            from prvstream.daemon.nsys.sqlitemode import unlock_connections

            unlock_connections()
            _numpy_pending = True  # loaded by ``cli`` once the reader may have started
    try:
        return cli(*(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # argparse's --help / usage errors
        return exc.code if isinstance(exc.code, int) else 1


def _ends_without_teardown() -> bool:
    """Whether this process may end now without the interpreter's teardown: a conversion,
    with no thread but this one left (``threading``'s own exit joins the others)."""
    if sys.argv[1:2] != ["convert"]:
        return False
    threading = sys.modules.get("threading")
    return threading is None or threading.active_count() == 1


def console() -> NoReturn:
    """The console script (``prvstream``, ``python -m prvstream.daemon``): ``main()``, then
    the exit.

    After a conversion, once its outputs are fsynced and renamed and its closing line is
    written, what the interpreter's teardown would still do is free the objects of every
    loaded module one by one (11 M of a small conversion's 669 M instructions, callgrind):
    the process ends with ``os._exit`` instead, after the ``atexit`` callbacks (the
    interpreter's first step at exit) and the flush of standard output and error. Any
    other command, a conversion that left a thread running, or a flush that fails (a
    closed pipe) ends the usual way."""
    status = main()
    if _ends_without_teardown():
        import atexit

        atexit._run_exitfuncs()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            sys.exit(status)
        os._exit(status)
    sys.exit(status)
