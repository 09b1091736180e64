"""Hostile names: any text (and bytes that are not UTF-8) in an export's strings gives a valid
trace whose .pcf and .row hold no control character or Unicode line break."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prvstream.daemon.config import load_settings
from prvstream.daemon.stream.batch import convert
from prvstream.daemon.stream.numbering import clean_label
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from tests.daemon.daemon_proc import DaemonProcess, place_atomically
from tests.faults.helpers import assert_landed, live_trace, wait_reports
from tests.prv_check import validate

_BREAKS = ("\r", "\n", "\x85", "\u2028", "\u2029", "\x0b", "\x0c", "\x00", "\t")


@pytest.fixture(scope="module")
def small_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_job(tmp_path_factory.mktemp("hostile"), SynthSpec(ranks=1, steps=1))[0]


def test_clean_label_removes_every_break_and_keeps_the_rest() -> None:
    assert clean_label("plain kernel<int>") == "plain kernel<int>"
    assert clean_label("a\r\nb\x85c\u2028d\u2029e\tf") == "a b c d e f"
    assert clean_label("\x00\x01") == ""


names = st.lists(st.one_of(
    st.text(min_size=0, max_size=40),
    st.sampled_from(_BREAKS).map(lambda b: f"x{b}y"),
    st.binary(min_size=1, max_size=12),  # stored as TEXT: often not UTF-8
), min_size=1, max_size=8)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=names)
def test_any_names_give_a_valid_trace_and_clean_labels(
        small_export: Path, tmp_path_factory: pytest.TempPathFactory,
        texts: list[str | bytes]) -> None:
    work = tmp_path_factory.mktemp("case")
    export = shutil.copy(small_export, work / "rank0.sqlite")
    con = sqlite3.connect(export)
    ids = [r[0] for r in con.execute("SELECT id FROM StringIds ORDER BY id")]
    for i, sid in enumerate(ids):
        text = texts[i % len(texts)]
        if isinstance(text, bytes):
            con.execute("UPDATE StringIds SET value = CAST(? AS TEXT) WHERE id = ?", (text, sid))
        else:
            con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (text, sid))
    con.commit()
    con.close()
    out = work / "out"
    convert([str(export)], out, load_settings(None, {}, environ={}))
    validate(out.with_name("out.prv"))
    for ext in (".pcf", ".row"):
        text = out.with_name("out" + ext).read_text(encoding="utf-8")
        for line in text.split("\n"):
            assert not any(b in line for b in _BREAKS if b != "\t"), (ext, line)


def test_a_daemon_appends_reports_with_hostile_names(
        tmp_path: Path, synth_sources: list[Path],
        start_daemon: Callable[..., DaemonProcess]) -> None:
    """Bytes that are not UTF-8 and line breaks in every name: the report lands (it was set
    aside as "internal error") beside a clean one, with clean labels and a valid trace."""
    job = tmp_path / "root" / "job"
    job.mkdir(parents=True)
    hostile = shutil.copy(synth_sources[0], tmp_path / "hostile.sqlite")
    con = sqlite3.connect(hostile)
    for i, (sid,) in enumerate(con.execute("SELECT id FROM StringIds ORDER BY id").fetchall()):
        raw = [b"\xff\xfe bad", "line\u2028sep\x85x\ry".encode(), b"k\xc3(\n"][i % 3]
        con.execute("UPDATE StringIds SET value = CAST(? AS TEXT) WHERE id = ?", (raw, sid))
    con.commit()
    con.close()
    daemon = start_daemon(job.parent)
    place_atomically(hostile, job / "hostile.sqlite")
    place_atomically(synth_sources[1], job / synth_sources[1].name)
    wait_reports(daemon, job, 2)
    assert_landed(tmp_path / "state", job, ["hostile.sqlite", synth_sources[1].name])
    for ext in (".pcf", ".row"):
        text = live_trace(job).with_suffix(ext).read_text(encoding="utf-8")
        assert "\ufffd" in text or ext == ".row"
        for line in text.split("\n"):
            assert not any(b in line for b in _BREAKS if b != "\t"), (ext, line)
    assert daemon.alive()
    assert daemon.terminate() == 0


def test_odd_file_names_never_end_the_service(
        tmp_path: Path, synth_sources: list[Path],
        start_daemon: Callable[..., DaemonProcess]) -> None:
    """A file name that is not UTF-8 (it ended the service: an ExceptionGroup from the
    readiness check) is refused once, by name; one with a line break lands like any other."""
    root = tmp_path / "root"
    a, b = root / "a", root / "b"
    a.mkdir(parents=True)
    b.mkdir()
    daemon = start_daemon(root)
    not_utf8 = os.fsencode(a) + b"/rank\xff0.sqlite"
    shutil.copyfile(synth_sources[0], a / "incoming.tmp")
    os.rename(a / "incoming.tmp", not_utf8)
    place_atomically(synth_sources[1], a / "rank\n1.sqlite")
    place_atomically(synth_sources[2], b / synth_sources[2].name)
    wait_reports(daemon, a, 1)
    wait_reports(daemon, b, 1)
    refused = daemon.wait_event("export_name_not_utf8")
    assert refused[0]["path"].endswith("rank\\xff0.sqlite"), refused
    assert daemon.alive()
    assert_landed(tmp_path / "state", a, ["rank\n1.sqlite"])
    assert_landed(tmp_path / "state", b, [synth_sources[2].name])
    assert len(daemon.named("export_name_not_utf8")) == 1
    assert daemon.terminate() == 0
