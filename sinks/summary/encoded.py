"""A summary record as its JSON in pieces, its long lists (devices, ranks, host processes)
encoded a slice of rows at a time as they are written: a record that lists every device of a
job is never all in memory, as objects or as bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import TypeVar

import msgspec

from prvstream.sinks.logger import get_logger
from prvstream.sinks.scratch import ScratchFile
from prvstream.sinks.summary.records import SummaryRecord, decode_record, encode_record

__all__ = ["ROWS_AT_ONCE", "EncodedRecord", "ListField", "RecordSpool", "encode_rows",
           "record_pieces"]

log = get_logger(__name__)

T = TypeVar("T")

#: rows made into objects and encoded at a time (a record of 10,000 devices held them all:
#: ~1 KB of Python objects a device, and the pools they left half empty)
ROWS_AT_ONCE = 256

_ENCODER = msgspec.json.Encoder()

#: a list field of a record left empty in its head, named by its key and the key after it
#: (keys are raw-quoted and strings never hold a raw quote: the pair is found only where the
#: encoder wrote the field), and the rows that fill it
ListField = tuple[bytes, bytes, Callable[[], Iterable[msgspec.Struct]]]


class EncodedRecord:
    """One record as its JSON (no newline), made in pieces each time ``pieces`` is called,
    and what the folded state sorts and keys it by."""

    __slots__ = ("index", "name", "pieces", "start_ns", "view")

    def __init__(self, view: str, name: str, index: int, start_ns: int,
                 pieces: Callable[[], Iterator[bytes]]) -> None:
        self.view = view
        self.name = name
        self.index = index
        self.start_ns = start_ns
        self.pieces = pieces

    @classmethod
    def of(cls, record: SummaryRecord) -> EncodedRecord:
        """``record`` encoded (``encode_record``)."""
        return cls.of_bytes(record, encode_record(record)[:-1])

    @classmethod
    def of_bytes(cls, record: SummaryRecord | EncodedRecord, data: bytes) -> EncodedRecord:
        """``record``'s keys with its JSON ``data``, held."""
        return cls(record.view, record.name, record.index, record.start_ns,
                   lambda: iter((data,)))

    @property
    def data(self) -> bytes:
        """The JSON, joined."""
        return b"".join(self.pieces())

    def record(self) -> SummaryRecord:
        """The record itself (decoded: the same record that was encoded)."""
        return decode_record(self.data)


def _slices(rows: Iterable[T]) -> Iterator[list[T]]:
    it = iter(rows)
    while chunk := list(islice(it, ROWS_AT_ONCE)):
        yield chunk


def encode_rows(rows: Iterable[msgspec.Struct]) -> Iterator[bytes]:
    """``encode(list(rows))`` without its brackets, in pieces of ``ROWS_AT_ONCE`` rows."""
    first = True
    for chunk in _slices(rows):
        data = _ENCODER.encode(chunk)
        yield data[1:-1] if first else b"," + data[1:-1]
        first = False


def record_pieces(head: SummaryRecord, fields: Sequence[ListField]) -> Iterator[bytes]:
    """The JSON of ``head`` with each of ``fields`` (in the order the encoder writes them)
    filled with its rows, in pieces."""
    data = encode_record(head)[:-1]
    at = 0
    for key, follows, rows in fields:
        marker = b'"' + key + b'":[],"' + follows + b'":'
        cut = data.index(marker, at) + len(key) + 4  # behind '"key":['
        yield data[at:cut]
        yield from encode_rows(rows())
        at = cut
    yield data[at:]


class RecordSpool:
    """Records written to an unlinked temporary file and read back from it in slices (the
    records of one update that the state keeps are written once and read twice)."""

    def __init__(self) -> None:
        self._file = ScratchFile("prvstream-update-")

    def clear(self) -> None:
        """Forget every record written (their space is reused)."""
        self._file.clear()

    def put(self, record: EncodedRecord) -> EncodedRecord:
        """``record`` written here, and read back from here at each ``pieces``."""
        file = self._file
        start, length = file.append(record.pieces())
        return EncodedRecord(record.view, record.name, record.index, record.start_ns,
                             lambda: file.read_slices(start, length))
