"""Settings own the process-wide switches: environment names, pure Python, the fallback log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from prvstream.daemon import runtime
from prvstream.daemon.cli.main import cli
from prvstream.daemon.config import load_settings
from prvstream.daemon.kinds import nesting
from prvstream.daemon.nsys import reader, rowfill
from prvstream.daemon.stream import merge, ready
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from prvstream.sinks import arrays, native
from prvstream.sinks.efficiency import overlap, parts
from prvstream.sinks.paraver import fastfmt, records


@pytest.fixture(autouse=True)
def restore_switches() -> Iterator[None]:
    yield
    native.prefer_python(False)


@pytest.mark.parametrize(("raw", "on"), [("0", False), ("no", False), ("off", False),
                                         ("false", False), ("1", True), ("yes", True)])
def test_switches_keep_their_environment_names(raw: str, on: bool) -> None:
    settings = load_settings(None, {}, environ={"PRVSTREAM_READER": raw,
                                                "PRVSTREAM_PURE_PYTHON": raw,
                                                "PRVSTREAM_PRESORT": raw})
    assert (settings.reader, settings.pure_python, settings.presort) == (on, on, on)
    default = load_settings(None, {}, environ={})
    assert (default.reader, default.pure_python, default.presort) == (True, False, True)


def test_pure_python_switches_every_extension_and_the_reader_off() -> None:
    runtime.apply(load_settings(None, {"pure_python": True}, environ={}))
    assert set(runtime.extensions()) == {rowfill.ROW_FILLER, rowfill.SQL_ROWS, overlap.OVERLAPS,
                                        parts.SEGMENTS,
                                        fastfmt.FORMATTER, fastfmt.WRITER, fastfmt.THREAD,
                                        merge.SORTER, nesting.NESTING,
                                        merge.GATHERER, ready.SPLITTER,
                                        arrays.FACTORIZER, arrays.GROUPER, records.KEYS}
    assert not any(ext.compiled() for ext in runtime.extensions()) and not reader.enabled()
    runtime.apply(load_settings(None, {}, environ={}))
    assert all(ext.compiled() == ext.built() for ext in runtime.extensions())


def test_pure_python_writes_the_same_bytes(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    job = write_job(tmp_path / "job", SynthSpec(ranks=2, steps=2, seed=4))
    assert cli("convert", str(job[0].parent), "-o", str(tmp_path / "c"), "--no-progress") == 0
    monkeypatch.setenv("PRVSTREAM_PURE_PYTHON", "1")
    assert cli("convert", str(job[0].parent), "-o", str(tmp_path / "py"), "--no-progress") == 0
    assert not fastfmt.FORMATTER.compiled()
    for suffix in (".prv", ".pcf", ".row"):
        assert (tmp_path / f"c{suffix}").read_bytes() == (tmp_path / f"py{suffix}").read_bytes()


def test_a_missing_extension_is_logged_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fastfmt.FORMATTER, "function", None)
    monkeypatch.setattr(runtime, "_reported", False)
    settings = load_settings(None, {}, environ={})
    with capture_logs() as logs:
        runtime.apply(settings)
        runtime.apply(settings)
    events = [e for e in logs if e["event"] == "python_fallback_in_use"]
    assert len(events) == 1 and events[0]["missing"] == ["record formatter"]
