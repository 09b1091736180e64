"""A synthetic export rewritten so that its CUDA API calls are stored as two processes' runs
(as real multi-process exports store them), for the tests of reading a table as runs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from prvstream.daemon.kinds import comm
from prvstream.daemon.nsys.storage_order import BLOCK, reorder_window


def api_calls_as_processes(path: Path, shared: int = 0) -> int:
    """Store the export's API calls as two runs, each sorted and starting at the beginning of
    time (the even calls, then the odd ones, as two processes' blocks), the second starting
    ``shared`` rows into a block of the bounds; the table's reorder window."""
    con = sqlite3.connect(path)
    table = comm.DRIVER
    n = con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    assert n >= 4 * BLOCK, "the synthetic export is too small for two runs of blocks"
    half = (n // 2 // BLOCK) * BLOCK + shared
    con.execute(f"CREATE TEMP TABLE calls AS SELECT * FROM {table} ORDER BY start, rowid")
    con.execute(f"DELETE FROM {table}")
    con.execute(f"INSERT INTO {table} SELECT * FROM temp.calls WHERE rowid % 2 = 0 "
                f"ORDER BY rowid LIMIT {half}")
    con.execute(f"INSERT INTO {table} SELECT * FROM temp.calls WHERE rowid % 2 = 1 "
                "ORDER BY rowid")
    con.commit()
    window = reorder_window(con, table, "start")
    con.close()
    return window
