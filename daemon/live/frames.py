"""Length-prefixed frames in the job's append-only side files (report entries, numbering
deltas, report metas): appended behind the committed length, read back from bytes."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["FRAME", "FrameCut", "append_frames", "split_frames"]

#: a frame's header: the payload's length
FRAME = struct.Struct("<I")


class FrameCut(ValueError):
    """The bytes end inside a frame."""


def append_frames(path: Path, at: int, payloads: Iterable[bytes], *, sync: bool = True) -> int:
    """Write ``payloads`` as frames at byte ``at`` of ``path`` (created, never through a
    symlink), cutting off whatever followed (a commit that never happened); fsync unless
    ``sync`` is False. Returns the new end. OSError as the file system raises it."""
    data = b"".join(FRAME.pack(len(p)) + p for p in payloads)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        os.ftruncate(fd, at)
        os.lseek(fd, at, os.SEEK_SET)
        if data:
            os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return at + len(data)


def split_frames(raw: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset, payload) of each frame in ``raw``; FrameCut (or struct.error for a cut
    header) when ``raw`` ends inside one."""
    at = 0
    while at < len(raw):
        (size,) = FRAME.unpack_from(raw, at)
        end = at + FRAME.size + size
        if end > len(raw):
            raise FrameCut(f"the bytes end inside a frame at offset {at}")
        yield at, raw[at + FRAME.size:end]
        at = end
