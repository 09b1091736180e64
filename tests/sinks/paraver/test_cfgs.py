"""The Paraver cfgs in ``cfgs/``: well formed for our trace layout, and (with paramedir) right.

Part (a) always runs: a minimal cfg parser checks each file's structure and that every event
type a cfg filters on is declared in the .pcf of a converted trace and occurs in its records.
Part (b) runs when ``PARAMEDIR`` names an executable: paramedir loads every cfg on converted
exports without complaint and its numbers agree with the SQLite rows
(``tests/bench/check_paramedir.py`` holds the comparison).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

from prvstream.daemon.config import load_settings
from prvstream.daemon.stream.batch import convert
from prvstream.daemon.synthetic.synth import SynthSpec, write_export
from tests.conftest import real_export_params
from tests.prv_check import parse_pcf

ROOT = Path(__file__).resolve().parents[3]
CFG_DIR = ROOT / "cfgs"
CFGS = sorted(CFG_DIR.glob("*.cfg"))
EXPECTED_CFGS = {
    "cuda_activity", "kernel_names", "useful_time_per_gpu", "kernels_in_flight",
    "nccl_compute_overlap", "nvtx_ranges", "memcpy_sizes", "comm_time_per_gpu",
}

#: function names paraver-kernel knows (the ones our cfgs may use)
THREAD_FUNCTIONS = {"State As Is", "In State", "Not In State", "Given State", "Useful",
                    "Last Evt Val", "Last Evt Type", "In Evt Val", "Next Evt Val"}
COMPOSE_FUNCTIONS = {"As Is", "Sign", "1-Sign", "Add", "Prod", "Is Equal"}
LEVEL_FUNCTIONS = {"Adding", "AddingSign", "Average", "Maximum", "Minimum", "Active Thd"}
DERIVED_OPERATIONS = {"add", "product", "substract", "divide", "maximum", "minimum",
                      "different"}
STATISTICS = {"Time", "% Time", "# Bursts", "Average value", "Sum bursts", "Integral",
              "Maximum", "Minimum", "Average Burst Time"}
LEVELS = {"thread", "task", "appl", "workload"}
SELECTED_KEYS = ["cpu", "appl", "task", "thread", "node", "system", "workload", "from_obj",
                 "to_obj", "tag_msg", "size_msg", "bw_msg", "evt_type", "evt_value"]

_PAIR = re.compile(r"\{([a-z_0-9]+), ([^{}]+?)\}")


@dataclass
class CfgWindow:
    """One window of a cfg, as far as the checks need."""

    name: str = ""
    kind: str = ""
    level: str = ""
    units: str = ""
    selected: dict[str, str] = field(default_factory=dict)
    compose: dict[str, str] = field(default_factory=dict)
    semantic: list[str] = field(default_factory=list)
    filter_types: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    factors: list[float] = field(default_factory=list)
    operation: str = ""


@dataclass
class Cfg:
    """A parsed cfg: header, windows in order, histograms (as tag -> value)."""

    version: str = ""
    num_windows: int = -1
    description: list[str] = field(default_factory=list)
    windows: list[CfgWindow] = field(default_factory=list)
    histograms: list[dict[str, str]] = field(default_factory=list)


def parse_cfg(path: Path) -> Cfg:
    """A minimal reader of Paraver's cfg format (tags as written by us; unknown tags fail)."""
    cfg = Cfg()
    in_description = False
    lines = path.read_text().splitlines()
    assert lines and lines[0] == "#ParaverCFG", f"{path.name}: first line must be #ParaverCFG"
    for raw in lines[1:]:
        line = raw.rstrip("\n")
        assert line == line.rstrip(), f"{path.name}: trailing space in {line!r}"
        if in_description:
            if line == "ConfigFile.EndDescription":
                in_description = False
            else:
                cfg.description.append(line)
            continue
        if not line.strip() or line.startswith("#"):
            continue
        if line == "< NEW ANALYZER2D >":
            cfg.histograms.append({})
            continue
        tag, _, value = line.partition(" ")
        if tag == "ConfigFile.Version:":
            cfg.version = value
        elif tag == "ConfigFile.NumWindows:":
            cfg.num_windows = int(value)
        elif tag == "ConfigFile.BeginDescription":
            in_description = True
        elif tag.startswith("Analyzer2D."):
            assert cfg.histograms, f"{path.name}: {tag} outside an analyzer block"
            cfg.histograms[-1][tag.removeprefix("Analyzer2D.").rstrip(":")] = value
        elif tag == "window_name":
            cfg.windows.append(CfgWindow(name=value))
        elif tag.startswith("window_"):
            assert cfg.windows, f"{path.name}: {tag} before window_name"
            _window_tag(path, cfg.windows[-1], tag, value)
        else:
            raise AssertionError(f"{path.name}: unknown line {line!r}")
    assert not in_description, f"{path.name}: description never ends"
    return cfg


