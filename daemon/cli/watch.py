"""``prvstream watch``: run the daemon on watched roots until a signal stops it."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import anyio

from prvstream.daemon.config import Settings
from prvstream.daemon.service.watch import Service
from prvstream.sinks.errors import PrvstreamError

__all__ = ["run"]


def run(args: argparse.Namespace, settings: Settings) -> int:
    """``prvstream watch``."""
    for root in args.roots:
        if not Path(root).is_dir():
            raise PrvstreamError(f"watched root {root} is not a directory; create it first")
    os.makedirs(settings.state_dir, exist_ok=True)
    service = Service(list(args.roots), settings, once=args.once,
                      exit_when_finalized=args.exit_when_finalized)
    anyio.run(service.run)
    return 0
