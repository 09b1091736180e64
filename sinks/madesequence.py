"""A read-only sequence whose items are made on demand from packed storage: the indexing
(slices, negative indexes, bounds) written once for the tables that keep rows as columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar, overload

__all__ = ["MadeSequence"]

T = TypeVar("T")


class MadeSequence(Sequence[T]):
    """``Sequence`` over ``__len__`` and ``_item(index)`` (``0 <= index < len``): an int
    index, negative ones counted from the end, makes one item; a slice makes a list."""

    def _item(self, index: int) -> T:
        """The item at ``index``, already within bounds."""
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return [self._item(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._item(index)
