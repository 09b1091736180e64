"""Finalize (a k-way merge of the live trace's committed blocks) against a batch convert of the
same reports: whole-process wall time and peak RSS of ``prvstream finalize JOB`` and
``prvstream convert JOB``, each in its own child process, repeated; the outputs are checked
byte-identical every time. Target (issue 11): finalize <= 1.2 x convert.

    python tests/bench/bench_finalize.py [--reports 64 --steps 4] [--real] [--repeat 3]

The live job is built once in this process (``LiveTrace.append`` of every report, shuffled,
with a skew allowance off the host states' grid so the merge also cuts them again) and
restored from a snapshot before each finalize, which rewrites it in place.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from _benchlib import compile_bytecode, load, real_data_dir, run_measured, spread

from prvstream.daemon.config import load_settings
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.live.livetrace import LiveTrace
from prvstream.daemon.service.readiness import report_identity
from prvstream.daemon.synthetic.scalebench import exports_once
from prvstream.daemon.synthetic.synth import SynthSpec

_PRVSTREAM = [sys.executable, "-m", "prvstream.daemon"]
OUTPUTS = (".prv", ".pcf", ".row")


def _sources(args: argparse.Namespace, work: Path) -> list[Path]:
    if args.real:
        found = sorted(real_data_dir().glob("*.sqlite"))
        if not found:
            raise SystemExit(f"no real exports under {real_data_dir()} (PRVSTREAM_TEST_DATA)")
        return found
    folder = work / f"src-{args.reports}x{args.steps}"
    spec = SynthSpec(ranks=args.reports, hosts=max(1, args.reports // 8), steps=args.steps)
    return exports_once(folder, spec)


def _build_job(sources: list[Path], base: Path, fan_in: int) -> tuple[Path, Path]:
    """The live job (committed, not finalized) and its state directory."""
    job, state = base / "job", base / "state"
    job.mkdir(parents=True)
    settings = load_settings(None, {"state_dir": str(state), "skew_allowance": 0.37,
                                    "fan_in": fan_in}, environ={})
    journal = JobJournal.open(settings.state_dir, job)
    journal.lock()
    trace = LiveTrace(journal, job / "prvstream", "job", settings)
    order = list(sources)
    random.Random(7).shuffle(order)
    for src in order:
        target = job / src.name
        os.link(src, target) if src.stat().st_dev == base.stat().st_dev else \
            shutil.copyfile(src, target)
        trace.append(target, report_identity(target))
    trace.close()
    journal.unlock()
    return job, state


def _snapshot(job: Path, state: Path, into: Path) -> None:
    shutil.copytree(job / "prvstream", into / "out")
    shutil.copytree(state, into / "state")


def _restore(job: Path, state: Path, snap: Path) -> None:
    """Put the committed job back; the copied ``.prv`` is another inode, which the journal
    would take for a rewrite whose commit never happened: it is told the new one."""
    shutil.rmtree(job / "prvstream")
    shutil.rmtree(state)
    shutil.copytree(snap / "out", job / "prvstream")
    shutil.copytree(snap / "state", state)
    journal = JobJournal.open(state, job)
    journal.state.prv_inode = (job / "prvstream" / "job.prv").stat().st_ino
    journal.commit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=64)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--real", action="store_true", help="the real exports instead")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fan-in", type=int, default=16)
    parser.add_argument("--dir", help="work directory (kept; inputs reused)")
    args = parser.parse_args()
    compile_bytecode()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-finalize-"))
    work.mkdir(parents=True, exist_ok=True)
    sources = _sources(args, work)
    base = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    job, state = _build_job(sources, base, args.fan_in)
    snap = base / "snapshot"
    _snapshot(job, state, snap)
    fin_t: list[float] = []
    fin_m: list[float] = []
    conv_t: list[float] = []
    conv_m: list[float] = []
    ratios: list[float] = []
    env = {**os.environ, "PRVSTREAM_FAN_IN": str(args.fan_in)}
    for i in range(args.repeat):
        _restore(job, state, snap)
        fin = run_measured([*_PRVSTREAM, "finalize", str(job), "--state", str(state)],
                           log=base / "finalize.log", env=env)
        out = base / f"convert{i}"
        conv = run_measured([*_PRVSTREAM, "convert", str(job), "-o", str(out),
                             "--no-progress"], log=base / "convert.log", env=env)
        if fin.returncode or conv.returncode:
            raise SystemExit(f"finalize ({fin.returncode}) or convert ({conv.returncode}) "
                             f"failed; see {base}")
        for ext in OUTPUTS:
            if (job / "prvstream" / f"job{ext}").read_bytes() != \
                    out.with_name(out.name + ext).read_bytes():
                raise SystemExit(f"finalize and convert differ in {ext}")
        fin_t.append(fin.wall_s)
        fin_m.append(fin.peak_rss_mib)
        conv_t.append(conv.wall_s)
        conv_m.append(conv.peak_rss_mib)
        ratios.append(fin.wall_s / conv.wall_s)
    prv = job / "prvstream" / "job.prv"
    print(json.dumps({
        "inputs": "real exports" if args.real else f"{args.reports} synthetic ranks x "
                                                   f"{args.steps} steps",
        "reports": len(sources), "prv_mb": round(prv.stat().st_size / 1e6, 1),
        "finalize_s": spread(fin_t), "convert_s": spread(conv_t), "ratio": spread(ratios),
        "finalize_peak_rss_mib": spread(fin_m), "convert_peak_rss_mib": spread(conv_m),
        "byte_identical": True, "load": round(load(), 2)}, indent=1))


if __name__ == "__main__":
    main()
