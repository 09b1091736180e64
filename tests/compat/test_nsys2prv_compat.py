"""prvstream traces against nsys2prv 0.5.8's, on every real export nsys2prv converts.

nsys2prv runs beside the project (``tests/compat/nsys2prv.py``). Per export, every event type
nsys2prv writes must agree with ours (``tests/compat/compare.py``), or be listed in ``KNOWN``
with the reason, which docs/mapping.md also gives. The list must be exact: an entry that no
longer differs fails too, so it cannot go stale. Types only prvstream writes must be types
nsys2prv never uses (docs/mapping.md, "nsys2prv equivalent" column).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from prvstream.daemon.cli.main import cli
from tests.compat import nsys2prv
from tests.compat.compare import compare_traces
from tests.conftest import REAL_DATA

__all__: list[str] = []

#: exports nsys2prv 0.5.8 converts only after the slowest start-up (> 10 s each)
_SLOW = {"nsys2026.2_fastvideo_2gpu_noTARGETGPU_h100", "nsys2026.2_torchrun2gpu_nccl_nvtx_h100"}

_CLOVER = "nsys2022.2cap_2024.5exp_cloverleaf_a100"
_TINY = "nsys2026.1_torch_tiny_rtx3080"
_VIDEO = "nsys2026.2_fastvideo_2gpu_noTARGETGPU_h100"
_TORCHRUN = "nsys2026.2_torchrun2gpu_nccl_nvtx_h100"
_ALL = (_CLOVER, _TINY, _VIDEO, _TORCHRUN)
_OVERLAP = ("kernels that overlap on one stream (programmatic dependent launch) show from the "
            "previous kernel's end; nsys2prv's end record of the earlier kernel clears the next "
            "kernel's values while it still runs")
#: what -> (why prvstream differs on purpose, docs/mapping.md; the exports where it shows)
_WHY: dict[str, tuple[str, tuple[str, ...]]] = {
    **{str(t): (_OVERLAP, (_TORCHRUN,)) for t in (*range(9101, 9108), 9109, 9110, 9200, 63000006)},
    "9600": ("the end of a nested NVTX push/pop range restores the enclosing range's value; "
             "nsys2prv writes 0 (its timeline shows no range while the outer one is open)",
             (_VIDEO, _TORCHRUN)),
}
#: (export stem, what) -> why prvstream differs there on purpose
KNOWN: dict[tuple[str, str], str] = {
    (stem, what): why for what, (why, stems) in _WHY.items() for stem in stems}

#: types nsys2prv 0.5.8 does not write in these traces and prvstream does (docs/mapping.md):
#: synchronizations, OS runtime calls, NVTX marks, and 9700: the NVTX ranges of a domain whose
#: name the export lost (torchrun's NCCL domain, created before the cut window) keep their own
#: type, where nsys2prv merges them into the default domain (9600)
ONLY_PRVSTREAM = {63000004, 9300, 9005, 9700}


def _params() -> list[object]:
    exports = sorted(REAL_DATA.glob("*.sqlite")) if REAL_DATA.is_dir() else []
    if not exports:
        return [pytest.param(None, marks=pytest.mark.skip(
            reason=f"real exports not found at {REAL_DATA} (set PRVSTREAM_TEST_DATA)"))]
    return [pytest.param(p, id=p.stem, marks=[pytest.mark.slow] if p.stem in _SLOW else [])
            for p in exports]


def session_start_clock(export: Path) -> int:
    """Where the session starts on the export's clock: ``systemClockNs`` when the export's
    timestamps are on that clock (2025+ exports), else 0 (timestamps from the session start)."""
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    try:
        cols = {r[1] for r in con.execute("PRAGMA table_info(TARGET_INFO_SESSION_START_TIME)")}
        if "systemClockNs" not in cols:
            return 0
        clock = con.execute("SELECT systemClockNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        first = con.execute("SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    finally:
        con.close()
    if not clock or clock[0] is None or not first or first[0] is None:
        return 0
    return int(clock[0]) if int(clock[0]) <= int(first[0]) else 0


def nsys2prv_trace(export: Path) -> tuple[Path, str]:
    try:
        return nsys2prv.convert(export)
    except nsys2prv.Unavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("export", _params())
def test_types_agree_with_nsys2prv(export: Path, tmp_path: Path) -> None:
    theirs, _ = nsys2prv_trace(export)
    ours = tmp_path / export.stem
    assert cli("convert", str(export), "-o", str(ours), "--no-progress") == 0
    diffs, extra, _, _ = compare_traces(ours.with_name(ours.name + ".prv"), theirs,
                                        shift=session_start_clock(export))
    found = {d.what: d.detail for d in diffs}
    known = {what for stem, what in KNOWN if stem == export.stem}
    unexplained = {w: d for w, d in found.items() if w not in known}
    assert not unexplained, f"differs from nsys2prv without a documented reason: {unexplained}"
    stale = known - set(found)
    assert not stale, f"listed as different from nsys2prv but now agree: {sorted(stale)}"
    assert extra <= ONLY_PRVSTREAM, f"types only prvstream writes: {sorted(extra)}"


def test_missing_tables_are_supplied_from_the_export(tmp_path: Path) -> None:
    """The copy nsys2prv gets has the context tables, derived from the kernels, and nothing
    of the export changes."""
    source = REAL_DATA / "nsys2026.2_torchrun2gpu_nccl_nvtx_h100.sqlite"
    if not source.is_file():
        pytest.skip(f"{source} not found (set PRVSTREAM_TEST_DATA)")
    given, note = nsys2prv.prepared_input(source, tmp_path)
    assert given != source and "TARGET_INFO_CUDA_CONTEXT_INFO" in note
    con = sqlite3.connect(given)
    pairs = set(con.execute("SELECT processId, deviceId FROM TARGET_INFO_CUDA_CONTEXT_INFO"))
    kernels = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    con.close()
    assert len(pairs) == 2 and {d for _, d in pairs} == {0, 1}
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    assert kernels == src.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    src.close()
