"""Run every benchmark script once, one after the other, and collect what docs/benchmarks.md
reports: each script's log, its tables, the commit and the machine's load around it.

``docs/benchmarks.md`` is written from one run of this suite, so that every number in it
comes from the same code on the same machine at one time. Each step runs as a child process
(the scripts time their own children); the suite only sequences them, records the load
before and after each (a step that ran at a high load says so), and gathers the Markdown
tables the scripts print into ``OUT/results.md``, with ``OUT/suite.json`` beside it.

Usage: ``python tests/bench/run_all.py --out DIR [--only a,b] [--skip a,b] [--quick]
[--list]``. ``--quick`` uses small sizes and few repetitions (to check the suite itself, not
for the docs). Needs what the scripts need: the ``sqlite3`` shell, PyPI once for nsys2prv,
``PRVSTREAM_TEST_DATA`` for the real exports, ``PARAMEDIR`` for the cfg check.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _benchlib import load

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: a structured log line (timestamp first), not a result
LOG_RECORD = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d")


@dataclass(frozen=True)
class Step:
    """One benchmark script and its arguments (``{work}`` is the step's own directory)."""

    name: str
    script: str
    args: tuple[str, ...]
    quick: tuple[str, ...]
    #: minutes it takes on a quiet 2-core machine (for the plan printed first)
    minutes: float
    needs: tuple[str, ...] = field(default=())


STEPS: tuple[Step, ...] = (
    Step("disorder", "disorder.py", ("--json", "{work}/disorder.json"),
         ("--rows", "100000", "--json", "{work}/disorder.json"), 2),
    Step("compare", "compare_nsys2prv.py",
         ("--sizes", "100000,1000000", "--pipeline", "180000", "--reps", "5", "--dir", "{work}",
          "--json", "{work}/compare.json"),
         ("--sizes", "10000", "--pipeline", "0", "--reps", "1", "--no-real", "--dir", "{work}",
          "--json", "{work}/compare.json"), 22),
    Step("convert", "bench_convert.py",
         ("--sizes", "1000000,10000000", "--reps", "5", "--big-reps", "3",
          "--generators", "synth,pipeline", "--dir", "{work}", "--json", "{work}/convert.json"),
         ("--sizes", "100000", "--reps", "1", "--generators", "synth", "--dir", "{work}",
          "--json", "{work}/convert.json"), 14),
    Step("scale-many", "bench_scale.py",
         ("many", "--reports", "400", "--reps", "3", "--dir", "{work}",
          "--json", "{work}/many.json"),
         ("many", "--reports", "20", "--reps", "1", "--dir", "{work}",
          "--json", "{work}/many.json"), 4),
    Step("scale-daemon", "bench_scale.py",
         ("daemon", "--reports", "1000", "--dir", "{work}", "--json", "{work}/daemon.json"),
         ("daemon", "--reports", "20", "--dir", "{work}", "--json", "{work}/daemon.json"), 5),
    Step("scale-tiny", "bench_scale.py",
         ("tiny", "--reports", "1000", "--dir", "{work}", "--json", "{work}/tiny.json"),
         ("tiny", "--reports", "20", "--dir", "{work}", "--json", "{work}/tiny.json"), 8),
    Step("scale-dask", "bench_scale.py",
         ("dask", "--ranks", "16", "--rows", "1000000", "--spec", "local:2", "--dir", "{work}",
          "--json", "{work}/dask.json"),
         ("dask", "--ranks", "2", "--rows", "20000", "--spec", "local:2", "--dir", "{work}",
          "--json", "{work}/dask.json"), 10, ("distributed",)),
    Step("daemon-lag", "bench_daemon_lag.py", ("--dir", "{work}"),
         ("--ranks", "4", "--steps", "2", "--dir", "{work}"), 3),
    Step("finalize-real", "bench_finalize.py", ("--real", "--dir", "{work}"),
         ("--real", "--dir", "{work}"), 1),
    Step("finalize", "bench_finalize.py", ("--reports", "64", "--steps", "4", "--dir", "{work}"),
         ("--reports", "4", "--steps", "2", "--dir", "{work}"), 3),
    Step("restart", "bench_restart.py", ("--dir", "{work}",),
         ("--ranks", "4", "--steps", "2", "--dir", "{work}"), 2),
    Step("efficiency", "bench_efficiency.py", (), (), 2),
    Step("synth", "bench_synth.py", ("--dir", "{work}",), ("--dir", "{work}",), 2),
    Step("paramedir", "check_paramedir.py", (), (), 1, ("env:PARAMEDIR",)),
)


@dataclass
class Outcome:
    """What one step did: for ``suite.json`` and the header of its part of ``results.md``."""

    name: str
    command: list[str]
    returncode: int
    seconds: float
    load_before: float
    load_after: float
    log: str
    skipped: str = ""


def commit() -> str:
    """The measured commit, marked when the work tree has changes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=False).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def missing(step: Step) -> str:
    """Why a step cannot run here, or ``""``."""
    for module in step.needs:
        if module.startswith("env:"):
            if not os.environ.get(module[4:]):
                return f"{module[4:]} is not set (the path of Paraver's paramedir)"
            continue
        try:
            __import__(module)
        except ImportError:
            return f"the {module} package is not installed (pip install -e '.[dask]')"
    return ""


def run_step(step: Step, out: Path, quick: bool) -> Outcome:
    """Run one script, its output going to the terminal and to ``OUT/<name>.log``."""
    work = out / step.name
    work.mkdir(parents=True, exist_ok=True)
    args = [a.replace("{work}", str(work)) for a in (step.quick if quick else step.args)]
    command = [sys.executable, str(HERE / step.script), *args]
    log_path = out / f"{step.name}.log"
    why = missing(step)
    if why:
        print(f"== {step.name}: skipped, {why}", flush=True)
        return Outcome(step.name, command, 0, 0.0, load(), load(), str(log_path), skipped=why)
    before, t0 = load(), time.monotonic()
    print(f"== {step.name} (load {before:.2f}): {' '.join(command)}", flush=True)
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        code = proc.wait()
    seconds = time.monotonic() - t0
    print(f"== {step.name}: exit {code} after {seconds:.0f} s, load {load():.2f}", flush=True)
    return Outcome(step.name, command, code, seconds, before, load(), str(log_path))


def tables(log: str) -> str:
    """What a script reported: its Markdown tables and summary lines, else the JSON object it
    printed last, else its last lines (progress lines and log records left out)."""
    lines = log.splitlines()
    kept: list[str] = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("|") or stripped.startswith(("machine:", "start-up")):
            kept.append(stripped)
        elif kept and kept[-1].startswith("|") and not stripped:
            kept.append("")
    if kept:
        return "\n".join(kept).strip()
    for i in range(len(lines) - 1, -1, -1):  # a JSON object printed at the end
        if lines[i].startswith("{"):
            text = "\n".join(lines[i:])
            try:
                json.loads(text)
            except ValueError:
                continue
            return f"```json\n{text.strip()}\n```"
    plain = [ln for ln in lines if ln.strip() and not LOG_RECORD.match(ln)]
    return "\n".join(f"    {ln}" for ln in plain[-5:])


def report(outcomes: list[Outcome], head: str, started: str) -> str:
    """``results.md``: per step its command, time, load and tables."""
    parts = [f"# Benchmark suite at commit {head}", "",
             f"Started {started} UTC on {os.cpu_count()} CPUs, Python "
             f"{sys.version.split()[0]}; each step's load is the 1-minute load average before "
             f"and after it.", ""]
    for o in outcomes:
        parts.append(f"## {o.name}")
        parts.append("")
        if o.skipped:
            parts += [f"Skipped: {o.skipped}.", ""]
            continue
        shown = " ".join(Path(c).name if c.startswith(str(ROOT)) else c
                         for c in o.command[1:])
        parts += [f"`python {shown}`: exit {o.returncode}, {o.seconds:.0f} s, load "
                  f"{o.load_before:.2f} → {o.load_after:.2f}", ""]
        body = tables(Path(o.log).read_text(encoding="utf-8", errors="replace"))
        parts += [body or "(no table printed; see the log)", ""]
    return "\n".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=False, help="where logs and results go")
    parser.add_argument("--only", default="", help="comma-separated step names")
    parser.add_argument("--skip", default="", help="comma-separated step names")
    parser.add_argument("--quick", action="store_true", help="small sizes: check the suite")
    parser.add_argument("--list", action="store_true", help="print the steps and stop")
    args = parser.parse_args()
    names = {s.name for s in STEPS}
    only = {n for n in args.only.split(",") if n}
    skip = {n for n in args.skip.split(",") if n}
    unknown = (only | skip) - names
    if unknown:
        parser.error(f"unknown step(s) {', '.join(sorted(unknown))}; "
                     f"the steps are {', '.join(s.name for s in STEPS)}")
    chosen = [s for s in STEPS if (not only or s.name in only) and s.name not in skip]
    if args.list or args.out is None:
        for s in chosen:
            print(f"{s.name:14} {s.minutes:4.0f} min  {s.script} {' '.join(s.args)}")
        print(f"about {sum(s.minutes for s in chosen):.0f} minutes on a quiet 2-core machine")
        return 0 if args.list else 2
    args.out.mkdir(parents=True, exist_ok=True)
    head, started = commit(), time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    outcomes = [run_step(s, args.out, args.quick) for s in chosen]
    (args.out / "suite.json").write_text(json.dumps(
        {"commit": head, "started_utc": started, "quick": args.quick,
         "steps": [o.__dict__ for o in outcomes]}, indent=1) + "\n", encoding="utf-8")
    (args.out / "results.md").write_text(report(outcomes, head, started), encoding="utf-8")
    failed = [o.name for o in outcomes if o.returncode != 0]
    print(f"results: {args.out / 'results.md'}" + (f"; failed: {', '.join(failed)}"
                                                    if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
