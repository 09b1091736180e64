"""Files as users expect: modes under the umask, one-line output errors, ``-o DIR/``, no
overwriting a file prvstream did not write, and ``records`` equal to what the trace holds."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from prvstream.daemon.cli.main import cli
from prvstream.daemon.config import load_settings
from prvstream.daemon.live.inputs import report_identity
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.live.livetrace import LiveTrace
from prvstream.daemon.stream.outputs import WRITTEN_LIST
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from tests.daemon.daemon_proc import run_cli
from tests.faults.helpers import mounted

SUFFIXES = (".prv", ".pcf", ".row", ".summary.json", ".summary.jsonl")


def _one_line_failure(done: object) -> str:
    text = (done.stdout + done.stderr).strip()  # type: ignore[attr-defined]
    assert done.returncode == 1, text  # type: ignore[attr-defined]
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1, text
    return text


@pytest.mark.parametrize("target", ["/proc/x", "file/sub"])
def test_convert_output_errors_are_one_line(tmp_path: Path, synth_sources: list[Path],
                                            target: str) -> None:
    (tmp_path / "file").write_text("")
    out = target if target.startswith("/") else str(tmp_path / target)
    _one_line_failure(run_cli("convert", str(synth_sources[0]), "-o", out, cwd=tmp_path))


def test_convert_onto_a_read_only_file_system_is_one_line(
        tmp_path: Path, synth_sources: list[Path]) -> None:
    with mounted(tmp_path / "ro", "size=1m", "ro") as ro:
        text = _one_line_failure(run_cli("convert", str(synth_sources[0]), "-o",
                                         str(ro / "x"), cwd=tmp_path))
        assert "read-only" in text


def test_convert_into_a_directory_and_never_over_a_foreign_file(
        tmp_path: Path, synth_sources: list[Path]) -> None:
    old = os.umask(0o022)
    try:
        done = run_cli("convert", str(synth_sources[0]), "-o", f"{tmp_path / 'new'}/",
                       cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        name = synth_sources[0].stem
        for suffix in SUFFIXES:
            path = tmp_path / "new" / f"{name}{suffix}"
            assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
        (tmp_path / "exists").mkdir()
        done = run_cli("convert", str(synth_sources[0]), "-o", str(tmp_path / "exists"),
                       cwd=tmp_path)
        assert done.returncode == 0 and (tmp_path / "exists" / f"{name}.prv").exists()
        assert not (tmp_path / "exists.prv").exists()
    finally:
        os.umask(old)
    mine = tmp_path / "mine.pcf"
    mine.write_text("the user's own file\n")
    text = _one_line_failure(run_cli("convert", str(synth_sources[0]), "-o",
                                     str(tmp_path / "mine"), cwd=tmp_path))
    assert "--force" in text and mine.read_text() == "the user's own file\n"
    done = run_cli("convert", str(synth_sources[0]), "-o", str(tmp_path / "mine"), "--force",
                   cwd=tmp_path)
    assert done.returncode == 0 and mine.read_text() != "the user's own file\n"
    again = run_cli("convert", str(synth_sources[0]), "-o", str(tmp_path / "mine"),
                    cwd=tmp_path)
    assert again.returncode == 0, "a rerun over prvstream's own outputs was refused"


def test_live_outputs_get_the_umask_mode_and_records_match_the_trace(tmp_path: Path) -> None:
    sources = write_job(tmp_path / "src", SynthSpec(ranks=2, slices=2, steps=2))
    by_name = {p.name: p for p in sources}
    job = tmp_path / "job"
    job.mkdir()
    settings = load_settings(None, {"state_dir": str(tmp_path / "state"),
                                    "skew_allowance": 0.0}, environ={})
    journal = JobJournal.open(settings.state_dir, job)
    journal.lock()
    old = os.umask(0o022)
    try:
        trace = LiveTrace(journal, job / "prvstream", "job", settings)
        # late slices first: the early ones force rewrites of the whole trace
        for name in ["rank0000.slice01.sqlite", "rank0001.slice01.sqlite",
                     "rank0000.slice00.sqlite", "rank0001.slice00.sqlite"]:
            target = job / name
            shutil.copy(by_name[name], target)
            trace.append(target, report_identity(target))
            lines = trace.prv.read_bytes().count(b"\n") - 1  # the header
            assert sum(r.records for r in journal.reports) == lines
        for path in (trace.prv, trace.pcf, trace.row, trace.summary_json):
            assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
        trace.finalize()
        assert stat.S_IMODE(trace.prv.stat().st_mode) == 0o644
    finally:
        os.umask(old)
        journal.unlock()


def test_every_output_is_durable_before_convert_returns(
        tmp_path: Path, synth_sources: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each output's data is fsynced before its rename, and the directory after the last
    rename into it (once for all five outputs); a rerun leaves the list of prvstream's own
    outputs as it is (nothing to rename, nothing to sync)."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc/self/fd to name the synced files")
    events: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def synced(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def renamed(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append(("fsynced?", os.path.realpath(src)))
        replace(src, dst)
        events.append(("rename", str(dst)))

    monkeypatch.setattr(os, "fsync", synced)
    monkeypatch.setattr(os, "replace", renamed)
    out = tmp_path / "out" / "t"
    argv = ("convert", str(synth_sources[0]), "-o", str(out), "--no-progress", "--quiet")
    for run in ("first", "rerun"):
        events.clear()
        assert cli(*argv) == 0, run
        renames = [i for i, (what, _) in enumerate(events) if what == "rename"]
        outputs = {events[i][1] for i in renames}
        expected = {f"{out}{s}" for s in SUFFIXES}
        assert outputs == (expected | {str(out.parent / WRITTEN_LIST)} if run == "first"
                           else expected), run
        for i in renames:  # the file was synced before it was renamed
            assert ("fsync", events[i - 1][1]) in events[:i - 1], events[i]
        assert ("fsync", str(out.parent)) in events[renames[-1]:], run
        dir_syncs = sum(1 for e in events if e == ("fsync", str(out.parent)))
        # one for the list of prvstream's outputs (first run only), one after the five
        # outputs' renames (the trace's three, the summary's two)
        assert dir_syncs == (2 if run == "first" else 1), events