def _window_tag(path: Path, win: CfgWindow, tag: str, value: str) -> None:
    if tag == "window_type":
        win.kind = value
    elif tag == "window_level":
        win.level = value
    elif tag == "window_units":
        win.units = value
    elif tag == "window_selected_functions":
        win.selected = dict(_PAIR.findall(value))
        assert int(value.split(",")[0].strip("{ ")) == len(win.selected), path.name
    elif tag == "window_compose_functions":
        win.compose = dict(_PAIR.findall(value))
        assert int(value.split(",")[0].strip("{ ")) == len(win.compose), path.name
    elif tag == "window_semantic_module":
        win.semantic = value.split()
    elif tag == "window_filter_module":
        parts = value.split()
        assert parts[0] == "evt_type", f"{path.name}: only event filters are used"
        assert int(parts[1]) == len(parts) - 2, f"{path.name}: filter count in {value!r}"
        win.filter_types = [int(t) for t in parts[2:]]
    elif tag == "window_identifiers":
        win.parents = [int(v) for v in value.split()]
    elif tag == "window_factors":
        win.factors = [float(v) for v in value.split()]
    elif tag == "window_operation":
        win.operation = value
    elif tag in ("window_scale_relative", "window_end_time_relative",
                 "window_begin_time_relative"):
        float(value)
    else:
        raise AssertionError(f"{path.name}: unknown window tag {tag}")


