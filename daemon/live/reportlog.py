"""A job's committed report entries: length-prefixed msgpack frames appended to a file beside its
journal at each commit (the journal names the file, its committed bytes and entries), with only
a compact index in memory: frame offsets, identity digests, fingerprints.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import msgspec

from prvstream.daemon.live.digestindex import DigestIndex
from prvstream.daemon.live.frames import FRAME, append_frames
from prvstream.daemon.live.inputs import ReportIdentity
from prvstream.daemon.stream.ranks import RankedTask
from prvstream.sinks.errors import JournalCorrupt, StateDirUnusable
from prvstream.sinks.logger import get_logger
from prvstream.sinks.madesequence import MadeSequence
from prvstream.sinks.narrowcols import extended

__all__ = ["ReportEntry", "ReportLog", "ThreadTime"]

log = get_logger(__name__)

#: bytes read at once when the whole log is streamed
_READ = 1 << 20


class ThreadTime(msgspec.Struct, frozen=True, array_like=True):
    """Last record time (ns, relative to the trace origin) of (task id, thread id)."""

    task: int
    thread: int
    time: int


class ReportEntry(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One committed report: its block ``[block_start, block_end)`` in the .prv."""

    identity: ReportIdentity
    name: str
    path: str
    block_start: int
    block_end: int
    records: int
    thread_last: list[ThreadTime] = msgspec.field(default_factory=list)
    wall_start_ns: int = 0
    wall_end_ns: int = 0
    committed_ns: int = 0
    #: what the report is whatever its name (``inputs.fingerprint``); "" in old journals
    fingerprint: str = ""
    #: a link or clone of the export an older prvstream kept (none is made any more: the
    #: committed blocks are the source of truth); read only by a job without block codes
    kept: str = ""
    #: its processes with GPU work and their ranks when known (``pipeline.ranked_tasks``)
    ranks: list[RankedTask] = msgspec.field(default_factory=list)
    #: rows dropped or clamped as hostile, by ``"<kind> <what>"`` (``kinds.bounds``)
    hostile: dict[str, int] = msgspec.field(default_factory=dict)


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(ReportEntry)
_identity_encoder = msgspec.msgpack.Encoder()


def identity_digest(identity: ReportIdentity) -> bytes:
    """16 bytes standing for a report identity in the in-memory index."""
    return hashlib.blake2b(_identity_encoder.encode(identity), digest_size=16).digest()


def _fingerprint_key(fingerprint: str) -> bytes:
    """16 bytes standing for a report's fingerprint in the in-memory index (not its 64-digit
    text: a job of thousands of reports keeps one a report)."""
    return hashlib.blake2b(fingerprint.encode(), digest_size=16).digest()


