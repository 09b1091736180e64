"""Spool one report's sink feed (GPU activity, NVTX phases, host calls, tables) to a temporary
file and replay it.

Batch conversion of several reports interleaves their streams in one merge, while the
efficiency model takes one report at a time; the daemon must not feed the model a block it may
still roll back. A spool records the feed in order, with O(batch) memory, and replays it later.
``InOrderReplay`` replays a batch's spools as soon as each report and every report before it
have ended, so a small report's feed goes from memory to the model, never through a file.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable, Hashable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from prvstream.sinks.base import ReportInfo, Sink, TableDetail, TableRows
from prvstream.sinks.logger import get_logger

__all__ = ["InOrderReplay", "ReportSpool"]

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

    def __init__(self, directory: str | os.PathLike[str] | None = None, *,
                 in_memory: bool = False,
                 on_end: Callable[[ReportSpool], None] | None = None) -> None:
        """``in_memory``: an anonymous spool whose file is made only when its feed outgrows
        one frame (or ``spill`` is called): a small report's feed stays in memory until
        replayed. ``on_end`` is called once the report has ended."""
        self.path: Path | None = None
        self._fh: IO[bytes] | None = None
        if directory is None:
            if not in_memory:
                self._fh = self._anonymous()
        else:
            fd, name = tempfile.mkstemp(prefix="prvstream-spool-", suffix=".bin", dir=directory)
            self.path = Path(name)
            self._fh = os.fdopen(fd, "w+b")
        self._in_memory = in_memory and directory is None
        self._on_end = on_end
        self.info: ReportInfo | None = None
        self.closed = False
        self._held: list[tuple[int, object]] = []
        self._held_rows = 0

    @staticmethod
    def _anonymous() -> IO[bytes]:
        # owned for the spool's lifetime, closed by discard/detach
        return tempfile.TemporaryFile(prefix="prvstream-spool-", suffix=".bin")

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
        if not self._in_memory:
            self._write_held()
        self.closed = True
        if self._on_end is not None:
            self._on_end(self)

    @property
    def holding(self) -> bool:
        """Whether part of the feed is held in memory."""
        return bool(self._held)

    def spill(self) -> None:
        """Write what the spool holds in memory to its file (made now if need be)."""
        self._write_held()

    def _hold(self, kind: int, part: object, rows: int) -> None:
        self._held.append((kind, part))
        self._held_rows += rows
        if self._held_rows >= _HOLD_ROWS or len(self._held) >= _HOLD_PARTS:
            self._write_held()

    def _write_held(self) -> None:
        if self._held:
            if self._fh is None:
                self._fh = self._anonymous()
            pickle.dump(self._held, self._fh, protocol=5)
            self._held, self._held_rows = [], 0

    # -- replay ----------------------------------------------------------------------------
    def replay(self, sink: Sink) -> None:
        """Feed the recorded report into ``sink`` exactly as it was recorded."""
        if self.info is None or not self.closed:
            raise RuntimeError("replay of a spool whose report did not finish")
        sink.begin_report(self.info)
        for kind, batch in self.parts():  # an in-memory spool's tail after its file's
            _feed(sink, kind, batch)
        sink.end_report()

    def parts(self) -> Iterator[tuple[int, object]]:
        """The recorded feed, part by part (of a report that has ended), for ``recorded``
        in another process."""
        if self._fh is not None:
            self._fh.flush()
            self._fh.seek(0)
            while True:
                try:
                    frame = pickle.load(self._fh)  # our own temporary file
                except EOFError:
                    break
                yield from frame
        yield from self._held

    @classmethod
    def recorded(cls, info: ReportInfo, parts: list[tuple[int, object]]) -> ReportSpool:
        """An ended in-memory spool holding ``parts`` (``parts`` of another process's)."""
        spool = cls(in_memory=True)
        spool.info = info
        spool._held = parts
        spool._held_rows = _HOLD_ROWS  # never added to
        spool.closed = True
        return spool

    def detach(self) -> tuple[str, ReportInfo]:
        """Flush and close a finished spool, keeping its file, for another process to
        ``attach`` (a Dask worker spools, the coordinator replays)."""
        if self.info is None or not self.closed:
            raise RuntimeError("detach of a spool whose report did not finish")
        if self.path is None or self._fh is None:
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
        spool._in_memory, spool._on_end = False, None
        spool._held, spool._held_rows = [], 0
        spool.info = info
        spool.closed = True
        return spool

    def discard(self) -> None:
        self._held = []
        if self._fh is not None:
            self._fh.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)


class InOrderReplay:
    """Spools for reports that must reach ``sink`` in the order of ``keys``: each report's
    spool is replayed (then discarded) as soon as it and every report before it have ended,
    while the others are still streaming. Ended spools that wait for an earlier report keep
    their feed in memory, at most ``hold`` of them (beyond it the latest in order is written
    to its file), so memory is bounded by the reports in flight, never by their number."""

    def __init__(self, sink: Sink, keys: Sequence[Hashable], hold: int) -> None:
        self.sink = sink
        self._keys = list(keys)
        self._next = 0
        self._hold = max(int(hold), 1)
        self._spools: dict[Hashable, ReportSpool] = {}
        self._waiting: list[tuple[int, ReportSpool]] = []  # ended, before them one has not
        self._place = {k: i for i, k in enumerate(self._keys)}

    def spool(self, key: Hashable) -> ReportSpool:
        """The spool of report ``key`` (a sink to stream it into)."""
        spool = ReportSpool(in_memory=True,
                            on_end=lambda done: self._ended(self._place[key], done))
        self._spools[key] = spool
        return spool

    def arrived(self, key: Hashable, spool: ReportSpool) -> None:
        """The ended spool of report ``key``, recorded elsewhere (``ReportSpool.recorded``)."""
        self._spools[key] = spool
        self._ended(self._place[key], spool)

    def _ended(self, place: int, spool: ReportSpool) -> None:
        self._waiting.append((place, spool))
        self._drain()
        held = [w for w in self._waiting if w[1].holding]
        if len(held) > self._hold:  # the one needed last goes to its file
            max(held, key=lambda w: w[0])[1].spill()

    def _drain(self) -> None:
        while self._next < len(self._keys):
            spool = self._spools.get(self._keys[self._next])
            if spool is None or not spool.closed:
                return
            del self._spools[self._keys[self._next]]
            self._waiting = [w for w in self._waiting if w[1] is not spool]
            try:
                spool.replay(self.sink)
            finally:
                spool.discard()
            self._next += 1

    def finish(self) -> None:
        """Replay what is left (every report must have ended)."""
        self._drain()
        if self._next < len(self._keys):
            raise RuntimeError(f"report {self._keys[self._next]!r} never ended its feed")

    def discard(self) -> None:
        """Drop every spool not replayed (a conversion that failed)."""
        for spool in self._spools.values():
            spool.discard()
        self._spools.clear()
        self._waiting = []


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
