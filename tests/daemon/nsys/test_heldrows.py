"""A small export read once while planned (``heldrows``): the plan from its rows equals the
plan from SQL scans, the spill gives back the chunks it took, and a batch conversion that holds
small reports writes the bytes one that reads them again writes."""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.config import load_settings
from prvstream.daemon.nsys import heldrows, tables
from prvstream.daemon.nsys.export import open_export
from prvstream.daemon.nsys.heldrows import HeldSource, RowSpill
from prvstream.daemon.nsys.plan import plan_export
from prvstream.daemon.stream import batch
from prvstream.daemon.stream.pipeline import prepare
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from prvstream.sinks.efficiency import EfficiencyModel
from tests.conftest import make_db, real_exports

G = 281474976710656 | (100 << 24)
#: a value for an int32 column: NULL, small, or beyond int32 (wrapped by the SELECT)
I4 = st.one_of(st.none(), st.integers(-3, 3), st.integers(2**31 - 2, 2**32 + 1))
GPU = st.tuples(st.integers(0, 10**6), st.integers(0, 10**4), st.one_of(st.none(),
                st.sampled_from([G, G | 1 << 24])), I4, I4, st.one_of(st.none(),
                st.integers(0, 5)))
CPU = st.tuples(st.integers(0, 10**6), st.integers(0, 10**4),
                st.one_of(st.none(), st.sampled_from([G | 1, G | 2, (G | 1 << 24) | 3])),
                st.one_of(st.none(), st.integers(0, 5)))


def _export(path: Path, kernels: list[tuple[int, int, int | None, int | None, int | None,
                                            int | None]],
            syncs: list[tuple[int, int, int | None, int | None, int | None, int | None]],
            calls: list[tuple[int, int, int | None, int | None]]) -> Path:
    return make_db(path, {
        "StringIds": (["id INTEGER PRIMARY KEY", "value"], [(i, f"s{i}") for i in range(6)]),
        "CUPTI_ACTIVITY_KIND_KERNEL": (
            ["start", "end", "globalPid", "deviceId", "streamId", "shortName", "correlationId"],
            [(s, s + d, g, dev, st_, name, 1) for s, d, g, dev, st_, name in kernels]),
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (
            ["start", "end", "globalPid", "deviceId", "streamId", "syncType", "correlationId"],
            [(s, s + d, g, dev, st_, kind, 1) for s, d, g, dev, st_, kind in syncs]),
        "CUPTI_ACTIVITY_KIND_RUNTIME": (
            ["start", "end", "globalTid", "nameId", "correlationId"],
            [(s, s + d, g, name, 1) for s, d, g, name in calls]),
        "OSRT_API": (["start", "end", "globalTid", "nameId"],
                     [(s, s + d, g, name) for s, d, g, name in calls[::2]]),
    })


def _plans_agree(path: Path) -> bool:
    """The plan from held rows equals the plan from scans; whether rows were held."""
    with open_export(path) as export:
        scanned = plan_export(export)
    with open_export(path) as export:
        kinds = tables.available_kinds(export)  # counts every table, as ``prepare`` does
        early = heldrows.read_early(export, kinds, 10**6, 97)
        held = plan_export(export, early)
    assert held == scanned
    return early is not None


@settings(max_examples=40, deadline=None)
@given(kernels=st.lists(GPU, min_size=1, max_size=40), syncs=st.lists(GPU, max_size=10),
       calls=st.lists(CPU, max_size=40))
def test_the_plan_from_held_rows_is_the_plan_from_scans(
        kernels: list[tuple[int, int, int | None, int | None, int | None, int | None]],
        syncs: list[tuple[int, int, int | None, int | None, int | None, int | None]],
        calls: list[tuple[int, int, int | None, int | None]]) -> None:
    """NULLs, values past int32 (wrapped as the SELECT wraps them), empty tables, syncs
    placed on the streams of the other activity."""
    with tempfile.TemporaryDirectory() as tmp:
        assert _plans_agree(_export(Path(tmp) / "h.sqlite", kernels, syncs, calls))


@pytest.mark.parametrize("version", ["2022.2", "2024.5", "2026.2"])
def test_the_plan_from_held_rows_of_generated_and_real_exports(tmp_path: Path,
                                                              version: str) -> None:
    (path,) = write_job(tmp_path, SynthSpec(ranks=1, steps=1, layers=2, nsys_version=version))
    assert _plans_agree(path)
    for real in real_exports():
        _plans_agree(real)


def test_a_read_that_fails_leaves_the_export_to_its_scans(tmp_path: Path) -> None:
    """A value no chunk can hold (text in an integer column): nothing is held, the plan is
    the scans' (and the stream meets the failure later, as without holding)."""
    path = _export(tmp_path / "t.sqlite", [(1, 2, G, 0, 1, 1)], [], [(1, 2, G | 1, 2)])
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = 'x'")
    con.commit()
    con.close()
    assert not _plans_agree(path)


