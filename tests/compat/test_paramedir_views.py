"""nsys2prv's own cfgs (``cfgs/basics`` and ``cfgs/analysis`` of its sdist) on both traces.

Needs ``PARAMEDIR`` (paramedir of BSC's paraver-kernel); skipped without it. Every cfg is loaded
with paramedir on nsys2prv's trace and on ours, and the view it computes is measured
(``tests/compat/views.py``: non-zero time and duration-weighted value sum). All agree, or the cfg
is in ``KNOWN`` with the documented reason (docs/cfgs.md, "nsys2prv's cfgs"); the list must be
exact. Views that abort on both traces (no graph, OpenACC or NCCL-payload events) do not count.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from prvstream.daemon.cli.main import cli
from tests.compat import nsys2prv
from tests.compat.test_nsys2prv_compat import _CLOVER, _TINY, _TORCHRUN, _VIDEO, _params
from tests.compat.views import load_view

__all__: list[str] = []

_END = ("the trace is longer: it ends at the report's last record (OS runtime calls, host "
        "states), nsys2prv's at its last CUDA API call; the cfg's window is set relative to the "
        "trace length (or counts the idle tail), so it looks at other instants")
_IDS = ("the view adds value ids of different tables (API calls and kernels): nsys2prv numbers "
        "kernel names after the API names, prvstream each table from 1; labels and non-zero "
        "time agree, the weighted sum of ids cannot")
_OVERLAP = ("kernels overlapping on one stream (programmatic dependent launch): prvstream shows "
            "each from the previous kernel's end, nsys2prv's earlier end record clears the "
            "next kernel's values")
_CLOCK = ("2025+ exports stamp events on the system clock: nsys2prv writes those stamps as they "
          "are (its time 0 is the machine's boot), prvstream from the session start, so the idle "
          "time before the first GPU operation differs")
#: (export stem, cfg file name) -> why the view differs from nsys2prv's on purpose
KNOWN: dict[tuple[str, str], str] = {
    **{(_CLOVER, c): _END for c in ("gpu-gaps.cfg", "gpu_active.cfg", "kernel-timepercent.cfg",
                                     "evolution_of_nb_threads_per_kernel.cfg")},
    (_TINY, "kernel-timepercent.cfg"): _IDS,
    (_VIDEO, "kernel-timepercent.cfg"): _IDS,
    (_TORCHRUN, "kernel-timepercent.cfg"): _IDS,
    (_VIDEO, "gpu-gaps.cfg"): _CLOCK,
    (_TORCHRUN, "gpu-gaps.cfg"): _CLOCK,
    **{(_TORCHRUN, c): _OVERLAP for c in (
        "gpu_useful.cfg", "gpu_useful_sumtime_2dh.cfg", "in_useful_kernel.cfg", "corrId.cfg",
        "registers_thread.cfg", *(f"{a}_{x}_value.cfg" for a in ("block", "grid")
                                  for x in "xyz"))},
}


@pytest.fixture(scope="module")
def paramedir() -> str:
    found = os.environ.get("PARAMEDIR")
    if not found:
        pytest.skip("set PARAMEDIR to paraver-kernel's paramedir to load nsys2prv's cfgs")
    return found


@pytest.mark.parametrize("export", _params())
def test_nsys2prv_cfgs_measure_the_same(export: Path, paramedir: str, tmp_path: Path) -> None:
    try:
        theirs, _ = nsys2prv.convert(export)
        cfgs = nsys2prv.cfg_files()
    except nsys2prv.Unavailable as exc:
        pytest.skip(str(exc))
    ours = tmp_path / export.stem
    assert cli("convert", str(export), "-o", str(ours), "--no-progress") == 0
    differ: dict[str, str] = {}
    compared = 0
    for cfg in cfgs:
        mine = load_view(paramedir, ours.with_name(ours.name + ".prv"), cfg, tmp_path / "ours")
        other = load_view(paramedir, theirs, cfg, tmp_path / "nsys2prv")
        if mine.aborted and other.aborted:
            continue
        compared += 1
        if not mine.agrees(other):
            differ[cfg.name] = f"{mine} vs {other}"
    known = {c for stem, c in KNOWN if stem == export.stem}
    unexplained = {c: d for c, d in differ.items() if c not in known}
    assert not unexplained, f"views differ without a documented reason: {unexplained}"
    stale = known - set(differ)
    assert not stale, f"listed as different but now agree: {sorted(stale)}"
    assert compared >= 15


def test_known_reasons_name_real_exports() -> None:
    assert {stem for stem, _ in KNOWN} <= {_CLOVER, _TINY, _VIDEO, _TORCHRUN}
