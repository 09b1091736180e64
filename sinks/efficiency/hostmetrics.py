"""Host efficiencies (BSC BasicAnalysis / TALP) from per-process samples: the rows of a
record's host processes and the metrics summed over them (``efficiency.host`` keeps the
times they are made from)."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import HostMetrics, HostRow

__all__ = ["HostSample", "HostSums", "host_metrics", "host_row"]

log = get_logger(__name__)


class HostSample(NamedTuple):
    """One host process over an interval: captured, CUDA runtime and MPI ns as a process, and
    the number of its host threads with the sums of their own captured, runtime and MPI ns."""

    host: str
    pid: int
    rank: int | None
    captured: int
    runtime: int
    mpi: int
    threads: int = 0
    thread_captured: int = 0
    thread_runtime: int = 0
    thread_mpi: int = 0


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def host_row(raw: Sequence[Any]) -> HostRow:
    r = HostSample(*raw)
    useful = max(r.captured - r.runtime - r.mpi, 0)
    t_useful = max(r.thread_captured - r.thread_runtime - r.thread_mpi, 0)
    return HostRow(
        host=r.host, pid=r.pid, rank=r.rank, captured_ns=r.captured, useful_ns=useful,
        runtime_ns=r.runtime, mpi_ns=r.mpi, threads=r.threads,
        thread_captured_ns=r.thread_captured, thread_useful_ns=t_useful,
        thread_runtime_ns=r.thread_runtime, thread_mpi_ns=r.thread_mpi,
        device_offload_efficiency=_ratio(t_useful, t_useful + r.thread_runtime),
        process_offload_efficiency=_ratio(useful, useful + r.runtime))


class HostSums:
    """What the host metrics sum over the processes' rows, taken a row at a time."""

    def __init__(self) -> None:
        self.count = self.thread_useful = self.thread_runtime = self.useful = self.runtime = 0
        #: each captured process's useful share of its captured time, in row order
        self.shares = array("d")

    def add_columns(self, captured: np.ndarray, runtime: np.ndarray, mpi: np.ndarray,
                    thread_captured: np.ndarray, thread_runtime: np.ndarray,
                    thread_mpi: np.ndarray) -> None:
        """``add`` of every row ``host_row`` makes of these columns (int64 columns
        ``metrics.exact_columns`` admits: the sums are Python's integers, the shares its
        divisions)."""
        self.count += len(captured)
        self.thread_useful += sum(np.maximum(thread_captured - thread_runtime - thread_mpi, 0)
                                  .tolist())
        self.thread_runtime += sum(thread_runtime.tolist())
        seen = captured > 0
        useful = np.maximum(captured - runtime - mpi, 0)[seen]
        self.useful += sum(useful.tolist())
        self.runtime += sum(runtime[seen].tolist())
        self.shares.frombytes((useful / captured[seen]).tobytes())

    def add(self, r: HostRow) -> None:
        self.count += 1
        self.thread_useful += r.thread_useful_ns
        self.thread_runtime += r.thread_runtime_ns
        if r.captured_ns > 0:
            self.useful += r.useful_ns
            self.runtime += r.runtime_ns
            self.shares.append(r.useful_ns / r.captured_ns)

    def metrics(self, mpi: bool, hosts: list[HostRow]) -> HostMetrics:
        doe = _ratio(self.thread_useful, self.thread_useful + self.thread_runtime)
        pdoe = _ratio(self.useful, self.useful + self.runtime)
        lb = ce = mpe = None
        shares = self.shares
        if mpi and shares:
            top = max(shares)
            lb = math.fsum(shares) / len(shares) / top if top > 0 else 1.0
            ce = top
            mpe = lb * ce
        pe = None if doe is None else (doe if mpe is None else mpe * doe)
        return HostMetrics(parallel_efficiency=pe, mpi_parallel_efficiency=mpe,
                           device_offload_efficiency=doe, process_offload_efficiency=pdoe,
                           load_balance=lb, communication_efficiency=ce, hosts=hosts)


def host_metrics(rows: Iterable[Sequence[Any]], *, mpi: bool) -> HostMetrics:
    """Host metrics of processes (``HostSample`` fields; the thread ones default to 0).

    Per process: useful = captured - runtime - MPI (at least 0), and the same per thread
    summed over its host threads. Host offload efficiency (BasicAnalysis's device offload
    efficiency) DOE = sum(thread useful) / sum(thread useful + thread runtime) over every host
    thread; ``process_offload_efficiency`` is that ratio over processes. With ``mpi`` (MPI
    tables present): LB = mean(u) / max(u), CE = max(u), MPI PE = LB * CE, where u is each
    process's useful share of its captured time; host PE = MPI PE * DOE, or DOE without MPI.
    """
    out = [host_row(r) for r in rows]
    sums = HostSums()
    for r in out:
        sums.add(r)
    return sums.metrics(mpi, out)
