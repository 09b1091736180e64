"""16-byte digests mapped to entry indexes, packed: a sorted array of digests and one of their
indexes (int32 until one does not fit), with a small dict of recent ones, about 20 bytes an
entry instead of a ``bytes`` object and a set or dict slot each (issue 11: memory flat in the
number of reports)."""

from __future__ import annotations

import numpy as np

from prvstream.sinks.logger import get_logger

__all__ = ["DigestIndex"]

log = get_logger(__name__)

#: recent digests kept in a dict before they are merged into the arrays
_RECENT = 512
#: bytes a digest (``np.dtype("S16")`` keeps them whole: every digest is 16 bytes)
_SIZE = 16
#: the largest index the int32 column holds
_I32_MAX = 2**31 - 1


class DigestIndex:
    """A mapping digest -> the last index it was added with, with ``drop_from``."""

    __slots__ = ("_digests", "_indexes", "_recent")

    def __init__(self) -> None:
        self._digests = np.empty(0, f"S{_SIZE}")
        self._indexes: np.ndarray = np.empty(0, np.int32)
        self._recent: dict[bytes, int] = {}

    def add(self, digest: bytes, index: int) -> None:
        """``digest`` now stands for ``index`` (a later add of it wins)."""
        if len(digest) != _SIZE:
            raise ValueError(f"a digest is {_SIZE} bytes, not {len(digest)}")
        self._recent[digest] = index
        if len(self._recent) >= _RECENT:
            self._merge()

    def get(self, digest: bytes) -> int | None:
        found = self._recent.get(digest)
        if found is not None or len(digest) != _SIZE:
            return found
        digests = self._digests
        i = int(np.searchsorted(digests, digest))
        if i < len(digests) and digests[i:i + 1].tobytes() == digest:
            return int(self._indexes[i])
        return None

    def __contains__(self, digest: object) -> bool:
        return isinstance(digest, bytes) and self.get(digest) is not None

    def drop_from(self, count: int) -> None:
        """Forget every digest added with an index of ``count`` or more (a digest added
        again is forgotten with its last add: the add replaced its older index)."""
        dropped = [d for d, i in self._recent.items() if i >= count]
        for d in dropped:
            del self._recent[d]
        keep = self._indexes < count
        if dropped and len(self._digests):
            keep &= ~np.isin(self._digests, np.array(dropped, f"S{_SIZE}"))
        if not keep.all():
            self._digests, self._indexes = self._digests[keep], self._indexes[keep]

    def _merge(self) -> None:
        recent = self._recent
        if not recent:
            return
        digests = np.concatenate((np.array(list(recent), f"S{_SIZE}"), self._digests))
        added = np.fromiter(recent.values(), np.int64, len(recent))
        narrow = self._indexes.dtype == np.int32 and int(added.max()) <= _I32_MAX \
            and int(added.min()) >= -_I32_MAX
        index_type = np.int32 if narrow else np.int64
        indexes = np.concatenate((added.astype(index_type),
                                  self._indexes.astype(index_type, copy=False)))
        # stable: a recent digest's index comes first among equal digests and wins
        order = np.argsort(digests, kind="stable")
        digests, indexes = digests[order], indexes[order]
        first = np.ones(len(digests), bool)
        first[1:] = digests[1:] != digests[:-1]
        self._digests, self._indexes = digests[first], indexes[first]
        self._recent = {}
