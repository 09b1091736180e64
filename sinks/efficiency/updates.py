"""The efficiency model's updates: the records each report (or group of reports) produces,
built lazily, and the bounded summary state folded from them."""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from prvstream.sinks.efficiency.parts import Pending
from prvstream.sinks.efficiency.views import RecordViews
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.encoded import EncodedRecord, RecordSpool
from prvstream.sinks.summary.fold import fold
from prvstream.sinks.summary.records import (
    RecordHead,
    SummaryRecord,
    SummaryState,
    decode_head,
    encode_record,
)
from prvstream.sinks.summary.spill import SpilledFolder

__all__ = ["UpdateQueue"]

log = get_logger(__name__)

#: instance ids turned into Python ints at a time while an update's records are built (a
#: long report touches one per phase occurrence: a list of them all grew with the trace)
_IDS_AT_ONCE = 1024


class UpdateQueue(RecordViews):
    """Queues each update's records and folds the kept ones (mixed into ``EfficiencyModel``)."""

    _held: tuple[set[int], array[int]] | None
    _pending: Pending | None
    _updates: list[EncodedRecord]
    _folder: SpilledFolder
    #: the records of the pending update the state keeps, written once (``_keep_state``)
    _spool: RecordSpool

    if TYPE_CHECKING:
        def _window_span(self, start: int, end: int) -> range: ...  # DeviceSweep

    def hold_updates(self) -> None:
        """The reports that follow, until ``release_updates``, make one update (a group
        commit): its records are built once, from the state after the last of them."""
        if self._held is None:
            self._held = (set(), array("q"))

    def release_updates(self) -> None:
        """End a ``hold_updates`` group: its update is pending (``iter_updates``)."""
        held, self._held = self._held, None
        if held is not None and held[0]:
            self._pend(sorted(held[0]), held[1])

    def _pend(self, windows: Sequence[int], touched_ids: array[int]) -> None:
        touched = (np.unique(np.frombuffer(touched_ids, np.int64), return_counts=True)[0]
                   if touched_ids else np.zeros(0, np.int64))  # counts: no numpy.ma
        if len(touched):
            rank = np.argsort(np.argsort([n.name for n in self._names]))
            touched = touched[np.lexsort((self._i_occ[touched],
                                          rank[self._i_name[touched]],
                                          self._i_start[touched]))]
        names = sorted(np.unique(self._i_name[touched], return_counts=True)[0].tolist(),
                       key=lambda n: self._names[n].name)
        self._spool.clear()  # the last update's records were written or taken
        pending = Pending(self._spool.put(self._cumulative()), windows, touched, names, {})
        self._keep_state(pending)
        self._pending = pending
        log.debug("efficiency_updated", job=self.job, report=self._last_report,
                  windows=len(windows), phases=len(touched))

    def _keep_state(self, p: Pending) -> None:
        """Fold into the bounded state the records of this update it keeps (built now)."""
        folder = self._folder
        for nid in p.names:
            p.built["t", nid] = rec = self._spool.put(self._phase_total(nid))
            folder.add_encoded(rec)
        folder.add_encoded(p.cumulative)
        tail = p.windows[-folder.recent:]
        for k in sorted(folder.keeps("window", "", tail) & set(tail)):
            p.built["w", k] = rec = self._spool.put(self._window(k))
            folder.add_encoded(rec)
        if len(p.instances):
            names = self._i_name[p.instances]
            for nid in p.names:
                ids = p.instances[names == nid]
                occs = self._i_occ[ids]
                top = np.sort(occs)[-folder.recent:].tolist()
                keep = folder.keeps("phase", self._names[nid].name, top) & set(top)
                for i in ids[np.isin(occs, list(keep))].tolist():
                    p.built["p", i] = rec = self._spool.put(self._phase(i))
                    folder.add_encoded(rec)

    # --- results ----------------------------------------------------------------------------

    def iter_encoded(self) -> Iterator[EncodedRecord]:
        """Records produced since the last call, as their JSON, built one at a time as they
        are consumed: phase name totals, cumulative, windows, phase instances (consume before
        the next ``begin_report``; one not consumed by then is built and held in memory)."""
        held, self._updates = self._updates, []
        pending, self._pending = self._pending, None
        yield from held
        if pending is not None:
            yield from self._produce(pending)

    def iter_updates(self) -> Iterator[SummaryRecord]:
        """``iter_encoded``'s records as objects."""
        for encoded in self.iter_encoded():
            yield encoded.record()

    def iter_update_bytes(self) -> Iterator[bytes]:
        """``iter_encoded``'s records as ``summary.jsonl`` lines, in pieces (what the writers
        take: a record of every device is never all in memory)."""
        for encoded in self.iter_encoded():
            yield from encoded.pieces()
            yield b"\n"

    def take_updates(self) -> list[SummaryRecord]:
        """``iter_updates`` as a list."""
        return list(self.iter_updates())

    def discard_updates(self) -> None:
        """Drop the records produced since the last call without building them (the state
        still reflects them)."""
        self._updates, self._pending = [], None

    def _rebuild_state(self) -> None:
        """The bounded state built afresh from the tables (after a restore or a merge)."""
        folder = self._folder = SpilledFolder(recent=self._folder.recent)
        if not self._reports:
            return
        for nid in sorted(range(len(self._names)), key=lambda n: self._names[n].name):
            folder.add_encoded(self._phase_total(nid))
        folder.add_encoded(self._cumulative())
        ks: set[int] = set()
        for d in self._devices:
            for s, e in d.spans:
                ks.update(self._window_span(s, e))
        for k in sorted(ks)[-folder.recent:]:
            folder.add_encoded(self._window(k))
        for nm in self._names:
            occs = nm.instances[nm.instances >= 0][-folder.recent:]
            for i in occs.tolist():
                folder.add_encoded(self._phase(i))

    def state(self) -> SummaryState:
        """The latest, bounded state: what folding every record published so far gives."""
        if not self._reports:
            return fold([self._cumulative().record()], recent=self._folder.recent)
        return self._folder.state()

    def head(self) -> RecordHead:
        """``state()``'s span, metrics, verdict, notes and devices (what ``convert`` prints),
        decoded from the cumulative record alone."""
        if not self._reports:
            return decode_head(self._cumulative().data)
        return self._folder.head()

    def state_json(self) -> bytes:
        """``encode_record(self.state())`` (``summary.json``), spliced from the kept records'
        bytes (they wait in a temporary file, not in memory)."""
        return b"".join(self.state_pieces())

    def state_pieces(self) -> Iterator[bytes]:
        """``state_json`` in pieces, a slice of the file at a time."""
        if not self._reports:
            return iter((encode_record(self.state()),))
        return self._folder.state_pieces()

    def _produce(self, p: Pending) -> Iterator[EncodedRecord]:
        built = p.built
        for nid in p.names:
            yield built["t", nid]
        yield p.cumulative
        for k in p.windows:
            yield built.get(("w", k)) or self._window(k)
        for lo in range(0, len(p.instances), _IDS_AT_ONCE):  # not one int object per instance
            for i in p.instances[lo:lo + _IDS_AT_ONCE].tolist():
                yield built.get(("p", i)) or self._phase(i)