class ReportLog(MadeSequence[ReportEntry]):
    """The entries of a job's reports in journal order: committed ones on disk, entries added
    since the last :meth:`write` in memory. Single writer (the job's journal)."""

    def __init__(self, folder: Path, stem: str) -> None:
        self.folder = folder
        self.stem = stem
        #: the file holding the written entries ("": none yet) and its valid bytes
        self.name = ""
        self.length = 0
        #: where each committed entry starts in the file (32 bits until one does not fit)
        self._offsets = array("i")
        self._pending: list[ReportEntry] = []
        #: the file ``name`` was written by :meth:`replace_all` and is not yet fsynced
        self._unsynced = False
        #: ``identity_digest`` of each entry's identity -> its index
        self._identities = DigestIndex()
        #: ``_fingerprint_key`` of each entry's fingerprint -> its index
        self._fingerprints = DigestIndex()

    # -- the sequence ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._offsets) + len(self._pending)

    def _item(self, index: int) -> ReportEntry:
        if index >= len(self._offsets):
            return self._pending[index - len(self._offsets)]
        at = self._offsets[index]
        end = self._offsets[index + 1] if index + 1 < len(self._offsets) else self.length
        with self._path().open("rb") as fh:
            fh.seek(at)
            raw = fh.read(end - at)
        return self._decode(raw[FRAME.size:])

    def __iter__(self) -> Iterator[ReportEntry]:
        for _, entry in self._frames():
            yield entry
        yield from list(self._pending)

    def __bool__(self) -> bool:
        return len(self) > 0

    # -- lookups -----------------------------------------------------------------------------
    def has(self, identity: ReportIdentity) -> bool:
        return identity_digest(identity) in self._identities

    def with_fingerprint(self, fingerprint: str) -> ReportEntry | None:
        index = self._fingerprints.get(_fingerprint_key(fingerprint)) if fingerprint else None
        return None if index is None else self[index]

    # -- changes -----------------------------------------------------------------------------
    def append(self, entry: ReportEntry) -> None:
        """Add an entry (on disk at the next :meth:`write`)."""
        self._index(entry, len(self))
        self._pending.append(entry)

    def replace_all(self, change: Callable[[ReportEntry], None]) -> None:
        """Rewrite every entry through ``change`` into a new file (a rewrite of the trace moved
        the blocks); the journal's next commit adopts it, recovery drops it otherwise."""
        name = f"{self.stem}.entries.{secrets.token_hex(6)}"
        offsets = array("i")
        at = 0
        path = self.folder / name
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with _open_new(path) as fh:
                for entry in self:
                    change(entry)
                    data = _encoder.encode(entry)
                    offsets = extended(offsets, (at,))
                    fh.write(FRAME.pack(len(data)) + data)
                    at += FRAME.size + len(data)
        except OSError as exc:
            path.unlink(missing_ok=True)
            raise _unusable(path, exc) from exc
        self.name, self.length, self._offsets = name, at, offsets
        self._pending = []
        self._unsynced = True

    def write(self) -> None:
        """Append the entries added since the last call behind the written ones (cutting off
        anything after them) and fsync: afterwards ``name``/``length``/``len(self)`` are what
        the journal commits."""
        if not self._pending and not self._unsynced:
            return
        if not self.name:
            self.name = f"{self.stem}.entries.{secrets.token_hex(6)}"
        path = self._path()
        payloads = [_encoder.encode(entry) for entry in self._pending]
        offsets: list[int] = []
        at = self.length
        for data in payloads:
            offsets.append(at)
            at += FRAME.size + len(data)
        try:
            at = append_frames(path, self.length, payloads)
        except OSError as exc:
            raise _unusable(path, exc) from exc
        self._offsets = extended(self._offsets, offsets)
        self._pending = []
        self.length = at
        self._unsynced = False

    def drop_others(self) -> None:
        """After a journal commit (and at recovery): entry files the journal does not name."""
        for path in self.folder.glob(f"{self.stem}.entries.*"):
            if path.name != self.name:
                path.unlink(missing_ok=True)

    # -- loading -----------------------------------------------------------------------------
    def load(self, name: str, length: int, count: int) -> None:
        """The committed entries: ``count`` of them in ``length`` bytes of file ``name``. Reads
        only: bytes beyond them (a commit that never happened) are cut off by the next
        :meth:`write`, files the journal does not name dropped by :meth:`drop_others`."""
        self.name, self.length = name, length
        self._offsets = array("i")
        self._pending = []
        self._unsynced = False
        self._identities = DigestIndex()
        self._fingerprints = DigestIndex()
        if not name:
            if count:
                raise self._corrupt(f"no entry file for {count} committed reports")
            return
        path = self._path()
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise self._corrupt("its entry file is missing") from None
        if size < length:
            raise self._corrupt(f"its entry file holds {size} of {length} committed bytes")
        for at, entry in self._frames():
            self._index(entry, len(self._offsets))
            self._offsets = extended(self._offsets, (at,))
        if len(self._offsets) != count:
            raise self._corrupt(f"{len(self._offsets)} entries for {count} committed reports")

    def keep_first(self, name: str, length: int, count: int) -> None:
        """Back to the committed ``count`` entries (a failed append): cheap when they are a
        prefix of what is held, else loaded again."""
        if name == self.name and count <= len(self._offsets) and not self._unsynced and (
                count == len(self._offsets) or self._offsets[count] == length):
            self._identities.drop_from(count)
            self._fingerprints.drop_from(count)
            self._pending = []
            del self._offsets[count:]
            self.length = length
            return
        self.load(name, length, count)

    # -- inside ------------------------------------------------------------------------------
    def _path(self) -> Path:
        return self.folder / self.name

    def _index(self, entry: ReportEntry, index: int) -> None:
        self._identities.add(identity_digest(entry.identity), index)
        if entry.fingerprint:
            self._fingerprints.add(_fingerprint_key(entry.fingerprint), index)

    def _frames(self) -> Iterator[tuple[int, ReportEntry]]:
        """(offset, entry) of every written entry, streamed."""
        if not self.name or not self.length:
            return
        with self._path().open("rb") as fh:
            buf = b""
            base = 0  # file offset of buf[0]
            at = 0
            while base + at < self.length:
                if len(buf) - at < FRAME.size:
                    buf, base, at = _refill(fh, buf, base, at, self.length)
                    if len(buf) - at < FRAME.size:
                        raise self._corrupt("its entry file ends inside a frame")
                (size,) = FRAME.unpack_from(buf, at)
                end = at + FRAME.size + size
                if end > len(buf):
                    buf, base, at = _refill(fh, buf, base, at, self.length, need=end - at)
                    end = at + FRAME.size + size
                    if end > len(buf):
                        raise self._corrupt("its entry file ends inside a frame")
                yield base + at, self._decode(buf[at + FRAME.size:end])
                at = end

    def _decode(self, raw: bytes) -> ReportEntry:
        try:
            return _decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise self._corrupt(f"an entry is unreadable ({exc})") from exc

    def _corrupt(self, what: str) -> JournalCorrupt:
        path = self._path()
        return JournalCorrupt(
            f"the report entries of a journal in {self.folder} ({path.name}) are corrupt: "
            f"{what}; move the journal and its files ({self.stem}.*) aside and restart: the "
            "job's outputs will be rebuilt from its reports")


def _refill(fh: IO[bytes], buf: bytes, base: int, at: int, limit: int, need: int = 0
            ) -> tuple[bytes, int, int]:
    """``buf`` from ``at`` on plus the next bytes of ``fh`` (up to ``limit``)."""
    rest = buf[at:]
    base += at
    want = max(_READ, need - len(rest))
    more = fh.read(min(want, limit - base - len(rest)))
    return rest + more, base, 0


def _open_new(path: Path) -> IO[bytes]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW,
                 0o644)
    return os.fdopen(fd, "wb")


def _unusable(path: Path, exc: OSError) -> StateDirUnusable:
    return StateDirUnusable(
        f"cannot write the report entries {path} ({exc.strerror or exc}); free space or fix "
        f"the permissions of {path.parent} (--state), then restart")
