"""Run the prvstream command line as ``python -m prvstream.daemon``."""

from __future__ import annotations

import sys

from prvstream.daemon.cli.main import main

sys.exit(main())
