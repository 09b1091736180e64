"""``prvstream watch``: run the daemon on watched roots until a signal stops it."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import anyio

from prvstream.daemon import heap
from prvstream.daemon.config import Settings
from prvstream.daemon.service.faults import probe_dir
from prvstream.daemon.service.watch import Service
from prvstream.sinks.errors import PrvstreamError, StateDirUnusable

__all__ = ["run"]


def run(args: argparse.Namespace, settings: Settings) -> int:
    """``prvstream watch``."""
    for root in args.roots:
        if not Path(root).is_dir():
            raise PrvstreamError(f"watched root {root} is not a directory; create it first")
    try:
        os.makedirs(settings.state_dir, exist_ok=True)
    except OSError as exc:
        problem: str | None = exc.strerror or str(exc)
    else:
        problem = probe_dir(Path(settings.state_dir))
    if problem is not None:
        raise StateDirUnusable(
            f"state directory {settings.state_dir} is unusable ({problem}); fix it or "
            "choose another --state")
    heap.tune_daemon_heap()  # a long-lived process: what it frees must not stay resident
    service = Service(list(args.roots), settings, once=args.once,
                      exit_when_finalized=args.exit_when_finalized)
    anyio.run(service.run)
    return service.exit_status
