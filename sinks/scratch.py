"""An unlinked temporary file that bytes are appended to and read back from by offset: the
spilled summary records, an update's kept records and a batch's held rows all live in one.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from typing import IO

__all__ = ["ScratchFile"]

#: bytes read back at a time
READ_BYTES = 1 << 18


class ScratchFile:
    """Created at the first append (in ``directory``, else the temporary directory), removed
    at once (nothing is left behind), closed by ``close`` or with its owner."""

    def __init__(self, prefix: str, directory: str | os.PathLike[str] | None = None) -> None:
        self._prefix = prefix
        self._directory = directory
        self._fh: IO[bytes] | None = None
        #: bytes appended so far (the next append's offset)
        self.end = 0

    def fileno(self) -> int:
        """The file's descriptor (it is created if it was not yet)."""
        if self._fh is None:
            self._fh = tempfile.TemporaryFile(  # noqa: SIM115 - open for the object's life
                prefix=self._prefix, dir=self._directory)
            weakref.finalize(self, self._fh.close)
        return self._fh.fileno()

    def append(self, pieces: Iterable[bytes | memoryview]) -> tuple[int, int]:
        """Write ``pieces`` one after the other at the end (each whole, short writes
        continued); their offset and total length."""
        fd, start = self.fileno(), self.end
        for piece in pieces:
            view = memoryview(piece).cast("B")
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], self.end + done)
            self.end += done
        return start, self.end - start

    def read_slices(self, offset: int, length: int) -> Iterator[bytes]:
        """``length`` bytes from ``offset``, ``READ_BYTES`` at a time."""
        fd, end = self.fileno(), offset + length
        while offset < end:
            data = os.pread(fd, min(READ_BYTES, end - offset), offset)
            if not data:
                raise OSError(f"a scratch file ({self._prefix}) ends early at byte {offset}")
            offset += len(data)
            yield data

    def clear(self) -> None:
        """Forget everything appended (the space is reused)."""
        if self._fh is not None and self.end:
            os.ftruncate(self._fh.fileno(), 0)
        self.end = 0

    def close(self) -> None:
        """Remove the file now (its contents are gone)."""
        if self._fh is not None:
            fh, self._fh = self._fh, None
            fh.close()
        self.end = 0
