"""Per-report cost: one connection and one planning pass per export, no repeated probes of a
table, and the schema read once per nsys version (statements counted with SQLite's trace
callback on real connections)."""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from prvstream.daemon.config import load_settings
from prvstream.daemon.stream.batch import convert
from prvstream.daemon.synthetic.synth import SynthSpec, write_job


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    seen: list[str] = []
    real = sqlite3.connect

    def connect(*args: object, **kwargs: object) -> sqlite3.Connection:
        con = real(*args, **kwargs)  # type: ignore[arg-type]
        con.set_trace_callback(seen.append)
        return con

    monkeypatch.setattr(sqlite3, "connect", connect)
    yield seen


@pytest.mark.parametrize("version", ["2022.2", "2024.5", "2026.2"])
def test_each_table_is_probed_once_and_the_schema_once_per_version(
        statements: list[str], tmp_path: Path, version: str) -> None:
    first, second = write_job(tmp_path / "src", SynthSpec(ranks=2, steps=1,
                                                          nsys_version=version))
    # every statement in this process: no reader
    settings = load_settings(None, {"log_level": "error", "reader": False}, environ={})
    convert([str(first)], tmp_path / "a", settings)
    statements.clear()
    convert([str(second)], tmp_path / "b", settings)
    text = [re.sub(r"\s+", " ", s).strip() for s in statements]
    assert not [s for s in text if s.startswith("PRAGMA table_info")]
    probes = Counter(s for s in text if re.match(r"SELECT (1|COUNT\(\*\)|MIN)\b", s))
    assert probes and all(n == 1 for n in probes.values()), probes
    # a table's size and time range come from one scan, never a separate COUNT or MIN/MAX
    counted = {m.group(1) for s in text
               if (m := re.match(r'SELECT COUNT\(\*\), MIN\(.*?FROM "(\w+)"', s))}
    assert not [s for s in text if re.match(rf'SELECT COUNT\(\*\) FROM "({"|".join(counted)})"',
                                            s)]
    assert sum(s.startswith(("PRAGMA query_only",)) for s in text) == 1  # one connection
    # every table's rows and time range in one statement
    assert sum("COUNT(*), COUNT(" in s for s in text) == 1


def test_the_rowid_range_is_read_from_the_btree_ends(statements: list[str],
                                                      tmp_path: Path) -> None:
    """Sampling start times (trusted times) and bounding a table's disorder (storage order)
    need its least and greatest rowid: SQLite reads them from the b-tree's two ends when each
    is a subquery of its own, and scans the whole table when they share one SELECT."""
    (export,) = write_job(tmp_path / "src", SynthSpec(ranks=1, steps=2, nsys_version="2026.2"))
    settings = load_settings(None, {"log_level": "error", "reader": False}, environ={})
    convert([str(export)], tmp_path / "out", settings)
    ranged = [s for s in statements if "MIN(rowid)" in s]
    assert ranged  # both users ran here (no reader process)
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    try:
        for sql in ranged:
            plan = [row[3] for row in con.execute("EXPLAIN QUERY PLAN " + sql)]
            scans = [p for p in plan if re.match(r"SCAN (?!\(|(\d+ )?CONSTANT)", p)]
            assert not scans, (sql, plan)
    finally:
        con.close()


def test_tables_that_fit_in_a_chunk_are_read_without_their_block_bounds(
        statements: list[str], tmp_path: Path) -> None:
    """Planning counted every table: one that fits in a chunk is held whole by the reorder
    buffer, so its storage-order scan needs no per-block bounds; a larger one still reads
    them. The trace is the same either way."""
    (export,) = write_job(tmp_path / "src", SynthSpec(ranks=1, steps=3))
    traces = []
    for chunk in (20_000, 64):
        settings = load_settings(None, {"log_level": "error", "reader": False,
                                        "chunk_rows": chunk}, environ={})
        statements.clear()
        convert([str(export)], tmp_path / f"t{chunk}", settings)
        bounds = [s for s in statements if "rowid BETWEEN" in s]
        assert bool(bounds) == (chunk == 64), chunk
        traces.append((tmp_path / f"t{chunk}.prv").read_bytes())
    assert traces[0] == traces[1]


def test_small_reports_of_a_batch_take_one_connection_and_no_distinct_scan_of_what_they_read(
        statements: list[str], tmp_path: Path) -> None:
    """Several small exports: each is opened once (read while planned, streamed from the
    held rows), and the kinds read from one table are planned from those rows."""
    exports = write_job(tmp_path / "src", SynthSpec(ranks=3, steps=1))
    settings = load_settings(None, {"log_level": "error", "reader": False}, environ={})
    convert([str(p) for p in exports], tmp_path / "out", settings)
    text = [re.sub(r"\s+", " ", s).strip() for s in statements]
    assert sum(s.startswith("PRAGMA query_only") for s in text) == len(exports)
    scanned = {m.group(1) for s in text if (m := re.match(r'SELECT DISTINCT .*FROM "(\w+)"', s))}
    assert scanned == {"NVTX_EVENTS"}  # its inline texts are numbered by the plan's scan


def test_kinds_not_converted_are_planned_for_their_objects_only(statements: list[str],
                                                                 tmp_path: Path) -> None:
    """``--trace`` without NVTX: the NVTX table is still scanned for its threads (and domains,
    read always), since the trace's objects do not depend on the kinds asked for, but not for
    its texts; the CPU tables not converted give no DISTINCT of their values."""
    (export,) = write_job(tmp_path / "src", SynthSpec(ranks=1, steps=2))
    settings = load_settings(None, {"log_level": "error", "reader": False,
                                    "kinds": ["kernel", "memcpy"]}, environ={})
    convert([str(export)], tmp_path / "out", settings)
    text = [re.sub(r"\s+", " ", s).strip() for s in statements]
    nvtx = [s for s in text if re.match(r'SELECT DISTINCT .*FROM "NVTX_EVENTS"', s)]
    assert nvtx and all("textId" not in s and "text" not in s.split("FROM")[0] for s in nvtx)
    assert not [s for s in text if re.match(r'SELECT DISTINCT .*"nameId".* FROM "(OSRT_API|'
                                            r'CUPTI_ACTIVITY_KIND_RUNTIME)"', s)]


def test_a_plan_for_some_kinds_has_every_kinds_objects(real_data_dir: Path) -> None:
    """The same streams, threads, processes and counts whatever the kinds converted; the
    values of the converted kinds (and the NVTX domains) only."""
    from prvstream.daemon.nsys.export import open_export
    from prvstream.daemon.nsys.plan import plan_export

    path = real_data_dir / "nsys2026.2_torchrun2gpu_nccl_nvtx_h100.sqlite"
    with open_export(path) as full_export, open_export(path) as some_export:
        full = plan_export(full_export)
        some = plan_export(some_export, kinds=["kernel", "memcpy", "runtime", "comm"])
    assert (some.streams, some.threads, some.processes, some.counts, some.sync_devices) == (
        full.streams, full.threads, full.processes, full.counts, full.sync_devices)
    assert "nvtx" in full.values and "nvtx" not in some.values
    assert some.values.get("nvtx_domain") == full.values.get("nvtx_domain")
    for key in ("kernel", "runtime"):
        assert some.values[key] == full.values[key]