@pytest.fixture(scope="module")
def synth_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A converted synthetic export (NCCL, copies, NVTX push/pop and start/end, 2 domains)."""
    tmp = tmp_path_factory.mktemp("cfg_trace")
    export = write_export(tmp / "rank0000.sqlite", SynthSpec(ranks=2, steps=4), 0)
    settings = load_settings(None, {"state_dir": str(tmp / "state")}, environ={})
    convert([str(export)], tmp / "trace", settings)
    return tmp / "trace.prv"


def _record_types(prv: Path) -> set[int]:
    found: set[int] = set()
    with prv.open() as fh:
        next(fh)
        for line in fh:
            if line.startswith("2:"):
                found.update(int(t) for t in line.rstrip("\n").split(":")[6::2])
    return found


def test_the_expected_cfgs_are_there() -> None:
    assert {p.stem for p in CFGS} >= EXPECTED_CFGS


@pytest.mark.parametrize("cfg_path", CFGS, ids=[p.stem for p in CFGS])
def test_cfg_structure(cfg_path: Path) -> None:
    cfg = parse_cfg(cfg_path)
    assert cfg.version == "3.4"
    assert cfg.num_windows == len(cfg.windows) >= 1
    assert cfg.description and cfg.description[0].startswith("prvstream:")
    for i, win in enumerate(cfg.windows, 1):
        where = f"{cfg_path.name} window {i}"
        assert win.name and win.kind in ("single", "composed"), where
        assert win.level in LEVELS, where
        # paramedir's default unit is microseconds; our traces are in ns
        assert win.units == "Nanoseconds", where
        if win.kind == "single":
            assert list(win.selected) == SELECTED_KEYS, where
            assert win.selected["thread"] in THREAD_FUNCTIONS, where
            for level in ("cpu", "appl", "task", "node", "system", "workload"):
                assert win.selected[level] in LEVEL_FUNCTIONS, where
            assert set(win.compose.values()) <= COMPOSE_FUNCTIONS, where
            # paramedir aborts a cfg unless its event filter matches something or is All
            if win.selected["evt_type"] == "=":
                assert win.filter_types, f"{where}: '=' filter without types"
            else:
                assert win.selected["evt_type"] == "All" and not win.filter_types, where
            if win.semantic:
                # window_semantic_module <level> <function name> { n, { k v1 .. vk } }
                text = " ".join(win.semantic)
                assert text.startswith(f"{win.semantic[0]} {win.selected[win.semantic[0]]} "), \
                    f"{where}: semantic module names another function"
                values = re.findall(r"\{ (\d+) ((?:[\d.]+ ?)+)\}", text)
                assert values and int(values[0][0]) == len(values[0][1].split()), where
        else:
            assert len(win.parents) == 2 and all(1 <= p < i for p in win.parents), where
            assert len(win.factors) == 2 and win.operation in DERIVED_OPERATIONS, where
            assert {cfg.windows[p - 1].level for p in win.parents} == {win.level}, where
    assert len(cfg.histograms) <= 1, "paramedir only writes the last analyzer"
    for hist in cfg.histograms:
        assert hist["Statistic"] in STATISTICS
        for key in ("ControlWindow", "DataWindow"):
            assert 1 <= int(hist[key]) <= len(cfg.windows)
        assert hist["ComputeYScale"] == "False"
        lo, hi, delta = (float(hist[k]) for k in ("Minimum", "Maximum", "Delta"))
        assert lo <= hi and delta > 0


@pytest.mark.parametrize("cfg_path", CFGS, ids=[p.stem for p in CFGS])
def test_cfg_event_types_exist_in_a_converted_trace(cfg_path: Path, synth_trace: Path) -> None:
    types, _ = parse_pcf(synth_trace.with_suffix(".pcf"))
    in_records = _record_types(synth_trace)
    for win in parse_cfg(cfg_path).windows:
        missing = set(win.filter_types) - set(types)
        assert not missing, f"{cfg_path.name} filters on {sorted(missing)}, not in the .pcf"
        absent = set(win.filter_types) - in_records
        assert not absent, f"{cfg_path.name} filters on {sorted(absent)}, never emitted"


# -- (b) with paramedir ------------------------------------------------------------------------
def _paramedir() -> str:
    found = os.environ.get("PARAMEDIR", "")
    if not found or not os.access(found, os.X_OK):
        pytest.skip("set PARAMEDIR to a paramedir executable to check the cfgs with Paraver")
    return found


def _checker() -> ModuleType:
    name = "prvstream_check_paramedir"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests/bench/check_paramedir.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _check(export: Path, workdir: Path) -> None:
    check = _checker()
    rows, failures, _notes = check.check_export(_paramedir(), export, workdir)
    assert rows, "nothing compared"
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("export", real_export_params())
def test_paramedir_agrees_with_sqlite_on_real_exports(export: Path, tmp_path: Path) -> None:
    _paramedir()
    _check(export, tmp_path)


def test_paramedir_agrees_with_sqlite_on_synth(synth_trace: Path, tmp_path: Path) -> None:
    _paramedir()
    _check(synth_trace.parent / "rank0000.sqlite", tmp_path)


@pytest.mark.parametrize("export", real_export_params())
def test_paramedir_useful_per_gpu_equals_the_summary(export: Path, tmp_path: Path) -> None:
    """useful_time_per_gpu.cfg in paramedir and the efficiency summary agree per GPU.

    The cfg measures each stream thread; the summary flattens a GPU's streams (overlaps
    counted once). Where a GPU runs compute on one stream, the two must be equal to the ns.
    """
    from prvstream.daemon.config import load_settings
    from prvstream.daemon.stream.batch import convert
    from prvstream.sinks.efficiency import EfficiencyModel

    paramedir = _paramedir()
    check = _checker()
    model = EfficiencyModel("check")
    out = tmp_path / "t"
    convert([str(export)], out, load_settings(None, {}, environ={}), model=model)
    run = check.run_paramedir(paramedir, out.with_suffix(".prv"),
                              [CFG_DIR / "useful_time_per_gpu.cfg"], tmp_path / "run")
    assert not run.failures, run.failures
    _, rows = check.parse_histogram(run.outputs["useful_time_per_gpu"])
    per_device: dict[int, list[float]] = {}
    for label, values in rows:
        m = re.match(r"CUDA-D(\d+)\.S", label)
        if m and values and values[0] > 0:
            per_device.setdefault(int(m.group(1)), []).append(values[0])
    summary = {d.device: d.useful_ns for d in model.state().devices}
    compared = 0
    for device, values in per_device.items():
        if len(values) == 1:  # one compute stream on this GPU
            assert values[0] == summary[device], (device, values, summary)
            compared += 1
    assert compared, "no GPU with a single compute stream to compare"
