"""Run the prvstream command line as ``python -m prvstream.daemon``."""

from __future__ import annotations

from prvstream.daemon.cli.main import console

if __name__ == "__main__":  # Dask's spawned workers import this module as __mp_main__
    console()
