"""Spool one report's sink feed (GPU activity, NVTX phases, host calls, tables) to a temporary
file and replay it.

Batch conversion of several reports interleaves their streams in one merge, while the
efficiency model takes one report at a time; the daemon must not feed the model a block it may
still roll back. A spool records the feed in order, with O(batch) memory, and replays it later.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from prvstream.sinks.base import ReportInfo, Sink, TableDetail, TableRows
from prvstream.sinks.logger import get_logger

__all__ = ["ReportSpool"]

log = get_logger(__name__)

_PHASES, _ACTIVITY, _TABLES, _DETAIL, _HOST = 0, 1, 2, 3, 4
#: a spool holds its feed in memory up to this many rows (or parts), then writes it as one
#: frame: a small report is one frame, not one pickle per part (13 a report with every kind)
_HOLD_ROWS = 8192
_HOLD_PARTS = 64


class ReportSpool:
    """A ``Sink`` that records one report's feed; ``replay`` plays it into another sink.

    Without ``directory`` the spool is an anonymous temporary file (unlinked at once), so a
    process killed mid-report leaves nothing behind. With ``directory`` it has a name there,
    for ``detach``/``attach`` across processes.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.path: Path | None = None
        if directory is None:
            # owned for the spool's lifetime, closed by discard/detach
            self._fh = tempfile.TemporaryFile(prefix="prvstream-spool-", suffix=".bin")  # noqa: SIM115
        else:
            fd, name = tempfile.mkstemp(prefix="prvstream-spool-", suffix=".bin", dir=directory)
            self.path = Path(name)
            self._fh = os.fdopen(fd, "w+b")
        self.info: ReportInfo | None = None
        self.closed = False
        self._held: list[tuple[int, object]] = []
        self._held_rows = 0

    # -- Sink protocol ---------------------------------------------------------------------
    def begin_report(self, info: ReportInfo) -> None:
        self.info = info

    def add_activity(self, batch: np.ndarray) -> None:
        self._hold(_ACTIVITY, batch, len(batch))

    def add_phases(self, batch: np.ndarray) -> None:
        self._hold(_PHASES, batch, len(batch))

    def add_host(self, batch: np.ndarray) -> None:
        self._hold(_HOST, batch, len(batch))

    def add_tables(self, rows: TableRows) -> None:
        self._hold(_TABLES, rows, len(rows.names))

    def add_table_detail(self, rows: TableDetail) -> None:
        self._hold(_DETAIL, rows, len(rows.start))

    def end_report(self) -> None:
        self._write_held()
        self.closed = True

    def _hold(self, kind: int, part: object, rows: int) -> None:
        self._held.append((kind, part))
        self._held_rows += rows
        if self._held_rows >= _HOLD_ROWS or len(self._held) >= _HOLD_PARTS:
            self._write_held()

    def _write_held(self) -> None:
        if self._held:
            pickle.dump(self._held, self._fh, protocol=5)
            self._held, self._held_rows = [], 0

    # -- replay ----------------------------------------------------------------------------
    def replay(self, sink: Sink) -> None:
        """Feed the recorded report into ``sink`` exactly as it was recorded."""
        if self.info is None or not self.closed:
            raise RuntimeError("replay of a spool whose report did not finish")
        self._fh.flush()
        self._fh.seek(0)
        sink.begin_report(self.info)
        while True:
            try:
                frame = pickle.load(self._fh)  # our own temporary file
            except EOFError:
                break
            for kind, batch in frame:
                _feed(sink, kind, batch)
        sink.end_report()

    def detach(self) -> tuple[str, ReportInfo]:
        """Flush and close a finished spool, keeping its file, for another process to
        ``attach`` (a Dask worker spools, the coordinator replays)."""
        if self.info is None or not self.closed:
            raise RuntimeError("detach of a spool whose report did not finish")
        if self.path is None:
            raise RuntimeError("detach of an anonymous spool: give it a directory")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        return str(self.path), self.info

    @classmethod
    def attach(cls, path: str, info: ReportInfo) -> ReportSpool:
        """A finished spool written elsewhere (``detach``), ready to ``replay``."""
        spool = cls.__new__(cls)
        spool.path = Path(path)
        spool._fh = spool.path.open("r+b")
        spool.info = info
        spool.closed = True
        return spool

    def discard(self) -> None:
        self._fh.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def _feed(sink: Sink, kind: int, part: Any) -> None:
    """One recorded part into ``sink``, by the method that recorded it (the optional ones
    only where the sink has them)."""
    if kind == _ACTIVITY:
        sink.add_activity(part)
    elif kind == _PHASES:
        sink.add_phases(part)
    else:
        name = {_TABLES: "add_tables", _DETAIL: "add_table_detail", _HOST: "add_host"}[kind]
        add = getattr(sink, name, None)
        if add is not None:
            add(part)
