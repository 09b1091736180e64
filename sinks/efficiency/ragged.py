"""Many small growing lists of int64 (one an owner id) in one shared array: what each device or
process of a model logs a few values of per report, without an ``array`` object of its own."""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from prvstream.sinks.logger import get_logger
from prvstream.sinks.narrowcols import extended, set_item

__all__ = ["Ragged"]

log = get_logger(__name__)

#: moved owners' old places are compacted away once they are half the array and this many
COMPACT_AT = 1024


class Ragged:
    """Owner id -> a list of int64, all in one ``array('q')``: each owner's values are one
    segment of it (start, length, capacity by owner id). An owner that grows at the end of
    the array grows in place (no spare room: a job's many small owners take exactly their
    values); one that grows elsewhere moves to the end with doubled capacity (amortized O(1) a
    value, as ``array`` itself); the segments left behind are compacted away once they are
    half the array. An owner's start is 32 bits and its length and capacity 8 bits until one
    needs more (each widened as needed by ``narrowcols``; a watched job adds a few owners with
    every report, most with a few values: issue 11)."""

    def __init__(self) -> None:
        self._data = array("q")
        self._start = array("i")
        #: lengths and capacities by owner: 8 bits, widened as one needs more
        self._size = array("b")
        self._cap = array("b")
        #: values of the array no segment holds any more (moved owners' old places)
        self._holes = 0

    def __len__(self) -> int:
        """Owners so far (ids 0 .. len - 1)."""
        return len(self._start)

    def add_owner(self) -> int:
        """A new owner with no values; its id."""
        self._start = extended(self._start, (len(self._data),))
        self._size.append(0)
        self._cap.append(0)
        return len(self._start) - 1

    def get(self, owner: int) -> array[int]:
        """The owner's values (a copy)."""
        s = self._start[owner]
        return self._data[s:s + self._size[owner]]

    @contextmanager
    def segments(self, owners: np.ndarray
                 ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Every value as one int64 array, and where each of ``owners``' values start in it
        and how many they are (int64 arrays). The values are a view, for the block only: no
        owner may grow while it is held (``array`` refuses to resize an exported buffer)."""
        starts = np.frombuffer(self._start, np.dtype(self._start.typecode))[owners]
        sizes = np.frombuffer(self._size, np.dtype(self._size.typecode))[owners]
        data = np.frombuffer(self._data, np.int64)
        try:
            yield data, starts.astype(np.int64), sizes.astype(np.int64)
        finally:
            del data

    def size(self, owner: int) -> int:
        """How many values the owner has."""
        return self._size[owner]

    def item(self, owner: int, j: int) -> int:
        """The owner's ``j``-th value."""
        return self._data[self._start[owner] + j]

    def add_at(self, owner: int, j: int, value: int) -> None:
        """Add ``value`` to the owner's ``j``-th value."""
        self._data[self._start[owner] + j] += value

    def set_at(self, owner: int, j: int, values: Sequence[int]) -> None:
        """Set the owner's values from its ``j``-th on (they exist)."""
        s = self._start[owner] + j
        self._data[s:s + len(values)] = array("q", values)

    def extend(self, owner: int, values: Sequence[int]) -> None:
        """Append ``values`` to the owner's list."""
        n = len(values)
        if not n:
            return
        data = self._data
        s, z, c = self._start[owner], self._size[owner], self._cap[owner]
        if z + n <= c:  # room left in its segment
            data[s + z:s + z + n] = array("q", values)
        elif s + c == len(data):  # the last segment: grow in place, no spare room
            del data[s + z:]
            data.extend(values)
            self._cap = set_item(self._cap, owner, z + n)
        else:  # move to the end with room to grow: amortized as array's own doubling
            cap = max(z + n, 2 * z)
            old = data[s:s + z]
            self._holes += c
            self._start = set_item(self._start, owner, len(data))
            data.extend(old)
            data.extend(values)
            data.extend(array("q", bytes(8 * (cap - z - n))))
            self._cap = set_item(self._cap, owner, cap)
        self._size = set_item(self._size, owner, z + n)
        if self._holes > len(self._data) // 2 and self._holes >= COMPACT_AT:
            self._compact()

    def _compact(self) -> None:
        """Drop the moved owners' old places (each segment keeps its spare room)."""
        data = self._data
        new = array("q")
        for owner in range(len(self._start)):
            s, c = self._start[owner], self._cap[owner]
            self._start = set_item(self._start, owner, len(new))
            new.extend(data[s:s + c])
        self._data = new
        self._holes = 0