def test_the_spill_gives_back_every_chunk(tmp_path: Path) -> None:
    spill = RowSpill(tmp_path)
    whole = np.zeros(10, dtype=[("start", "<i8"), ("x", "<i4"), ("y", "<i4")])
    whole["start"], whole["x"], whole["y"] = np.arange(10), -np.arange(10), 7
    a = whole[::3]  # strided
    b = np.zeros(0, dtype=[("start", "<i8")])
    first = spill.put({"k": [a, b], "m": []})
    second = spill.put({"k": [a[:1]]})
    source = HeldSource(spill, first)
    got = list(source.chunks("k"))
    assert [len(c) for c in got] == [4, 0]
    assert np.array_equal(got[0], a) and got[0].flags.writeable
    assert list(source.chunks("m")) == [] and list(source.chunks("absent")) == []
    assert np.array_equal(next(HeldSource(spill, second).chunks("k")), a[:1])
    spill.close()


def test_a_held_report_reconnects_only_for_what_it_did_not_hold(tmp_path: Path) -> None:
    (path,) = write_job(tmp_path, SynthSpec(ranks=1, steps=1, layers=2))
    spill = RowSpill(tmp_path)
    rep = prepare(path, hold=spill, hold_rows=10**6, chunk_rows=512)
    try:
        assert rep.held is not None
        rep.close()
        rep.open(512)
        assert rep.export.closed  # streams from the spill
        assert sum(len(c) for c in rep.source.chunks("kernel")) == rep.plan.counts["kernel"]
        assert rep.export.count_rows("StringIds") > 0  # not held: reconnects
        assert not rep.export.closed
    finally:
        rep.close()
        spill.close()


def _convert(inputs: list[str], out: Path, chunk_rows: int) -> bytes:
    conf = load_settings(None, {"chunk_rows": chunk_rows, "log_level": "error"}, environ={})
    out.parent.mkdir(parents=True)
    model = EfficiencyModel(out.name, window_ns=int(conf.window * 1e9))
    batch.convert(inputs, out, conf, model=model,
                  summary_jsonl=out.with_name(out.name + ".summary.jsonl"))
    return b"".join(out.with_name(out.name + ext).read_bytes()
                    for ext in (".prv", ".pcf", ".row", ".summary.jsonl"))


@settings(max_examples=6, deadline=None)
@given(ranks=st.integers(2, 4), seed=st.integers(0, 99), layers=st.integers(1, 12),
       version=st.sampled_from(["2022.2", "2024.5", "2026.2"]),
       chunk_rows=st.sampled_from([2048, 4096]))
def test_held_reports_convert_to_the_bytes_of_reports_read_again(
        ranks: int, seed: int, layers: int, version: str, chunk_rows: int) -> None:
    """Reports of up to 4,096 rows are held (the larger tables in several chunks of 512
    rows, what a stream shares with others)."""
    with tempfile.TemporaryDirectory() as tmp:
        inputs = [str(p) for p in write_job(Path(tmp) / "src", SynthSpec(
            ranks=ranks, steps=1, seed=seed, layers=layers, nsys_version=version))]
        with _counting() as holds:
            held = _convert(inputs, Path(tmp) / "held" / "out", chunk_rows)
        assert holds == [True] * ranks  # every report was held
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(heldrows, "read_early", lambda *a, **k: None)
            again = _convert(inputs, Path(tmp) / "again" / "out", chunk_rows)
    assert held == again


@contextlib.contextmanager
def _counting() -> Iterator[list[bool]]:
    """Whether each report ``prepare`` read was held."""
    seen: list[bool] = []
    real = heldrows.hold

    def hold(*args: Any, **kwargs: Any) -> heldrows.HeldRows | None:
        found = real(*args, **kwargs)
        seen.append(found is not None)
        return found

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(heldrows, "hold", hold)
        yield seen


def test_real_exports_held_and_read_again_give_the_same_bytes(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    inputs = [str(p) for p in real_exports()]
    if len(inputs) < 2:
        pytest.skip("the real exports are not here (PRVSTREAM_TEST_DATA)")
    inputs += [str(p) for p in write_job(tmp_path / "src", SynthSpec(ranks=2, steps=1))]
    with _counting() as holds:
        held = _convert(inputs, tmp_path / "held" / "out", 2048)
    assert holds and all(holds) and len(holds) < len(inputs)  # the small ones only
    monkeypatch.setattr(heldrows, "read_early", lambda *a, **k: None)
    again = _convert(inputs, tmp_path / "again" / "out", 2048)
    assert held == again
