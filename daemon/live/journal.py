"""Per-job durable state: which reports are in, at which byte offsets, and the live numbering.
The report entries themselves are appended to a file beside the journal (``live.reportlog``);
the output directory's safe paths are ``live.outputdir``'s.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

import msgspec

from prvstream.daemon.live.idslog import IdsLog
from prvstream.daemon.live.inputs import ReportIdentity
from prvstream.daemon.live.outputdir import exclusive_lock
from prvstream.daemon.live.reportlog import ReportEntry, ReportLog, ThreadTime
from prvstream.daemon.stream.numbering import NumberingState
from prvstream.sinks.errors import JournalCorrupt, StateDirUnusable
from prvstream.sinks.files import atomic_write
from prvstream.sinks.logger import get_logger

__all__ = [
    "JOURNAL_VERSION",
    "Duplicate",
    "JobJournal",
    "JournalState",
    "Quarantined",
    "ReportEntry",
    "ThreadTime",
    "journal_path",
]

log = get_logger(__name__)

#: bump when a field changes meaning (adding a field with a default needs no bump); 2: the
#: report entries live in their own append-only file (``entries_name``), not in ``reports``
JOURNAL_VERSION = 2


# ---------------------------------------------------------------------------------- structs


class Duplicate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A file whose content is already in the trace under another name: never appended."""

    path: str
    identity: ReportIdentity
    #: name of the committed report it duplicates
    of: str
    time_ns: int


class Quarantined(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A file set aside: reported once, retried only when its identity changes."""

    path: str
    identity: ReportIdentity | None = None
    reason: str
    time_ns: int


class JournalState(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Everything a job's writer needs to resume after a crash."""

    version: int = JOURNAL_VERSION
    job_dir: str
    root: str = ""
    #: directory holding the outputs, and every output file prvstream created (absolute)
    out_dir: str = ""
    outputs: list[str] = msgspec.field(default_factory=list)
    #: live trace origin (wall-clock ns) and the skew allowance (ns) it was derived with
    origin_wall_ns: int | None = None
    skew_allowance_ns: int = 0
    #: the report entries of a version 1 journal (moved to the entries file when read)
    reports: list[ReportEntry] = msgspec.field(default_factory=list)
    #: the live trace's published ids (``prvstream.daemon.stream.numbering.Numbering(state)``);
    #: kept in the ids file (``ids_name``), written here only by journals before it
    numbering: NumberingState = msgspec.field(default_factory=NumberingState)
    header_capacity: int = 0
    prv_length: int = 0
    summary_length: int = 0
    quarantined: list[Quarantined] = msgspec.field(default_factory=list)
    finalized: bool = False
    updated_ns: int = 0
    #: the largest record time in the live trace (its header's end time)
    end_time: int = 0
    #: inode of the committed ``.prv`` (a rewrite renamed into place but never committed
    #: leaves another inode behind)
    prv_inode: int | None = None
    duplicates: list[Duplicate] = msgspec.field(default_factory=list)
    #: file (beside the journal) holding the efficiency model's state as of this commit
    model_checkpoint: str = ""
    #: version of the blocks' codes and report metas kept beside the journal
    #: (``live.blockstore``); 0: a job committed before they were kept
    block_format: int = 0
    #: the codes file (beside the journal), its committed records, the committed bytes of
    #: the report metas
    codes_name: str = ""
    codes_records: int = 0
    metas_length: int = 0
    #: the committed report entries (``live.reportlog``): their file beside the journal, its
    #: committed bytes and the number of entries in them
    entries_name: str = ""
    entries_length: int = 0
    entries_count: int = 0
    #: running totals over the committed reports (``status.json`` without reading them):
    #: records, and the hostile rows of each report that had any
    records_total: int = 0
    hostile: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)
    #: the numbering's deltas (``live.idslog``): their file beside the journal, its
    #: committed bytes
    ids_name: str = ""
    ids_length: int = 0


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(JournalState)
#: what the journal file holds in place of the numbering (kept in its ids file)
_NO_IDS = NumberingState()


def _header(state: JournalState) -> bytes:
    """The journal file's bytes: the state without the numbering (in the ids file)."""
    return _encoder.encode(msgspec.structs.replace(state, numbering=_NO_IDS))


def _decode(raw: bytes) -> JournalState:
    try:
        return _decoder.decode(raw)
    except msgspec.ValidationError:
        try:  # a journal of the first release: its ``extra`` dict becomes typed fields
            return _migrate(raw)
        except (msgspec.DecodeError, msgspec.ValidationError, TypeError):
            pass
        raise


def _migrate(raw: bytes) -> JournalState:
    """A journal that kept ``end_time`` and ``prv_inode`` in an untyped ``extra`` dict."""
    data = msgspec.json.decode(raw)
    if not isinstance(data, dict) or "extra" not in data:
        raise TypeError("not a journal of the first release")
    extra = data.pop("extra") or {}
    data["end_time"] = int(extra.get("end_time", 0))
    data["prv_inode"] = extra.get("prv_inode")
    return msgspec.convert(data, JournalState)


