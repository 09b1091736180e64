"""``prvstream demo``: the quick-start demo: a synthetic job converted live, then finalized."""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import anyio
import msgspec

from prvstream.daemon.config import Settings
from prvstream.daemon.synthetic.demo import demo_job, say
from prvstream.sinks.summary import decode_state, render_table

__all__ = ["run"]


def run(args: argparse.Namespace, settings: Settings) -> int:
    """``prvstream demo``."""
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="prvstream-demo-"))
    settings = msgspec.structs.replace(
        settings, settle=0.3, state_dir=str(base / "state"), idle_finalize=0.0, out_dir="")
    try:
        out = anyio.run(demo_job, base, args, settings)
        state = decode_state((out / "summary.json").read_bytes())
        say("")
        say(render_table(state))
        prv = out / "demo_job.prv"
        if args.keep or args.dir:
            say(f"open in Paraver: wxparaver {prv}  (cfgs in the project's cfgs/ folder)")
            say(f"follow the summary: prvstream summary {out}")
        else:
            say(f"finalized trace was {prv} (removed; run with --keep to keep the files)")
    finally:
        if not (args.keep or args.dir):
            shutil.rmtree(base, ignore_errors=True)
    return 0
