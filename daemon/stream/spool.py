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

import numpy as np

from prvstream.sinks.base import ReportInfo, Sink, TableDetail, TableRows
from prvstream.sinks.logger import get_logger

__all__ = ["ReportSpool"]

log = get_logger(__name__)

_PHASES, _ACTIVITY, _TABLES, _DETAIL, _HOST = 0, 1, 2, 3, 4


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

    # -- Sink protocol ---------------------------------------------------------------------
    def begin_report(self, info: ReportInfo) -> None:
        self.info = info

    def add_activity(self, batch: np.ndarray) -> None:
        pickle.dump((_ACTIVITY, batch), self._fh, protocol=5)

    def add_phases(self, batch: np.ndarray) -> None:
        pickle.dump((_PHASES, batch), self._fh, protocol=5)

    def add_host(self, batch: np.ndarray) -> None:
        pickle.dump((_HOST, batch), self._fh, protocol=5)

    def add_tables(self, rows: TableRows) -> None:
        pickle.dump((_TABLES, rows), self._fh, protocol=5)

    def add_table_detail(self, rows: TableDetail) -> None:
        pickle.dump((_DETAIL, rows), self._fh, protocol=5)

    def end_report(self) -> None:
        self.closed = True

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
                kind, batch = pickle.load(self._fh)  # our own temporary file
            except EOFError:
                break
            if kind == _ACTIVITY:
                sink.add_activity(batch)
            elif kind == _TABLES:
                add_tables = getattr(sink, "add_tables", None)
                if add_tables is not None:
                    add_tables(batch)
            elif kind == _DETAIL:
                add_detail = getattr(sink, "add_table_detail", None)
                if add_detail is not None:
                    add_detail(batch)
            elif kind == _HOST:
                add_host = getattr(sink, "add_host", None)
                if add_host is not None:
                    add_host(batch)
            else:
                sink.add_phases(batch)
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