# ------------------------------------------------------------------------------- file system


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def journal_path(state_dir: str | os.PathLike[str], job_dir: str | os.PathLike[str]) -> Path:
    """``<state_dir>/<readable tail>-<hash of the absolute job path>.json``."""
    absolute = os.path.abspath(os.fspath(job_dir))
    digest = hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    tail = "_".join(Path(absolute).parts[-2:])
    readable = _UNSAFE.sub("_", tail).strip("._-")[:60] or "root"
    return Path(state_dir) / f"{readable}-{digest}.json"


# ---------------------------------------------------------------------------------- journal


class JobJournal:
    """A job's journal file with fast report and quarantine lookups (single writer per job).

    Mutate :attr:`state` (or use the helpers), then :meth:`commit` once the outputs it
    describes are fsynced. The numbering is ``state.numbering``; wrap it with
    ``prvstream.daemon.stream.numbering.Numbering(journal.state.numbering)`` to assign ids.
    """

    def __init__(self, path: Path, state: JournalState) -> None:
        self.path = Path(path)
        self.state = state
        self._lock_fd: int | None = None
        #: every committed report's entry, in journal order (on disk, indexed in memory)
        self.reports = ReportLog(self.path.parent, self.path.stem)
        self.reports.load(state.entries_name, state.entries_length, state.entries_count)
        if state.reports:
            self._migrate_reports()
        #: the numbering's deltas (a journal before them holds it inline: written whole at
        #: the next commit)
        self.ids = IdsLog(self.path.parent, self.path.stem)
        if state.ids_name:
            state.numbering = self.ids.load(state.ids_name, state.ids_length)
        self._reindex()

    def _migrate_reports(self) -> None:
        """A version 1 journal's entries moved to an entries file (adopted at the next
        commit; until then the journal on disk still holds them)."""
        state = self.state
        if state.entries_name:
            raise JournalCorrupt(f"journal {self.path} names an entries file and holds entries "
                                 "too; move it aside and restart")
        moved, state.reports = state.reports, []
        for entry in moved:
            self._tally(entry)
            self.reports.append(entry)
        self.reports.replace_all(lambda entry: None)
        state.version = JOURNAL_VERSION
        log.info("journal_entries_moved", journal=str(self.path), reports=len(moved))

    # -- life cycle ----------------------------------------------------------------------
    @classmethod
    def open(cls, state_dir: str | os.PathLike[str], job_dir: str | os.PathLike[str], *,
             root: str | os.PathLike[str] = "") -> JobJournal:
        """Load the job's journal, or start a fresh one (not written until :meth:`commit`)."""
        path = journal_path(state_dir, job_dir)
        loaded = cls.load(path)
        if loaded is not None:
            return loaded
        return cls(path, JournalState(job_dir=os.path.abspath(os.fspath(job_dir)),
                                      root=os.fspath(root)))

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, _again: int = 2) -> JobJournal | None:
        """The journal at ``path``; ``None`` when absent; ``JournalCorrupt`` when unreadable.

        Read without the job's lock (``prvstream finalize`` reads before it asks for it), a
        commit of the running daemon may replace the files it names in between: read again.
        """
        path = Path(path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            if path.parent.exists() and not path.parent.is_dir():
                raise _state_dir_gone(path) from None
            return None
        except OSError as exc:
            if not path.parent.is_dir():  # the state directory itself, not this journal
                raise _state_dir_gone(path) from exc
            raise JournalCorrupt(
                f"journal {path} cannot be read ({exc}); fix its permissions or move it "
                f"aside (mv {path} {path}.bad) and restart") from exc
        try:
            state = _decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise JournalCorrupt(
                f"journal {path} is corrupt ({exc}); move it aside (mv {path} {path}.bad) and "
                f"restart: the job's outputs will be rebuilt from its reports") from exc
        if state.version > JOURNAL_VERSION:
            raise JournalCorrupt(
                f"journal {path} was written by a newer prvstream (version {state.version} > "
                f"{JOURNAL_VERSION}); upgrade prvstream or move the journal aside")
        try:
            return cls(path, state)
        except JournalCorrupt:
            try:
                replaced = path.read_bytes() != raw
            except OSError:
                replaced = False
            if _again <= 0 or not replaced:
                raise
            return cls.load(path, _again=_again - 1)

    def commit(self) -> None:
        """Append the new report entries (fsynced), then durably replace the journal file,
        which names how many of them are committed (atomic)."""
        state = self.state
        state.updated_ns = time.time_ns()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.reports.write()
            state.entries_name, state.entries_length = self.reports.name, self.reports.length
            state.entries_count = len(self.reports)
            self.ids.write(state.numbering)
            state.ids_name, state.ids_length = self.ids.name, self.ids.length
            atomic_write(self.path, _header(state))
        except OSError as exc:
            raise StateDirUnusable(
                f"cannot write the journal {self.path} ({exc.strerror or exc}); free space "
                f"or fix the permissions of {self.path.parent} (--state), then restart"
            ) from exc
        self.reports.drop_others()
        self.ids.drop_others()
        log.debug("journal_committed", journal=str(self.path), reports=state.entries_count,
                  prv_length=state.prv_length)

    def lock(self) -> None:
        """Take an exclusive advisory lock on the job (one daemon per job); raise if held."""
        if self._lock_fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_suffix(".lock")
        self._lock_fd = exclusive_lock(
            lock_path, f"another prvstream process is writing job {self.state.job_dir} (lock "
                       f"{lock_path} is held); stop it first")

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- reports and quarantine ----------------------------------------------------------
    def snapshot(self) -> bytes:
        """The state to go back to with :meth:`restore` (its size does not grow with the
        reports or ids committed: those are kept on disk)."""
        return _header(self.state)

    def restore(self, snapshot: bytes) -> None:
        """Go back to a :meth:`snapshot` taken earlier (the reports and ids it counted), e.g.
        after a failed append."""
        state = _decoder.decode(snapshot)
        self.state = state
        self.reports.keep_first(state.entries_name, state.entries_length, state.entries_count)
        if state.ids_name:
            state.numbering = self.ids.load(state.ids_name, state.ids_length)
        else:  # never committed with an ids file: the journal file's own, if any
            on_disk = _committed_numbering(self.path)
            state.numbering = on_disk
            self.ids = IdsLog(self.path.parent, self.path.stem)
        self._reindex()

    def has_report(self, identity: ReportIdentity) -> bool:
        return self.reports.has(identity)

    def report_with(self, fingerprint: str) -> ReportEntry | None:
        """The committed report with this content fingerprint, if any."""
        return self.reports.with_fingerprint(fingerprint)

    def is_duplicate(self, path: str | os.PathLike[str], identity: ReportIdentity) -> bool:
        return (os.fspath(path), identity) in self._duplicates

    def add_duplicate(self, path: str | os.PathLike[str], identity: ReportIdentity,
                      of: str) -> None:
        """Record that ``path`` holds a committed report's content (then :meth:`commit`)."""
        key = os.fspath(path)
        self.state.duplicates = [d for d in self.state.duplicates if d.path != key]
        self.state.duplicates.append(Duplicate(path=key, identity=identity, of=of,
                                               time_ns=time.time_ns()))
        self._reindex()

    def add_report(self, entry: ReportEntry) -> None:
        """Record a report whose block is durably in the .prv (then :meth:`commit`)."""
        if not entry.committed_ns:
            entry.committed_ns = time.time_ns()
        self.reports.append(entry)
        self._tally(entry)

    def _tally(self, entry: ReportEntry) -> None:
        self.state.records_total += entry.records
        if entry.hostile:
            self.state.hostile[entry.name] = dict(entry.hostile)

    def is_quarantined(self, path: str | os.PathLike[str],
                       identity: ReportIdentity | None = None) -> bool:
        """True when ``path`` was set aside and has not changed since (same identity)."""
        entry = self._quarantine.get(os.fspath(path))
        return entry is not None and (identity is None or entry.identity == identity)

    def quarantine(self, path: str | os.PathLike[str], reason: str,
                   identity: ReportIdentity | None = None) -> None:
        """Set a file aside (replacing any earlier entry for the same path)."""
        key = os.fspath(path)
        entry = Quarantined(path=key, identity=identity, reason=reason, time_ns=time.time_ns())
        self.state.quarantined = [q for q in self.state.quarantined if q.path != key]
        self.state.quarantined.append(entry)
        self._quarantine[key] = entry

    def unquarantine(self, path: str | os.PathLike[str]) -> None:
        """Forget that ``path`` was set aside (it has since landed as a report)."""
        key = os.fspath(path)
        if self._quarantine.pop(key, None) is not None:
            self.state.quarantined = [q for q in self.state.quarantined if q.path != key]

    def _reindex(self) -> None:
        self._duplicates = {(d.path, d.identity) for d in self.state.duplicates}
        self._quarantine = {q.path: q for q in self.state.quarantined}


def _committed_numbering(path: Path) -> NumberingState:
    """The numbering a journal file of before the ids file holds (empty when there is none)."""
    try:
        return _decode(path.read_bytes()).numbering
    except FileNotFoundError:
        return NumberingState()
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise JournalCorrupt(f"journal {path} cannot be read again ({exc}); move it aside "
                             f"(mv {path} {path}.bad) and restart") from exc


def _state_dir_gone(path: Path) -> StateDirUnusable:
    return StateDirUnusable(f"state directory {path.parent} is no longer a directory; restore "
                            f"it (--state) and restart")
