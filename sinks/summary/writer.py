"""The append-only ``summary.jsonl`` writer and its readers (whole file, from an offset, folded)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from prvstream.sinks.errors import OutputConflict, PrvstreamError
from prvstream.sinks.files import atomic_write, fsync_dir
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.fold import SummaryFolder
from prvstream.sinks.summary.records import (
    DEFAULT_RECENT,
    SummaryRecord,
    SummaryState,
    decode_record,
    decode_state,
    encode_record,
    encode_state,
)

__all__ = ["SummaryWriter", "iter_records", "load_summary", "read_records"]

log = get_logger(__name__)

#: bytes of encoded lines gathered before a write (the lines and their joined copy are held
#: at once, at the end of a long report's conversion: its peak)
_SLICE = 1 << 18


class SummaryWriter:
    """Append-only ``summary.jsonl`` with a committed byte length the daemon can journal."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.is_symlink():
            raise OutputConflict(f"{self.path} is a symlink; prvstream never writes through "
                                 f"symlinks, remove it or choose another output directory")
        self._length = self.path.stat().st_size if self.path.exists() else 0
        if self._length:
            with open(self.path, "rb") as fh:
                head = fh.read(16)
            if not head.startswith(b'{"schema":'):
                raise OutputConflict(f"{self.path} exists and is not a prvstream summary; "
                                     f"move it away or choose another output directory")

    @property
    def length(self) -> int:
        """Bytes of ``summary.jsonl`` written and fsynced by this writer (or found at open)."""
        return self._length

    def append(self, record: SummaryRecord) -> int:
        """Append one record, fsync, and return the new committed length in bytes."""
        return self.append_many([record])

    def append_many(self, records: Iterable[SummaryRecord]) -> int:
        """Append records with one fsync; return the new committed length in bytes.

        ``records`` may be a generator: lines are written in slices of about 1 MiB as they
        come, never all held. If it raises, the file is cut back to the committed length.
        """
        return self.append_bytes(encode_record(record) for record in records)

    def append_bytes(self, pieces: Iterable[bytes]) -> int:
        """``append_many`` of records given as the bytes of their lines, in any pieces."""
        written = 0
        fh = None
        try:
            buf: list[bytes] = []
            size = 0
            for piece in pieces:
                buf.append(piece)
                size += len(piece)
                if size >= _SLICE:
                    fh = fh or open(self.path, "ab")  # noqa: SIM115 - closed below
                    fh.write(b"".join(buf))
                    written, buf, size = written + size, [], 0
            if buf:
                fh = fh or open(self.path, "ab")  # noqa: SIM115 - closed below
                fh.write(b"".join(buf))
                written += size
            if fh is not None:
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            if fh is not None:
                fh.truncate(self._length)
            raise
        finally:
            if fh is not None:
                fh.close()
        self._length += written
        return self._length

    def truncate_to(self, length: int) -> None:
        """Cut ``summary.jsonl`` back to a committed length (recovery after a crash)."""
        if length < 0:
            raise ValueError(f"length must not be negative, got {length}")
        if self.path.exists():
            with open(self.path, "r+b") as fh:
                fh.truncate(length)
                fh.flush()
                os.fsync(fh.fileno())
        elif length:
            raise PrvstreamError(f"{self.path} is missing but the journal says {length} bytes "
                                 f"were committed; delete the job's journal to start over")
        log.info("summary_truncated", path=str(self.path), length=length,
                 dropped=self._length - length if self._length > length else 0)
        self._length = length

    def publish(self, path: str | os.PathLike[str], *, sync_dir: bool = True) -> None:
        """Rename the (complete, fsynced) file to ``path`` atomically; never over a symlink.
        ``sync_dir=False``: the caller fsyncs the directory after its own renames there."""
        target = Path(path)
        if target.is_symlink():
            raise OutputConflict(f"{target} is a symlink; prvstream never writes through "
                                 f"symlinks, remove it or choose another output name")
        os.replace(self.path, target)
        if sync_dir:
            fsync_dir(target.parent)
        self.path = target

    @staticmethod
    def write_state(state: SummaryState, path: str | os.PathLike[str]) -> None:
        """Write ``summary.json`` (or ``OUT.summary.json``) atomically."""
        atomic_write(path, encode_state(state))


def read_records(path: str | os.PathLike[str],
                 offset: int = 0) -> tuple[list[SummaryRecord], int]:
    """Complete lines of ``summary.jsonl`` from byte ``offset``; return them and the new offset.

    A partial last line (a writer mid-append) is left for the next call.
    """
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read()
    end = data.rfind(b"\n") + 1
    records: list[SummaryRecord] = []
    for line in data[:end].splitlines():
        if not line.strip():
            continue
        try:
            records.append(decode_record(line))
        except msgspec.DecodeError as exc:
            raise PrvstreamError(f"{path} holds a line that is not a summary record ({exc}); "
                                 f"is it a prvstream summary.jsonl?") from exc
    return records, offset + end


def iter_records(path: str | os.PathLike[str]) -> Iterator[SummaryRecord]:
    """Complete lines of ``summary.jsonl``, one record at a time (a partial last line is not)."""
    with open(path, "rb") as fh:
        for line in fh:
            if not line.endswith(b"\n"):
                break
            if not line.strip():
                continue
            try:
                yield decode_record(line)
            except msgspec.DecodeError as exc:
                raise PrvstreamError(f"{path} holds a line that is not a summary record "
                                     f"({exc}); is it a prvstream summary.jsonl?") from exc



def load_summary(path: str | os.PathLike[str], *, recent: int = DEFAULT_RECENT,
                 ) -> tuple[SummaryState, list[SummaryRecord]]:
    """Read a ``summary.jsonl`` (folded as it is read) or a ``summary.json``; return the state
    and history: the cumulative records in file order (empty for a ``.json`` state)."""
    p = Path(path)
    if p.suffix == ".jsonl":
        folder = SummaryFolder(recent=recent)
        history: list[SummaryRecord] = []
        for record in iter_records(p):
            folder.add(record)
            if record.view == "cumulative":
                history.append(record)
        return folder.state(), history
    return decode_state(p.read_bytes()), []

