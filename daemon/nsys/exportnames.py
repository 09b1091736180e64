"""Names an export holds: string ids, inline NVTX texts (numbered in text order), processes,
thread names, NVTX domains, MPI ranks and GPU metric names, each read once.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from prvstream.daemon.kinds.context import pid_of, process_of
from prvstream.daemon.kinds.nvtx import NVTX_DOMAIN_CREATE, NVTX_WHERE
from prvstream.daemon.nsys.exportbase import ExportBase, memoized
from prvstream.daemon.nsys.exportmeta import ProcessRow
from prvstream.sinks.logger import get_logger

__all__ = ["ExportNames"]

log = get_logger(__name__)

_IN_BATCH: Final = 500
#: string ids looked up by one range of ids, not a list, where the range holds at most this
#: many more than twice the ids wanted (SQLite compiles a list of ids for every export: 146
#: against 57 us for the 32 of a synthetic rank, its range 67 rows)
_RANGE_SLACK: Final = 64


class ExportNames(ExportBase):
    """The names of one export, cached (they survive ``close``/``reopen``)."""

    def __init__(self, con: sqlite3.Connection, path: Path) -> None:
        super().__init__(con, path)
        self._strings: dict[int, str] = {-1: ""}
        self._inline: dict[int, str] = {}
        self._inline_ids: dict[str, int] | None = None

    # -- strings ----------------------------------------------------------------------------
    def string(self, sid: int) -> str:
        """The text of a string id ("" for -1 or an id the export does not hold)."""
        if sid < 0:
            return self._strings.get(sid) or self._inline.get(sid, "")
        got = self._strings.get(sid)
        if got is None:
            got = self.strings((sid,)).get(sid, "")
        return got

    def strings(self, ids: Iterable[int]) -> dict[int, str]:
        """Texts of many string ids at once (missing ids map to "")."""
        wanted = set(ids)
        out: dict[int, str] = {}
        missing: list[int] = []
        for sid in wanted:
            if sid < 0:
                out[sid] = self._inline.get(sid, "")
            elif sid in self._strings:
                out[sid] = self._strings[sid]
            else:
                missing.append(sid)
        if missing and self.has("StringIds", "value"):
            lo, hi = min(missing), max(missing)
            if hi - lo < _RANGE_SLACK + 2 * len(missing):  # dense: a range (lists cost
                self._read_strings("id >= ? AND id <= ?", [lo, hi], wanted)  # compiling)
            else:
                for i in range(0, len(missing), _IN_BATCH):
                    batch = missing[i:i + _IN_BATCH]
                    self._read_strings(f"id IN ({','.join('?' * len(batch))})", batch, None)
        for sid in missing:
            out[sid] = self._strings.setdefault(sid, "")
        return out

    def _read_strings(self, where: str, params: list[int], keep: set[int] | None) -> None:
        """Keep the texts of the StringIds rows ``where`` picks (those in ``keep`` only,
        unless None)."""
        for sid, value in self._con.execute(f"SELECT id, value FROM StringIds WHERE {where}",
                                            params):
            if keep is None or sid in keep:
                self._strings[int(sid)] = "" if value is None else str(value)

    def inline_ids(self) -> dict[str, int]:
        """Negative ids of inline NVTX texts, numbered in text order."""
        if self._inline_ids is None:
            found: list[str] = []
            if self.has("NVTX_EVENTS", "text") and self.has("NVTX_EVENTS", "eventType"):
                tid_null = "textId IS NULL AND " if self.has("NVTX_EVENTS", "textId") else ""
                found = [str(t) for (t,) in self._con.execute(
                    f"SELECT DISTINCT text FROM NVTX_EVENTS WHERE {tid_null}text IS NOT NULL"
                    f" AND {NVTX_WHERE}")]
            self._intern_sorted(found)
        assert self._inline_ids is not None
        return self._inline_ids

    def number_inline_texts(self, texts: Iterable[str]) -> dict[str, int]:
        """Number inline NVTX texts from a scan that found them all (the plan's), unless they
        are numbered already; the numbering is the same either way (text order)."""
        if self._inline_ids is None:
            self._intern_sorted(list(texts))
        return self.inline_ids()

    def _intern_sorted(self, found: list[str]) -> None:
        texts = sorted(set(found))  # -2, -3, ... in text order: -1 stays "no string"
        ids = range(-2, -2 - len(texts), -1)
        self._inline_ids = dict(zip(texts, ids, strict=True))
        self._inline.update(zip(ids, texts, strict=True))

    def intern_inline(self, text: str) -> int:
        """Negative id for an inline NVTX text (new texts get the next free id)."""
        ids = self.inline_ids()
        nid = ids.get(text)
        if nid is None:
            nid = -(len(ids) + 2)
            ids[text] = nid
            self._inline[nid] = text
        return nid

    # -- objects ----------------------------------------------------------------------------
    @memoized
    def processes(self) -> dict[int, ProcessRow]:
        """globalPid -> PROCESSES row."""
        if not self.has("PROCESSES", "globalPid"):
            return {}
        pid = "pid" if self.has("PROCESSES", "pid") else "NULL"
        name = "name" if self.has("PROCESSES", "name") else "NULL"
        out: dict[int, ProcessRow] = {}
        for g, p, n in self._con.execute(f"SELECT globalPid, {pid}, {name} FROM PROCESSES"):
            if g is None:
                continue
            g = int(g)
            out[g] = ProcessRow(g, pid_of(g) if p is None else int(p), "" if n is None
                                else str(n))
        return out

    def process_names(self, gpids: Iterable[int]) -> dict[int, str]:
        """globalPid -> PROCESSES name, for ``gpids`` only (a process without a row, or
        without a name column, is absent; of repeated rows the last wins, as in
        ``processes``): an export lists every process of the machine, 1,770 rows in
        cloverleaf's, against the few with activity."""
        wanted = sorted(set(gpids))
        if not wanted or not (self.has("PROCESSES", "globalPid")
                              and self.has("PROCESSES", "name")):
            return {}
        out: dict[int, str] = {}
        for i in range(0, len(wanted), _IN_BATCH):
            batch = wanted[i:i + _IN_BATCH]
            marks = ",".join("?" * len(batch))
            for g, n in self._con.execute(
                    f"SELECT globalPid, name FROM PROCESSES WHERE globalPid IN ({marks})", batch):
                out[int(g)] = "" if n is None else str(n)
        return out

    @memoized
    def thread_names(self) -> dict[int, str]:
        """globalTid -> thread name (ThreadNames joined to StringIds; highest priority wins)."""
        if not (self.has("ThreadNames", "globalTid") and self.has("ThreadNames", "nameId")):
            return {}
        order = " ORDER BY priority" if self.has("ThreadNames", "priority") else ""
        rows = self._con.execute(
            f"SELECT globalTid, nameId FROM ThreadNames{order}").fetchall()
        names = self.strings(int(n) for _, n in rows if n is not None)
        return {int(g): names[int(n)] for g, n in rows if g is not None and n is not None}

    @memoized
    def nvtx_domains(self) -> dict[int, str]:
        """domainId -> domain name, from NvtxDomainCreate rows (domain 0 is the default)."""
        if not (self.has("NVTX_EVENTS", "domainId") and self.has("NVTX_EVENTS", "eventType")):
            return {}
        text = "text" if self.has("NVTX_EVENTS", "text") else "NULL"
        tid = "textId" if self.has("NVTX_EVENTS", "textId") else "NULL"
        rows = self._con.execute(
            f"SELECT domainId, {text}, {tid} FROM NVTX_EVENTS WHERE eventType = "
            f"{NVTX_DOMAIN_CREATE} ORDER BY start").fetchall()
        names = self.strings(int(t) for _, _, t in rows if t is not None)
        out: dict[int, str] = {}
        for dom, txt, t in rows:
            if dom is None:
                continue
            out.setdefault(int(dom), str(txt) if txt is not None else
                           names.get(int(t), "") if t is not None else "")
        return out

    @memoized
    def mpi_ranks(self) -> dict[int, int]:
        """globalPid -> MPI rank, from MPI_RANKS (rank, globalTid) when present."""
        if not self.has("MPI_RANKS", "rank"):
            return {}
        key = "globalTid" if self.has("MPI_RANKS", "globalTid") else \
            "globalPid" if self.has("MPI_RANKS", "globalPid") else None
        if key is None:
            return {}
        return {process_of(int(g)): int(r) for g, r in self._con.execute(
            f"SELECT {key}, rank FROM MPI_RANKS") if g is not None and r is not None}

    @memoized
    def gpu_metric_names(self) -> dict[int, str]:
        """metricId -> metric name, from TARGET_INFO_GPU_METRICS."""
        t = "TARGET_INFO_GPU_METRICS"
        if not (self.has(t, "metricId") and self.has(t, "metricName")):
            return {}
        return {int(i): str(n) for i, n in self._con.execute(
            f"SELECT metricId, metricName FROM {t} ORDER BY metricId") if i is not None}
