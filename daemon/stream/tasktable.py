"""A numbering's tasks packed as columns: host, pid, rank and label by task, and every task's
thread keys and names in shared arrays and one text buffer, instead of a ``TaskEntry`` with
its label, two lists, key tuples and names a task (issue 11: a watched job's memory flat in
the number of its reports). ``TaskEntry`` objects are made when one is asked for.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from prvstream.daemon.kinds.context import ThreadKey
from prvstream.sinks.logger import get_logger
from prvstream.sinks.madesequence import MadeSequence
from prvstream.sinks.narrowcols import extended, set_item

if TYPE_CHECKING:
    from prvstream.daemon.stream.numbering import TaskEntry

__all__ = ["PidIndex", "TaskTable", "derived_label"]

log = get_logger(__name__)

#: a task without a rank
_NO_RANK = -(2**63)
#: label column: the label is ``derived_label`` of the task's host, pid and rank
_DERIVED = -1


def derived_label(host: str, pid: int, rank: int) -> str:
    """The label a ranked task gets (``Numbering.task``)."""
    return f"rank {rank} {host}:{pid}"


def _blob(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


class TaskTable(MadeSequence["TaskEntry"]):
    """The tasks of a numbering in id order (id = position + 1), as columns.

    A task's threads are one run of the thread columns; a thread added to a task whose run is
    not the last is appended after moving its run to the end (the old run is left unused: in a
    live trace threads come with their task's first report, in a canonical one in order).

    The columns are as narrow as what they hold, widened (``narrowcols``) when a value needs
    it: a key's kind and second id, a task's label index and thread count start at 8 bits, a
    key's first id and a task's host at 16, the runs and where names end at 32. A watched job
    adds a task and a few threads with every report (issue 11).
    """

    __slots__ = ("_a", "_b", "_host", "_host_ids", "_hosts", "_kind", "_label_of", "_labels",
                 "_name_end", "_names", "_pid", "_rank", "_tcount", "_tstart")

    def __init__(self, entries: Iterable[TaskEntry] = ()) -> None:
        self._hosts: list[str] = []
        self._host_ids: dict[str, int] = {}
        self._host = array("h")
        self._pid = array("q")
        self._rank = array("q")
        #: index into ``_labels`` or ``_DERIVED``
        self._labels: list[str] = []
        self._label_of = array("b")
        self._tstart = array("i")
        self._tcount = array("b")
        #: thread columns: the key's three ints, where its name ends in ``_names``
        self._kind = array("b")
        self._a = array("h")
        self._b = array("b")
        self._name_end = array("i")
        self._names = bytearray()
        for entry in entries:
            self.append(entry)

    # -- the sequence --------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._pid)

    def __iter__(self) -> Iterator[TaskEntry]:
        for i in range(len(self)):
            yield self._item(i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TaskTable | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other,
                                                                          strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def _item(self, i: int) -> TaskEntry:
        from prvstream.daemon.stream.numbering import TaskEntry

        rank = self._rank[i]
        return TaskEntry(host=self.host(i), pid=self._pid[i], name=self.label(i),
                         rank=None if rank == _NO_RANK else rank,
                         thread_keys=self.keys(i), thread_names=self.names(i))

    # -- columns -------------------------------------------------------------------------
    def host(self, i: int) -> str:
        return self._hosts[self._host[i]]

    def pid(self, i: int) -> int:
        return self._pid[i]

    def label(self, i: int) -> str:
        at = self._label_of[i]
        if at == _DERIVED:
            return derived_label(self.host(i), self._pid[i], self._rank[i])
        return self._labels[at]

    def thread_count(self, i: int) -> int:
        return self._tcount[i]

    def keys(self, i: int, start: int = 0) -> list[ThreadKey]:
        lo, n = self._tstart[i], self._tcount[i]
        kind, a, b = self._kind, self._a, self._b
        return [(kind[j], a[j], b[j]) for j in range(lo + start, lo + n)]

    def names(self, i: int, start: int = 0) -> list[str]:
        lo, n = self._tstart[i], self._tcount[i]
        ends, blob = self._name_end, self._names
        out = []
        for j in range(lo + start, lo + n):
            begin = ends[j - 1] if j else 0
            out.append(blob[begin:ends[j]].decode("utf-8", "surrogatepass"))
        return out

    # -- changes -------------------------------------------------------------------------
    def append(self, entry: TaskEntry) -> None:
        """A task at the end, with its threads."""
        host = self._host_ids.get(entry.host)
        if host is None:
            host = self._host_ids[entry.host] = len(self._hosts)
            self._hosts.append(sys.intern(entry.host))
        self._host = extended(self._host, (host,))
        self._pid.append(entry.pid)
        rank = _NO_RANK if entry.rank is None else entry.rank
        self._rank.append(rank)
        if entry.rank is not None and entry.name == derived_label(entry.host, entry.pid, rank):
            self._label_of.append(_DERIVED)
        else:
            self._label_of = extended(self._label_of, (len(self._labels),))
            self._labels.append(entry.name)
        self._tstart = extended(self._tstart, (len(self._kind),))
        self._tcount.append(0)
        self.add_threads(len(self) - 1, entry.thread_keys, entry.thread_names)

    def extend(self, entries: Iterable[TaskEntry]) -> None:
        for entry in entries:
            self.append(entry)

    def add_threads(self, i: int, keys: Sequence[ThreadKey], names: Sequence[str]) -> None:
        """Threads after task ``i``'s last one."""
        if len(keys) != len(names):
            raise ValueError(f"{len(keys)} thread keys and {len(names)} names")
        if not keys:
            return
        lo, n = self._tstart[i], self._tcount[i]
        if lo + n != len(self._kind):  # its run is not the last: moved to the end
            moved_keys, moved_names = self.keys(i), self.names(i)
            self._tstart = set_item(self._tstart, i, len(self._kind))
            self._push(moved_keys, moved_names)
        self._push(keys, names)
        self._tcount = set_item(self._tcount, i, n + len(keys))

    def _push(self, keys: Sequence[ThreadKey], names: Sequence[str]) -> None:
        self._kind = extended(self._kind, [key[0] for key in keys])
        self._a = extended(self._a, [key[1] for key in keys])
        self._b = extended(self._b, [key[2] for key in keys])
        ends = []
        for name in names:
            self._names += _blob(name)
            ends.append(len(self._names))
        self._name_end = extended(self._name_end, ends)

    def keep_threads(self, i: int, count: int) -> None:
        """Task ``i``'s first ``count`` threads only."""
        n = self._tcount[i]
        if count >= n:
            return
        if self._tstart[i] + n == len(self._kind):
            self._cut_threads(self._tstart[i] + count)
        self._tcount[i] = count

    def keep(self, count: int) -> None:
        """The first ``count`` tasks only."""
        if count >= len(self):
            return
        del self._host[count:], self._pid[count:], self._rank[count:]
        labels = [at for at in self._label_of[count:] if at != _DERIVED]
        if labels:
            del self._labels[min(labels):]
        del self._label_of[count:], self._tstart[count:], self._tcount[count:]
        self._cut_threads(max((s + c for s, c in zip(self._tstart, self._tcount,
                                                     strict=True)), default=0))

    def clear(self) -> None:
        self.keep(0)

    def _cut_threads(self, end: int) -> None:
        if end >= len(self._kind):
            return
        del self._kind[end:], self._a[end:], self._b[end:], self._name_end[end:]
        del self._names[self._name_end[end - 1] if end else 0:]


#: pids added to a ``PidIndex`` kept in a dict before they are merged into its arrays
_RECENT = 512
_I64 = (-(2**63), 2**63)


class PidIndex:
    """pid -> the ids of the tasks with that pid (one a host), as two sorted int64 arrays and
    a small dict of recent ones: no dict entry and int a task."""

    __slots__ = ("_pids", "_recent", "_tasks", "_wide")

    def __init__(self) -> None:
        self._pids = np.empty(0, np.int64)
        self._tasks = np.empty(0, np.int64)
        self._recent: dict[int, list[int]] = {}
        #: pids beyond int64 (never merged)
        self._wide: dict[int, list[int]] = {}

    def add(self, pid: int, task_id: int) -> None:
        if not _I64[0] <= pid < _I64[1]:
            self._wide.setdefault(pid, []).append(task_id)
            return
        self._recent.setdefault(pid, []).append(task_id)
        if len(self._recent) >= _RECENT:
            self._merge()

    def tasks(self, pid: int) -> list[int]:
        """The task ids of ``pid`` in the order they were added."""
        if not _I64[0] <= pid < _I64[1]:
            return self._wide.get(pid, [])
        pids = self._pids
        lo = int(np.searchsorted(pids, pid, "left"))
        out: list[int] = []
        if lo < len(pids) and int(pids[lo]) == pid:
            hi = int(np.searchsorted(pids, pid, "right"))
            out = self._tasks[lo:hi].tolist()
        recent = self._recent.get(pid)
        return out + recent if recent else out

    def _merge(self) -> None:
        pids = [p for p, ids in self._recent.items() for _ in ids]
        tasks = [t for ids in self._recent.values() for t in ids]
        both = np.concatenate((self._pids, np.array(pids, np.int64)))
        ids = np.concatenate((self._tasks, np.array(tasks, np.int64)))
        order = np.argsort(both, kind="stable")  # a pid's tasks stay in the order added
        self._pids, self._tasks = both[order], ids[order]
        self._recent = {}
