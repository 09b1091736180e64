"""A conversion context over a real numbering and a small table of names, and chunk builders,
so that each kind's converter is tested on its own (lines derived from docs/mapping.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pytest

from prvstream.daemon.kinds import registry
from prvstream.daemon.kinds.context import ReportContext
from prvstream.daemon.stream.numbering import Numbering

#: globalPid of pid 7 and the globalTid of its thread 7
G = 7 << 24
T = G | 7

STRINGS = {1: "saxpy", 2: "ncclAllReduce_sum", 5: "cudaLaunchKernel", 6: "MPI_Send",
           7: "step 1", 8: "inner", 9: "read"}


class Names:
    """What the converters ask an export for."""

    def string(self, sid: int) -> str:
        return STRINGS.get(sid, "")

    def strings(self, ids: Iterable[int]) -> dict[int, str]:
        return {i: STRINGS.get(i, "") for i in ids}

    def nvtx_domains(self) -> dict[int, str]:
        return {3: "mydomain"}

    def gpu_metric_names(self) -> dict[int, str]:
        return {7: "SM Active"}


def new_context(**extra: Any) -> ReportContext:
    return ReportContext(
        names=Names(), ids=Numbering(), host="h", offset=0, report_index=0, end_rel=10_000,
        process_index={G: 0}, device_index={(G, 0): 0}, phase_pattern=r"^step",
        value_label=registry.value_label, **extra)


def chunk_of(kind: str, rows: list[dict[str, int]]) -> np.ndarray:
    """A chunk of ``kind``'s dtype; unnamed fields are -1 (NULL), as the reader fills them."""
    out = np.full(len(rows), -1, dtype=registry.get(kind).dtype)
    for i, row in enumerate(rows):
        for name, value in row.items():
            out[name][i] = value
    return out


def lines(result_records: Any) -> list[str]:
    return result_records.text().decode().splitlines()  # type: ignore[no-any-return]


@pytest.fixture
def ctx() -> ReportContext:
    return new_context()


@pytest.fixture
def make_context() -> Callable[..., ReportContext]:
    return new_context
