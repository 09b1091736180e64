"""Folding summary records into the bounded latest state (``summary.json``)."""

from __future__ import annotations

from collections.abc import Iterable

from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import (
    DEFAULT_RECENT,
    SCHEMA_VERSION,
    SummaryRecord,
    SummaryState,
    zero_metrics,
)

__all__ = ["SummaryFolder", "fold"]

log = get_logger(__name__)

class SummaryFolder:
    """``fold`` one record at a time, in memory bounded by ``recent`` x phase names.

    Keeps the latest cumulative record, the latest record of the ``recent`` highest window
    indices, of the ``recent`` highest occurrences of each phase name, and of each phase name's
    total. Keys never change rank, so the result does not depend on how records are grouped.
    Records of views it does not know (a newer writer) are ignored.
    """

    def __init__(self, state: SummaryState | None = None, recent: int = DEFAULT_RECENT) -> None:
        self.recent = max(int(recent), 1)
        self.base: SummaryRecord | None = state
        self.windows: dict[int, SummaryRecord] = {}
        self.phases: dict[str, dict[int, SummaryRecord]] = {}
        self.totals: dict[str, SummaryRecord] = {}
        if state is not None:
            for r in (*state.windows, *state.phases, *state.phase_totals):
                self.add(r)

    def add(self, record: SummaryRecord) -> None:
        """Fold one record in."""
        view = record.view
        if view == "window":
            self.windows[record.index] = record
            if len(self.windows) > 2 * self.recent:
                self._trim(self.windows)
        elif view == "phase":
            by_occ = self.phases.setdefault(record.name, {})
            by_occ[record.index] = record
            if len(by_occ) > 2 * self.recent:
                self._trim(by_occ)
        elif view == "phase_total":
            self.totals[record.name] = record
        elif view == "cumulative":
            self.base = record

    def _trim(self, rows: dict[int, SummaryRecord]) -> None:
        for key in sorted(rows)[:-self.recent]:
            del rows[key]

    def keeps(self, view: str, name: str, indices: Iterable[int]) -> set[int]:
        """Which of these window indices / occurrences of ``name`` the state would keep."""
        rows = self.windows if view == "window" else self.phases.get(name, {})
        top = sorted({*rows, *indices})[-self.recent:]
        return set(top)

    def state(self) -> SummaryState:
        """The folded state."""
        base = self.base
        if base is None:
            base = SummaryRecord(schema=SCHEMA_VERSION, job="", view="cumulative", start_ns=0,
                                 end_ns=0, span_ns=0, metrics=zero_metrics(), devices=[])
        fields = {f: getattr(base, f) for f in SummaryRecord.__struct_fields__}
        n = self.recent
        windows = [self.windows[k] for k in sorted(self.windows)[-n:]]
        phases = [by_occ[k] for by_occ in self.phases.values() for k in sorted(by_occ)[-n:]]
        phases.sort(key=lambda r: (r.start_ns, r.name, r.index))
        return SummaryState(**fields, windows=windows, phases=phases,
                            phase_totals=[self.totals[k] for k in sorted(self.totals)],
                            recent=n)


def fold(records: Iterable[SummaryRecord], state: SummaryState | None = None, *,
         recent: int = DEFAULT_RECENT) -> SummaryState:
    """Fold records into a state: the latest cumulative record, the latest row of the
    ``recent`` highest windows and of the ``recent`` highest occurrences of each phase name,
    and the latest total of every phase name (see ``SummaryFolder``)."""
    folder = SummaryFolder(state, recent)
    for record in records:
        folder.add(record)
    return folder.state()

