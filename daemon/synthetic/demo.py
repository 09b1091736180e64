"""``prvstream demo``: a synthetic multi-rank job, watched and converted live, then finalized.

Writes ranks one by one into a job directory (each renamed into place when complete, like a
running job), runs the daemon on it in the same process, prints each arrival as the trace
grows (tasks, records, live efficiency), then drops the job-end marker and shows the
finalized trace and its efficiency summary.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import msgspec

from prvstream.daemon.config import Settings
from prvstream.daemon.nsys.locate import DONE_MARKER
from prvstream.daemon.service.watch import Service
from prvstream.daemon.synthetic.synth import SynthSpec, iter_job
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary import decode_state

__all__ = ["demo_job", "say"]

log = get_logger(__name__)


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _status(path: Path) -> dict[str, object]:
    """The job's status.json as the daemon last wrote it ({} before the first report)."""
    try:
        found: dict[str, object] = msgspec.json.decode(path.read_bytes())
    except FileNotFoundError:
        return {}
    return found


async def _until(condition: Callable[[], bool], every: float = 0.2) -> None:
    """Poll the daemon's files as a user would, until ``condition`` holds."""
    while True:
        if condition():
            return
        await anyio.sleep(every)


async def demo_job(base: Path, args: argparse.Namespace, settings: Settings) -> Path:
    root = base / "scratch"
    job = root / "demo_job"
    job.mkdir(parents=True, exist_ok=True)
    out = job / "prvstream"
    spec = SynthSpec(ranks=args.ranks, hosts=max(1, args.ranks // 2), steps=args.steps)
    service = Service([str(root)], settings)
    status_path = out / "status.json"
    summary_path = out / "summary.json"

    async def produce() -> None:
        def write_all() -> None:
            for path in iter_job(job, spec, interval=args.interval):
                anyio.from_thread.run_sync(say, f"  rank file written: {path.name}")

        await anyio.to_thread.run_sync(write_all)

    async def show() -> None:
        seen = 0
        while True:
            await anyio.sleep(0.2)
            if not status_path.exists():
                continue
            status = msgspec.json.decode(status_path.read_bytes())
            if status["reports"] > seen:
                seen = status["reports"]
                line = f"  trace grew: {seen} report(s), {status['records']:,} records"
                if summary_path.exists():
                    state = decode_state(summary_path.read_bytes())
                    line += (f", parallel efficiency so far "
                             f"{100 * state.metrics.parallel_efficiency:.1f}%")
                say(line)
            if status["finalized"] and seen >= args.ranks:
                return

    say(f"prvstream demo: {args.ranks} ranks, {args.steps} steps, one rank every "
         f"{args.interval:g} s into {job}")
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await anyio.sleep(0.5)
        tg.start_soon(show)
        await produce()
        await _until(lambda: _status(status_path).get("reports", 0) >= args.ranks)
        say(f"  all ranks in; touching {DONE_MARKER} (as a Slurm epilog would)")
        (job / DONE_MARKER).touch()
        with anyio.fail_after(120):
            await _until(lambda: bool(_status(status_path).get("finalized")))
        await anyio.sleep(0.3)
        service.stop()
        tg.cancel_scope.cancel()
    return out
