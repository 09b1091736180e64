"""Run a prvstream command in a fresh interpreter and check it never imported Dask."""

from __future__ import annotations

import os
import subprocess
import sys

__all__ = ["assert_runs_without_dask"]


def assert_runs_without_dask(*argv: str) -> None:
    """``cli(*argv)`` in a child process (``PRVSTREAM_DASK`` unset) exits 0 and leaves
    neither ``distributed`` nor ``dask`` in ``sys.modules``."""
    code = ("import sys; from prvstream.daemon.cli.main import cli; "
            f"status = cli(*{list(argv)!r}); "
            "assert status == 0, status; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('distributed', 'dask')); "
            "assert not bad, bad")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PRVSTREAM_DASK": ""})
    assert done.returncode == 0, done.stderr
