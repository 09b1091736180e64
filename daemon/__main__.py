"""Run the prvstream command line as ``python -m prvstream.daemon``."""

from __future__ import annotations

import sys

from prvstream.daemon.cli.main import main

if __name__ == "__main__":  # Dask's spawned workers import this module as __mp_main__
    sys.exit(main())
