"""What a committed block needs beyond its bytes, kept beside the job's journal.

Finalize merges the live ``.prv``'s committed blocks instead of re-reading exports, so each
commit also records, durably and before the journal names it:

- a *code* per record (``<journal>.codes.<generation>``, uint32 little-endian, in ``.prv``
  order): the parts of the record's sort key its text does not hold (priority, rank, the
  committing report's journal index, and the host-state continuation bit);
- a *report meta* per report (``<journal>.reports``, length-prefixed msgpack frames): its
  name, host, start and what its canonical numbering needs (processes, threads, labels).

The journal's ``codes_name``/``codes_records``/``metas_length`` say how much is committed;
recovery truncates both files back to them, as it truncates the ``.prv``.
"""

from __future__ import annotations

import os
import secrets
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Protocol

import msgspec
import numpy as np

from prvstream.daemon.live.frames import FrameCut, append_frames, split_frames
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.stream.claimindex import ClaimIndex
from prvstream.daemon.stream.claims import Claim, host_claims
from prvstream.daemon.stream.pipeline import (
    PreparedReport,
    ReportObjects,
    objects_of,
    value_labels_of,
)
from prvstream.sinks.errors import JournalCorrupt, StateDirUnusable
from prvstream.sinks.logger import get_logger

__all__ = [
    "BLOCK_FORMAT",
    "BlockStore",
    "CodesFile",
    "CodesSource",
    "CodesWriter",
    "ReportMeta",
]

log = get_logger(__name__)

#: version of the codes and report metas (the journal's ``block_format``; 0: none kept)
BLOCK_FORMAT = 1



class ReportMeta(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One committed report as finalize needs it (never re-read from its export)."""

    version: int = BLOCK_FORMAT
    name: str
    host: str
    wall_start: int
    #: (host, pid, process name, rank, [(thread key, thread name)]) per process
    objects: list[tuple[str, int, str, int | None, list[tuple[tuple[int, int, int], str]]]]
    #: value group -> every label the report uses
    values: dict[str, list[str]]
    #: where it gives CPU threads host states (``stream.claims``); None: kept by an older
    #: prvstream, so finalize cannot clip overlapping capture ranges from the blocks alone
    claims: list[Claim] | None = None

    @classmethod
    def of(cls, name: str, host: str, wall_start: int, objects: ReportObjects,
           values: dict[str, set[str]], claims: list[Claim]) -> ReportMeta:
        return cls(name=name, host=host, wall_start=wall_start,
                   objects=[(h, p, n, r, sorted(threads.items()))
                            for h, p, n, r, threads in objects],
                   values={g: sorted(v) for g, v in values.items()}, claims=list(claims))

    @classmethod
    def of_report(cls, name: str, rep: PreparedReport) -> ReportMeta:
        """The meta of a prepared report committed under ``name``."""
        return cls.of(name, rep.host, rep.wall_start, objects_of(rep), value_labels_of(rep),
                      host_claims(rep))

    @property
    def sort_key(self) -> tuple[int, str, str]:
        """Canonical report order (``PreparedReport.sort_key``)."""
        return (self.wall_start, self.host, self.name)

    def report_objects(self) -> ReportObjects:
        return [(h, p, n, r, {(k[0], k[1], k[2]): t for k, t in threads})
                for h, p, n, r, threads in self.objects]

    def value_sets(self) -> dict[str, set[str]]:
        return {g: set(v) for g, v in self.values.items()}


_meta_encoder = msgspec.msgpack.Encoder()
_meta_decoder = msgspec.msgpack.Decoder(ReportMeta)


class CodesSource(Protocol):
    """Where a block merge reads committed codes."""

    def codes(self, first: int, count: int) -> np.ndarray: ...


class CodesFile:
    """Committed codes read from a copy of a job's codes file (a Dask worker's view)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def codes(self, first: int, count: int) -> np.ndarray:
        return _read_codes(self.path, first, count)


