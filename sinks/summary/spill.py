"""A ``SummaryFolder`` whose kept records wait on disk, not in memory.

Records that list every device (cumulative, phase totals, windows, phase instances) grow with
the job: 3 KB a device for the few of them ``summary.json`` keeps. The folded state keeps
their JSON in an unlinked temporary file and only their keys in memory; ``summary.json`` is
spliced from those bytes (the same bytes ``encode_record`` gives the decoded state).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from prvstream.sinks.logger import get_logger
from prvstream.sinks.scratch import ScratchFile
from prvstream.sinks.summary.encoded import EncodedRecord
from prvstream.sinks.summary.fold import SummaryFolder
from prvstream.sinks.summary.records import (
    DEFAULT_RECENT,
    SCHEMA_VERSION,
    RecordHead,
    SummaryRecord,
    SummaryState,
    decode_head,
    decode_record,
    encode_record,
    zero_metrics,
)

__all__ = ["SpilledFolder"]

log = get_logger(__name__)

#: rewrite the file once dead records are this many bytes and more than the live ones
_COMPACT_BYTES = 1 << 22


class _Ref(NamedTuple):
    """Where a record's JSON is in the file, and what the state sorts phases by."""

    offset: int
    length: int
    start_ns: int
    name: str
    number: int


class SpilledFolder(SummaryFolder):
    """``SummaryFolder`` with the records' JSON in a temporary file (``refs`` in memory)."""

    def __init__(self, state: SummaryState | None = None,
                 recent: int = DEFAULT_RECENT) -> None:
        self._file = ScratchFile("prvstream-summary-")
        self._live = 0
        self.refs: dict[tuple[str, str, int], _Ref] = {}
        super().__init__(None, recent)
        if state is not None:
            for r in (*state.windows, *state.phases, *state.phase_totals):
                self.add(r)
            self._put(("cumulative", "", 0), EncodedRecord.of(SummaryRecord(
                **{f: getattr(state, f) for f in SummaryRecord.__struct_fields__})))

    def add(self, record: SummaryRecord) -> None:
        """Fold one record in (its JSON goes to the file, its key stays in memory)."""
        self.add_encoded(EncodedRecord.of(record))

    def add_encoded(self, record: EncodedRecord) -> None:
        """``add`` a record given as its JSON."""
        view = record.view
        if view == "window":
            self._put((view, "", record.index), record)
            self.windows[record.index] = _PLACEHOLDER
            if len(self.windows) > 2 * self.recent:
                self._trim_refs(self.windows, view, "")
        elif view == "phase":
            self._put((view, record.name, record.index), record)
            by_occ = self.phases.setdefault(record.name, {})
            by_occ[record.index] = _PLACEHOLDER
            if len(by_occ) > 2 * self.recent:
                self._trim_refs(by_occ, view, record.name)
        elif view == "phase_total":
            self._put((view, record.name, 0), record)
            self.totals[record.name] = _PLACEHOLDER
        elif view == "cumulative":
            self._put((view, "", 0), record)

    def _trim_refs(self, rows: dict[int, SummaryRecord], view: str, name: str) -> None:
        for key in sorted(rows)[:-self.recent]:
            del rows[key]
            ref = self.refs.pop((view, name, key))
            self._live -= ref.length

    def _put(self, key: tuple[str, str, int], record: EncodedRecord) -> None:
        old = self.refs.get(key)
        if old is not None:
            self._live -= old.length
        start, length = self._file.append(record.pieces())  # never the whole record at once
        self.refs[key] = _Ref(start, length, record.start_ns, record.name, record.index)
        self._live += length
        dead = self._file.end - self._live
        if dead > _COMPACT_BYTES and dead > self._live:
            self._compact()

    def _compact(self) -> None:
        """Rewrite the live records into a new file."""
        old, new = self._file, ScratchFile("prvstream-summary-")
        for key, ref in list(self.refs.items()):
            offset, _ = new.append(old.read_slices(ref.offset, ref.length))
            self.refs[key] = ref._replace(offset=offset)
        old.close()
        self._file, self._live = new, new.end

    def _read(self, ref: _Ref) -> bytes:
        return b"".join(self._slices(ref))

    def _slices(self, ref: _Ref) -> Iterator[bytes]:
        return self._file.read_slices(ref.offset, ref.length)

    def _parts(self) -> tuple[_Ref | None, list[_Ref], list[_Ref], list[_Ref]]:
        """Where the cumulative record, the windows, phases and phase totals ``state`` holds
        are, in its order."""
        n = self.recent
        windows = [self.refs["window", "", k] for k in sorted(self.windows)[-n:]]
        phases = [self.refs["phase", name, k] for name, by_occ in self.phases.items()
                  for k in sorted(by_occ)[-n:]]
        phases.sort(key=lambda r: (r.start_ns, r.name, r.number))
        totals = [self.refs["phase_total", name, 0] for name in sorted(self.totals)]
        return self.refs.get(("cumulative", "", 0)), windows, phases, totals

    def state(self) -> SummaryState:
        base_ref, windows, phases, totals = self._parts()
        base = decode_record(self._read(base_ref)) if base_ref is not None else _EMPTY
        fields = {f: getattr(base, f) for f in SummaryRecord.__struct_fields__}
        return SummaryState(**fields, windows=[decode_record(self._read(w)) for w in windows],
                            phases=[decode_record(self._read(p)) for p in phases],
                            phase_totals=[decode_record(self._read(t)) for t in totals],
                            recent=self.recent)

    def head(self) -> RecordHead:
        """``state()``'s head (its cumulative record's), without decoding the other records."""
        base = self.refs.get(("cumulative", "", 0))
        return decode_head(self._read(base) if base is not None else encode_record(_EMPTY))

    def state_json(self) -> bytes:
        """``encode_record(self.state())``, spliced from the records' bytes."""
        return b"".join(self.state_pieces())

    def state_pieces(self) -> Iterator[bytes]:
        """``state_json`` in pieces (read from the file a slice at a time)."""
        base, windows, phases, totals = self._parts()
        if base is None:
            yield encode_record(_EMPTY)[:-2]
        else:
            last = b""
            for piece in self._slices(base):  # all but its closing brace
                if last:
                    yield last
                last = piece
            yield last[:-1]
        for opening, refs in ((b',"windows":[', windows), (b'],"phases":[', phases),
                              (b'],"phase_totals":[', totals)):
            yield opening
            for k, ref in enumerate(refs):
                if k:
                    yield b","
                yield from self._slices(ref)
        yield b'],"recent":' + str(self.recent).encode() + b"}\n"


#: the cumulative record of no report
_EMPTY = SummaryRecord(schema=SCHEMA_VERSION, job="", view="cumulative", start_ns=0,
                       end_ns=0, span_ns=0, metrics=zero_metrics(), devices=[])
#: what the key dicts of the base class hold instead of records
_PLACEHOLDER = SummaryRecord(schema=SCHEMA_VERSION, job="", view="", start_ns=0, end_ns=0,
                             span_ns=0, metrics=zero_metrics(), devices=[])
