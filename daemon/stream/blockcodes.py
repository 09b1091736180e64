"""The code of a record in a committed block: the parts of its sort key its text does not hold.

A uint32 per record: rank (6 bits), priority (2), the low bit of its order (host states set it
on a piece that continues the one before, ``kinds.hoststates``) and the committing report's
index in the job's journal (23 bits). With the text, the code gives back the record's full sort
key, so committed blocks can be merged again without their exports.
"""

from __future__ import annotations

import numpy as np

from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver.records import KEY_OBJECT, KEY_ORDER

__all__ = ["codes_of", "split_codes"]

log = get_logger(__name__)

_RANK_BITS, _PRIO_SHIFT, _FLAG_SHIFT, _REPORT_SHIFT = 6, 6, 8, 9
_MAX_REPORTS = 1 << (32 - _REPORT_SHIFT)


def codes_of(keys: np.ndarray, journal_index: int | np.ndarray) -> np.ndarray:
    """The codes of records with sort ``keys``; ``journal_index``: the committing report's
    index in the journal, or an array mapping the keys' report index to it."""
    obj = keys[:, KEY_OBJECT]
    order = keys[:, KEY_ORDER]
    rank = obj & 0xFFFF
    prio = (obj >> 58) & 0x1F
    if len(keys) and (int(rank.max()) >= 1 << _RANK_BITS or int(prio.max()) > 3):
        raise ValueError("a record's sort rank or priority does not fit its code")
    if isinstance(journal_index, np.ndarray):
        report = journal_index[order >> 40]
    else:
        report = np.full(len(keys), journal_index, np.int64)
    if len(keys) and int(report.max()) >= _MAX_REPORTS:
        raise ValueError(f"more than {_MAX_REPORTS} reports in one job")
    code = (report << _REPORT_SHIFT) | ((order & 1) << _FLAG_SHIFT) | (prio << _PRIO_SHIFT) | rank
    out: np.ndarray = code.astype("<u4")
    return out


def split_codes(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(journal index, continuation flag, priority, rank) of each code."""
    c = codes.astype(np.int64)
    return (c >> _REPORT_SHIFT, (c >> _FLAG_SHIFT) & 1, (c >> _PRIO_SHIFT) & 3,
            c & ((1 << _RANK_BITS) - 1))
