"""Chunk sources: in-process and reader-process give the same chunks; the factory chooses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from prvstream.daemon.kinds import registry
from prvstream.daemon.nsys import reader, sources, tables
from prvstream.daemon.nsys.export import open_export
from prvstream.daemon.stream.pipeline import prepare
from prvstream.daemon.synthetic.synth import SynthSpec, write_job


@pytest.fixture
def export_path(tmp_path: Path) -> Path:
    return write_job(tmp_path / "job", SynthSpec(ranks=1, steps=3, seed=11))[0]


def _all(source: sources.ChunkSource, kind: str) -> bytes:
    return b"".join(c.tobytes() for c in source.chunks(kind))


def test_in_process_source_is_the_table_stream(export_path: Path) -> None:
    with open_export(export_path) as export:
        source = sources.InProcessSource(export, 5)
        for kind in tables.available_kinds(export):
            expected = b"".join(c.tobytes() for c in tables.stream(export, kind, 5))
            assert _all(source, kind) == expected


def test_small_reports_and_disabled_reader_read_in_process(export_path: Path) -> None:
    with open_export(export_path) as export:
        kinds = registry.to_convert(tables.available_kinds(export))
        assert isinstance(sources.open_source(export, kinds, 64), sources.InProcessSource)
        assert isinstance(sources.open_source(export, kinds, 64, {"kernel": 10**9},
                                              use_reader=False), sources.InProcessSource)


@pytest.mark.skipif(not reader.enabled(), reason="the reader process needs the compiled filler")
def test_reader_source_gives_the_same_chunks_and_frees_the_reader(
        export_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "_READER_MIN_ROWS", 0)
    with open_export(export_path) as export:
        kinds = registry.to_convert(tables.available_kinds(export))
        source = sources.open_source(export, kinds, 7)
        assert isinstance(source, sources.ReaderSource)
        assert "nvtx" in source.kinds  # its inline texts numbered here, as read in-process
        try:
            assert reader.lease(export_path) is None  # the source holds the reader
            local = sources.InProcessSource(export, 7)
            for kind in kinds:
                assert _all(source, kind) == _all(local, kind), kind
        finally:
            source.close()
        source.close()  # idempotent
        again = reader.lease(export_path)
        assert again is not None
        again.release()


def test_reader_kinds_none_below_the_threshold_costliest_first_above() -> None:
    assert sources.reader_kinds(["kernel", "runtime", "comm"], {"kernel": 10}) == []
    rows = {"kernel": 400_000, "runtime": 400_000, "memcpy": 0, "osrt": 1_000}
    chosen = sources.reader_kinds(["kernel", "runtime", "osrt", "comm"], rows)
    costs = {k: registry.get(k).cost(rows) for k in chosen}
    assert chosen == sorted(chosen, key=lambda k: (-costs[k], k))
    every = {k: registry.get(k).cost(rows) for k in ["kernel", "runtime", "osrt", "comm"]}
    assert chosen[0] == max(every, key=lambda k: every[k])  # the costliest always
    assert every["comm"] == 400_000 * 8 + 400_000 * 3  # a join costs by its inputs' rows
    total = sum(every.values())
    assert sum(costs.values()) <= sources._READER_SHARE * total or len(chosen) == 1


def test_a_report_closed_then_opened_streams_the_same(export_path: Path) -> None:
    rep = prepare(export_path)
    try:
        plan, objects = rep.plan, rep.export.processes()
        rep.close()
        assert rep.export.closed and rep.source is None
        rep.close()  # idempotent
        rep.open(64)
        assert not rep.export.closed and rep.source is not None
        assert rep.export.plan() is plan and rep.export.processes() is objects
        chunks = list(rep.source.chunks("kernel"))
        assert sum(len(c) for c in chunks) == plan.counts["kernel"]
        assert all(np.all(np.diff(c["start"]) >= 0) for c in chunks)
    finally:
        rep.close()