def _read_codes(path: Path, first: int, count: int) -> np.ndarray:
    with path.open("rb") as fh:
        fh.seek(first * 4)
        data = fh.read(count * 4)
    if len(data) != count * 4:
        raise JournalCorrupt(f"{path} is shorter than its journal says; convert the reports "
                             "instead")
    return np.frombuffer(data, "<u4")


class CodesWriter:
    """Appends codes to one codes file (fsynced by ``close``)."""

    def __init__(self, path: Path, at: int) -> None:
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        self._fh: IO[bytes] = os.fdopen(fd, "r+b")
        self._fh.truncate(at * 4)
        self._fh.seek(at * 4)
        self.records = at

    def write(self, codes: np.ndarray) -> None:
        self._fh.write(codes.tobytes())
        self.records += len(codes)

    def close(self, *, sync: bool = True) -> None:
        """Flush (and fsync unless ``sync`` is False: then ``BlockStore.sync`` does)."""
        self._fh.flush()
        if sync:
            os.fsync(self._fh.fileno())
        self._fh.close()

    def abort(self) -> None:
        self._fh.close()


class BlockStore:
    """A job's codes and report metas (single writer: the job's ``LiveTrace``)."""

    def __init__(self, journal: JobJournal) -> None:
        self.journal = journal
        self.folder = journal.path.parent
        self.stem = journal.path.stem
        #: the committed reports' claims by thread, for ``earlier`` (and the metas_length
        #: they were read at)
        self._claims: tuple[int, ClaimIndex] | None = None

    @property
    def complete(self) -> bool:
        """Whether every committed report's codes and meta were kept."""
        state = self.journal.state
        return state.block_format == BLOCK_FORMAT and bool(state.codes_name)

    @property
    def metas_path(self) -> Path:
        return self.folder / f"{self.stem}.reports"

    def codes_path(self, name: str | None = None) -> Path:
        return self.folder / (name if name is not None else self.journal.state.codes_name)

    def start(self) -> None:
        """A job with nothing committed keeps codes from its first report on."""
        state = self.journal.state
        if not self.journal.reports and state.block_format != BLOCK_FORMAT:
            state.block_format = BLOCK_FORMAT
        if state.block_format == BLOCK_FORMAT and not state.codes_name:
            state.codes_name = self.new_codes_name()

    def new_codes_name(self) -> str:
        return f"{self.stem}.codes.{secrets.token_hex(6)}"

    # -- committing ------------------------------------------------------------------------
    def append_codes(self) -> CodesWriter | None:
        """A writer behind the committed codes (None when this job keeps none)."""
        if not self.complete:
            return None
        return self.rewrite_codes(self.journal.state.codes_name,
                                  self.journal.state.codes_records)

    def rewrite_codes(self, name: str, at: int = 0) -> CodesWriter:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            return CodesWriter(self.codes_path(name), at)
        except OSError as exc:
            raise StateDirUnusable(
                f"cannot write {self.codes_path(name)} ({exc.strerror or exc}); free space or "
                "fix the permissions of --state, then restart") from exc

    def append_block_codes(self, path: str, records: int) -> None:
        """Append a block's codes made elsewhere (a Dask worker's file of ``records``)."""
        writer = self.append_codes()
        if writer is None:
            return
        try:
            with open(path, "rb") as src:
                data = src.read()
            if len(data) != 4 * records:
                raise OSError(f"{path} holds {len(data) // 4} codes for {records} records")
            writer.write(np.frombuffer(data, "<u4"))
        except BaseException:
            writer.abort()
            raise
        writer.close()
        self.journal.state.codes_records = writer.records

    def sync(self) -> None:
        """fsync the codes and metas written without it (a group commit's members)."""
        for path in (self.codes_path(), self.metas_path):
            if path.name and path.is_file():
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def add_meta(self, meta: ReportMeta, *, sync: bool = True) -> None:
        """Append a report's meta (durably unless ``sync`` is False: then ``sync`` does);
        the journal's ``metas_length`` follows."""
        state = self.journal.state
        if state.block_format != BLOCK_FORMAT:
            return
        end = append_frames(self.metas_path, state.metas_length, [_meta_encoder.encode(meta)],
                            sync=sync)
        if self._claims is not None and self._claims[0] == state.metas_length:
            self._claims[1].add(meta.sort_key, meta.claims or [])
            self._claims = (end, self._claims[1])
        else:  # rolled back since it was read: read again when asked
            self._claims = None
        state.metas_length = end

    def earlier(self, sort_key: tuple[int, str, str], claims: list[Claim]) -> list[Claim]:
        """The claims on the threads of ``claims`` of the committed reports that come before
        ``sort_key`` in canonical order: where a new report's host states yield. Reports
        that come after it yield to it at finalize instead, so its block keeps its states
        there. The metas are read once, then followed as they are added; the cost is the
        claims on the report's own threads."""
        state = self.journal.state
        if state.block_format != BLOCK_FORMAT or not claims:
            return []
        if self._claims is None or self._claims[0] != state.metas_length:
            index = ClaimIndex()
            for m in self.metas() if state.metas_length else []:
                index.add(m.sort_key, m.claims or [])
            self._claims = (state.metas_length, index)
        return self._claims[1].earlier(sort_key, claims)

    def claims_known(self) -> bool:
        """Whether every committed report's meta says where it gives host states (False
        when the metas cannot be read)."""
        if not self.journal.reports:
            return True
        try:
            return all(m.claims is not None for m in self.metas())
        except (JournalCorrupt, OSError):
            return False

    # -- reading ---------------------------------------------------------------------------
    def metas(self) -> list[ReportMeta]:
        """Every committed report's meta, in journal order."""
        state = self.journal.state
        with self.metas_path.open("rb") as fh:
            raw = fh.read(state.metas_length)
        try:
            out = [_meta_decoder.decode(payload) for _, payload in split_frames(raw)]
        except (struct.error, FrameCut, msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise JournalCorrupt(f"{self.metas_path} is corrupt ({exc}); finalize cannot "
                                 "rebuild the trace's names: convert the reports instead") from exc
        count = len(self.journal.reports)
        if len(out) != count or any(m.version > BLOCK_FORMAT for m in out):
            raise JournalCorrupt(
                f"{self.metas_path} holds {len(out)} report metas for {count} "
                "committed reports (or a newer format); convert the reports instead")
        return out

    def codes(self, first: int, count: int) -> np.ndarray:
        """``count`` committed codes from record ``first`` on."""
        return _read_codes(self.codes_path(), first, count)

    def iter_codes(self, first: int, count: int, step: int) -> Iterator[np.ndarray]:
        for at in range(first, first + count, step):
            yield self.codes(at, min(step, first + count - at))

    # -- recovery --------------------------------------------------------------------------
    def recover(self) -> None:
        """Cut both files back to what the journal committed; drop other codes files."""
        state = self.journal.state
        keep = state.codes_name
        for path in self.folder.glob(f"{self.stem}.codes.*"):
            if path.name != keep:
                path.unlink(missing_ok=True)
        if state.block_format != BLOCK_FORMAT:
            return
        for path, length in ((self.codes_path(), state.codes_records * 4),
                             (self.metas_path, state.metas_length)):
            if not keep and path != self.metas_path:
                continue
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                if length:
                    log.warning("block_store_missing", file=str(path),
                                hint="finalize will read the reports' exports")
                    state.block_format = 0
                continue
            if size < length:
                log.warning("block_store_short", file=str(path), size=size, committed=length,
                            hint="finalize will read the reports' exports")
                state.block_format = 0
            elif size > length:
                with path.open("r+b") as fh:
                    fh.truncate(length)
                    os.fsync(fh.fileno())

    def adopt(self, name: str, records: int) -> None:
        """A rewrite's codes file becomes the job's (the journal commit makes it so)."""
        state = self.journal.state
        state.codes_name = name
        state.codes_records = records
