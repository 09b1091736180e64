"""Every top-N table of every real export equals independent SQL aggregates (counts and ns)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from prvstream.daemon.config import load_settings
from prvstream.daemon.stream.batch import convert
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.efficiency.partial import decode_partial, encode_partial
from tests.conftest import real_export_params

#: CUPTI copyKind -> the memcpy table's names (nsys's ENUM_CUDA_MEMCPY_OPER wording)
_COPY = {0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
         4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
         8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer",
         11: "Unified Host-to-Device", 12: "Unified Device-to-Host",
         13: "Unified Device-to-Device"}
#: nsys event type of an NVTX mark (no duration)
_MARK = 34

Agg = dict[str, tuple[int, int, int, int, int]]


def _exports() -> list[object]:
    """The real exports; converting the large ones takes minutes: those are slow tests."""
    out: list[object] = []
    for param in real_export_params():
        (path,) = param.values  # type: ignore[attr-defined]
        big = path is not None and path.stat().st_size > 20 * 2**20
        out.append(pytest.param(path, id=param.id,  # type: ignore[attr-defined]
                                marks=[pytest.mark.slow] if big else []) if path else param)
    return out


def _sql(export: Path) -> dict[str, Agg]:
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    out: dict[str, Agg] = {}
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        for name, n, tot, lo, hi in con.execute(
                "SELECT s.value, COUNT(*), SUM(k.end - k.start), MIN(k.end - k.start), "
                "MAX(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k "
                "JOIN StringIds AS s ON s.id = k.shortName GROUP BY s.value"):
            table = "nccl" if name.lower().startswith("nccl") else "kernels"
            out.setdefault(table, {})[name] = (n, tot, lo, hi, 0)
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        for kind, n, tot, lo, hi, nb in con.execute(
                "SELECT copyKind, COUNT(*), SUM(end - start), MIN(end - start), "
                "MAX(end - start), SUM(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1"):
            out.setdefault("memcpy", {})[_COPY.get(kind, f"kind {kind}")] = (n, tot, lo, hi, nb)
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        for n, tot, lo, hi, nb in con.execute(
                "SELECT COUNT(*), SUM(end - start), MIN(end - start), MAX(end - start), "
                "SUM(bytes) FROM CUPTI_ACTIVITY_KIND_MEMSET"):
            if n:
                out.setdefault("memcpy", {})["memset"] = (n, tot, lo, hi, nb)
    if "NVTX_EVENTS" in tables:
        for name, n, tot, lo, hi in con.execute(
                "SELECT COALESCE(n.text, s.value), COUNT(*), SUM(n.end - n.start), "
                "MIN(n.end - n.start), MAX(n.end - n.start) FROM NVTX_EVENTS AS n "
                "LEFT JOIN StringIds AS s ON s.id = n.textId "
                f"WHERE n.eventType != {_MARK} AND n.end IS NOT NULL GROUP BY 1"):
            out.setdefault("nvtx", {})[name] = (n, tot, lo, hi, 0)
    con.close()
    return out


@pytest.mark.parametrize("export", _exports())
def test_tables_equal_sql_aggregates(export: Path, tmp_path: Path) -> None:
    model = EfficiencyModel("real", top=10**6)  # every name shown: compare all of them
    convert([str(export)], tmp_path / "t", load_settings(None, {}, environ={}), model=model)
    state = model.state()
    expected = _sql(export)
    got = {table: {r.name: (r.count, r.total_ns, r.min_ns, r.max_ns, r.bytes) for r in rows}
           for table, rows in state.tables.items()}
    assert got.keys() == expected.keys()
    for table, rows in expected.items():
        assert got[table] == rows, table
        shown = state.tables[table]
        assert [r.total_ns for r in shown] == sorted((r.total_ns for r in shown), reverse=True)
        assert sum(r.share for r in shown) == pytest.approx(1.0)


@pytest.mark.parametrize("export", _exports()[:1])
def test_top_n_keeps_the_largest_and_sums_the_rest(export: Path, tmp_path: Path) -> None:
    model = EfficiencyModel("real", top=3)
    convert([str(export)], tmp_path / "t", load_settings(None, {}, environ={}), model=model)
    expected = _sql(export)
    for table, rows in model.state().tables.items():
        by_total = sorted(expected[table].items(), key=lambda kv: (-kv[1][1], kv[0]))
        assert [r.name for r in rows[:3]] == [k for k, _ in by_total[:3]]
        if len(by_total) > 3:
            assert rows[-1].name == "other" and len(rows) == 4
            assert rows[-1].count == sum(v[0] for _, v in by_total[3:])
            assert rows[-1].total_ns == sum(v[1] for _, v in by_total[3:])


@pytest.mark.parametrize("export", _exports()[:1])
def test_summary_top_setting_bounds_the_tables(export: Path, tmp_path: Path) -> None:
    from prvstream.daemon.cli.main import cli

    cfg = tmp_path / "p.toml"
    cfg.write_text("summary_top = 1\n")
    assert cli("convert", str(export), "-o", str(tmp_path / "out"), "--config", str(cfg)) == 0
    from prvstream.sinks.summary import load_summary

    state, _ = load_summary(tmp_path / "out.summary.json")
    for table, rows in _sql(export).items():
        assert len(state.tables[table]) == min(len(rows), 2)  # the largest, then "other"


@pytest.mark.parametrize("export", _exports()[:1])
def test_summary_view_prints_a_table_as_json_rows(export: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from prvstream.daemon.cli.main import cli

    assert cli("convert", str(export), "-o", str(tmp_path / "out")) == 0
    capsys.readouterr()
    expected = _sql(export)
    for view, rows in expected.items():
        assert cli("summary", str(tmp_path / "out.summary.json"), "--view", view, "--json",
                   "--top", "1") == 0
        got = json.loads(capsys.readouterr().out)
        (name, (n, tot, lo, hi, nb)), *rest = sorted(rows.items(), key=lambda kv: -kv[1][1])
        assert {k: got[0][k] for k in ("name", "count", "total_ns", "min_ns", "max_ns")} == {
            "name": name, "count": n, "total_ns": tot, "min_ns": lo, "max_ns": hi}
        assert got[0]["mean_ns"] == pytest.approx(tot / n)
        assert {"share", "mean_ns"} <= got[0].keys() and ("bytes" in got[0]) == (view == "memcpy")
        if view == "memcpy":
            assert got[0]["bytes"] == nb
        if rest:
            assert got[1]["name"] == "other" and len(got) == 2
            assert got[1]["count"] == sum(v[0] for _, v in rest)
            assert got[1]["total_ns"] == sum(v[1] for _, v in rest)
        assert cli("summary", str(tmp_path / "out.summary.json"), "--view", view) == 0
        assert name[:40] in capsys.readouterr().out


def _export(part: str) -> Path:
    for param in real_export_params():
        (path,) = param.values  # type: ignore[attr-defined]
        if path is not None and part in path.name:
            return Path(path)
    pytest.skip(f"no export named *{part}* in PRVSTREAM_TEST_DATA")


def _saxpy() -> Path:
    return _export("saxpy")


def _kernels_in_phase(export: Path, phase: str) -> dict[str, Agg]:
    """Kernels whose start falls inside one of the process's NVTX ranges whose name matches
    the GLOB ``phase`` (the attribution rule of docs/summary-schema.md), per table and name."""
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT s.value, COUNT(*), SUM(k.end - k.start), MIN(k.end - k.start), "
        "MAX(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k "
        "JOIN StringIds AS s ON s.id = k.shortName WHERE EXISTS (SELECT 1 FROM NVTX_EVENTS AS n "
        "LEFT JOIN StringIds AS t ON t.id = n.textId WHERE COALESCE(n.text, t.value) GLOB ? "
        f"AND n.eventType != {_MARK} AND n.end IS NOT NULL AND n.start <= k.start "
        "AND k.start < n.end AND n.globalTid / 16777216 = k.globalPid / 16777216) "
        "GROUP BY s.value", (phase,)).fetchall()
    con.close()
    out: dict[str, Agg] = {}
    for name, n, tot, lo, hi in rows:
        table = "nccl" if name.lower().startswith("nccl") else "kernels"
        out.setdefault(table, {})[name] = (n, tot, lo, hi, 0)
    return out


@pytest.mark.parametrize(("part", "pattern", "glob", "phase"), [
    ("saxpy", "^saxpy$", "saxpy", "saxpy"),
    # an FSDP pre-forward range of the 2-GPU torchrun job: compute and NCCL kernels inside
    ("torchrun", r"^FSDP::pre_forward \(blocks\.8\..*993653$",
     "FSDP::pre_forward (blocks.8._checkpoint_wrapped_module), op_id = 993653",
     "FSDP::pre_forward (blocks.8._checkpoint_wrapped_module), op_id = 993653")])
def test_kernel_tables_of_a_phase_equal_sql_over_its_ranges(
        part: str, pattern: str | None, glob: str, phase: str, tmp_path: Path) -> None:
    export = _export(part)
    model = EfficiencyModel("real", top=10**6)
    convert([str(export)], tmp_path / "t",
            load_settings(None, {"phase_pattern": pattern} if pattern else {}, environ={}),
            model=model)
    state = model.state()
    expected = _kernels_in_phase(export, glob)
    assert sum(v[0] for v in expected.get("kernels", {}).values()) >= 5  # kernels selected
    (total,) = [p for p in state.phase_totals if p.name == phase]
    got = {table: {r.name: (r.count, r.total_ns, r.min_ns, r.max_ns, r.bytes) for r in rows}
           for table, rows in total.tables.items() if table in ("kernels", "nccl")}
    assert got == expected
    # ranges starting outside the phase are left out of its NVTX table
    nvtx = {r.name for r in total.tables["nvtx"]}
    assert any(n.startswith(phase) for n in nvtx) and {r.name for r in state.tables["nvtx"]} - nvtx
    # the merged partial state carries them, and the rebuilt views show the same rows
    partial = model.partial()
    assert partial.phase_tables[phase]["kernels"] == {
        k: [v[0], v[1], v[2], v[3], v[4]] for k, v in expected["kernels"].items()}
    assert decode_partial(encode_partial(partial)) == partial


def test_summary_view_of_a_phase_prints_its_table(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from prvstream.daemon.cli.main import cli

    export = _saxpy()
    cfg = tmp_path / "p.toml"
    cfg.write_text('phase_pattern = "^saxpy$"\nsummary_top = 1\n')
    assert cli("convert", str(export), "-o", str(tmp_path / "out"), "--config", str(cfg)) == 0
    capsys.readouterr()
    summary = str(tmp_path / "out.summary.json")
    expected = sorted(_kernels_in_phase(export, "saxpy")["kernels"].items(),
                      key=lambda kv: -kv[1][1])
    assert cli("summary", summary, "--view", "kernels", "--phase", "saxpy", "--json") == 0
    got = json.loads(capsys.readouterr().out)
    assert got[0]["name"] == expected[0][0] and got[0]["count"] == expected[0][1][0]
    assert sum(r["count"] for r in got) == sum(v[0] for _, v in expected)
    assert len(got) == min(len(expected), 2)  # bounded: the top one, then "other"
    assert cli("summary", summary, "--view", "kernels", "--phase", "saxpy") == 0
    assert "in phase saxpy" in capsys.readouterr().out
    assert cli("summary", summary, "--view", "kernels", "--phase", "nope") == 2
    assert "saxpy" in capsys.readouterr().err
