"""What a person reads: each message through a real ``prvstream`` process with stderr a pipe
(not a terminal): its first words, the exit status, no traceback, no JSON unless asked."""

from __future__ import annotations

import json
import os
import pty
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prvstream.daemon.config import USER_KINDS
from prvstream.daemon.synthetic.synth import SynthSpec, write_export
from prvstream.sinks.summary import decode_state
from tests.conftest import REAL_DATA
from tests.daemon.daemon_proc import DaemonProcess, _clean_env, place_atomically, run_cli

TINY = REAL_DATA / "nsys2026.1_torch_tiny_rtx3080.sqlite"


def _plain(proc: subprocess.CompletedProcess[str]) -> None:
    """No traceback and no JSON line on either stream."""
    for text in (proc.stdout, proc.stderr):
        assert "Traceback" not in text, text
        assert not [ln for ln in text.splitlines() if ln.startswith("{")], text


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small synthetic export (with NVTX)."""
    return write_export(tmp_path_factory.mktemp("exp") / "rank0.sqlite",
                        SynthSpec(ranks=1, steps=3), 0)


@pytest.fixture(scope="module")
def export_without_nvtx(export: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same export with its NVTX table dropped."""
    path = tmp_path_factory.mktemp("nonvtx") / "rank0.sqlite"
    path.write_bytes(export.read_bytes())
    with sqlite3.connect(path) as con:
        con.execute("DROP TABLE NVTX_EVENTS")
    return path


def test_unknown_trace_kind_lists_the_valid_ones(tmp_path: Path, export: Path) -> None:
    proc = run_cli("convert", str(export), "-o", "out", "--trace", "kernels", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith(
        "prvstream convert: error: argument --trace: unknown data kind 'kernels'; choose from")
    assert all(k in proc.stderr for k in USER_KINDS) and "setting" not in proc.stderr
    _plain(proc)


def test_bad_environment_value_names_the_variable(tmp_path: Path) -> None:
    env = {**_clean_env(), "PRVSTREAM_POLL": "abc"}
    proc = subprocess.run([sys.executable, "-m", "prvstream.daemon", "watch", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith("prvstream: error: PRVSTREAM_POLL=abc: must be a number")
    _plain(proc)


def test_bad_flag_value_names_the_flag(tmp_path: Path) -> None:
    proc = run_cli("watch", str(tmp_path), "--poll", "-1", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("prvstream: error: --poll: must be 0")
    _plain(proc)


def test_summary_of_an_export_says_convert_first(tmp_path: Path, export: Path) -> None:
    proc = run_cli("summary", str(export), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"prvstream: error: {export} is an export, not a summary: "
                                  "run `prvstream convert")
    _plain(proc)


def test_errors_are_json_when_asked(tmp_path: Path, export: Path) -> None:
    proc = run_cli("summary", str(export), "--log-json", cwd=tmp_path)
    assert proc.returncode == 1
    event = json.loads(proc.stderr.splitlines()[0])
    assert event["event"] == "command_failed" and "is an export" in event["error"]
    proc = run_cli("convert", str(export), "-o", "out", "--chunk-rows", "1", "--fan-in", "1",
                   "--log-json", cwd=tmp_path)
    assert proc.returncode == 2
    event = json.loads(proc.stderr)
    assert event["event"] == "config_invalid" and event["error"].startswith("--fan-in: ")


def test_follow_of_a_job_not_there_yet_says_it_waits(tmp_path: Path) -> None:
    job = tmp_path / "job-to-come"
    proc = subprocess.Popen([sys.executable, "-m", "prvstream.daemon", "summary", str(job),
                             "--follow", "--interval", "0.05"], env=_clean_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # bounded: the process is killed below if it hangs
        assert line.startswith(f"prvstream: waiting for {job} to appear"), line
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


def test_trace_kind_in_no_input_fails_and_writes_nothing(tmp_path: Path,
                                                         export_without_nvtx: Path) -> None:
    proc = run_cli("convert", str(export_without_nvtx), "-o", "out", "--trace", "nvtx",
                   cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith("prvstream: error: no input holds nvtx data (asked for "
                                  "with --trace); the inputs hold ")
    assert "links" in proc.stderr and "comm" not in proc.stderr
    assert not list(tmp_path.glob("out*"))
    _plain(proc)


def test_trace_kind_missing_beside_others_warns_and_converts(
        tmp_path: Path, export_without_nvtx: Path) -> None:
    proc = run_cli("convert", str(export_without_nvtx), "-o", "out", "--trace", "nvtx,kernel",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ("prvstream: warning: no input holds nvtx data (asked for with "
                           "--trace); converted the rest\n")
    assert (tmp_path / "out.prv").exists()
    _plain(proc)


def test_convert_ends_with_records_that_add_up_and_the_efficiency(tmp_path: Path,
                                                                   export: Path) -> None:
    proc = run_cli("convert", str(export), "-o", "out", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert len(lines) == 4, proc.stdout
    head, total_parts = lines[0].split(" records = ")
    total = int(head.rsplit(" ", 1)[1].replace(",", ""))
    parts = total_parts.split(";")[0].split(" + ")
    counts = {p.split()[1]: int(p.split()[0].replace(",", "")) for p in parts}
    assert sum(counts.values()) == total
    prv_lines = (tmp_path / "out.prv").read_bytes().count(b"\n") - 1  # minus the header
    assert total == prv_lines
    assert "links" in counts and "comm" not in lines[0]
    assert lines[1].startswith("  efficiency  PE ") and " LB " in lines[1]
    assert " CE " in lines[1] and " OE " in lines[1]
    assert lines[2].startswith("  verdict     ")
    assert lines[3].startswith("  files       out.prv/.pcf/.row") and "out.summary.json" in lines[3]
    _plain(proc)


def test_convert_quiet_prints_nothing(tmp_path: Path, export: Path) -> None:
    proc = run_cli("convert", str(export), "-o", "out", "--quiet", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert (tmp_path / "out.prv").exists()


@pytest.mark.skipif(not TINY.exists(), reason=f"real export {TINY.name} not available")
def test_export_warnings_go_to_the_summary_notes(tmp_path: Path) -> None:
    proc = run_cli("convert", str(TINY), "-o", "tiny", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    assert "  notes       1 note about the inputs" in proc.stdout
    state = decode_state((tmp_path / "tiny.summary.json").read_bytes())
    assert len(state.notes) == 1 and "systemClockNs" in state.notes[0]
    shown = run_cli("summary", "tiny.summary.json", cwd=tmp_path)
    assert shown.returncode == 0 and "note: " + state.notes[0] in shown.stdout


def test_finalize_while_the_daemon_runs_says_touch_the_marker(tmp_path: Path,
                                                              export: Path) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    job = root / "job"
    job.mkdir(parents=True)
    with DaemonProcess([root], state, tmp_path / "logs") as daemon:
        daemon.start()
        place_atomically(export, job / "rank0.sqlite")
        daemon.wait_event("report_appended", timeout=60)
        proc = run_cli("finalize", str(job), "--state", str(state), cwd=tmp_path)
        assert proc.returncode == 1
        assert proc.stderr.startswith(
            f"prvstream: error: the daemon (another prvstream process) is writing job {job}; "
            f"it finalizes the job itself when told: touch {job / 'prvstream.done'}")
        _plain(proc)
        # a job seen for the first time has nothing to recover
        assert not daemon.named("job_recovered")


def _watch_once(root: Path, env: dict[str, str], tty: bool) -> str:
    """Run ``watch --once`` with stderr a pipe or a terminal; return what it logged."""
    argv = [sys.executable, "-m", "prvstream.daemon", "watch", str(root), "--once",
            "--state", str(root.parent / "state")]
    if not tty:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                              check=True).stderr
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=follower,
                              timeout=60, check=True)
        del proc
        os.close(follower)
        follower = -1
        chunks = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks).decode(errors="replace")
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)


@pytest.mark.parametrize(
    ("tty", "extra_env", "want_json"),
    [
        pytest.param(False, {}, True, id="pipe-json"),
        pytest.param(True, {}, False, id="terminal-readable"),
        pytest.param(True, {"INVOCATION_ID": "0123"}, True, id="systemd-json"),
        pytest.param(True, {"PRVSTREAM_LOG_JSON": "true"}, True, id="forced-json"),
    ],
)
def test_watch_logs_json_for_services_readable_on_a_terminal(
        tmp_path: Path, tty: bool, extra_env: dict[str, str], want_json: bool) -> None:
    root = tmp_path / "root"
    root.mkdir()
    env = {**_clean_env(), **extra_env}
    env.pop("JOURNAL_STREAM", None)
    if "INVOCATION_ID" not in extra_env:
        env.pop("INVOCATION_ID", None)
    text = _watch_once(root, env, tty)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert lines, "watch logged nothing at info level"
    assert all(ln.startswith("{") for ln in lines) == want_json, text
    assert any(ln.startswith("{") for ln in lines) == want_json, text


def test_synth_says_what_it_wrote_and_what_next(tmp_path: Path) -> None:
    proc = run_cli("synth", "job", "--ranks", "2", "--steps", "1", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("prvstream: wrote 2 export(s) to job (about ")
    assert proc.stdout.rstrip().endswith("convert them with prvstream convert job -o OUT")
    assert len(list((tmp_path / "job").glob("*.sqlite"))) == 2


_TIMINGS = re.compile(r"^  timings     start-up ([\d.]+) s, planning ([\d.]+) s, converting "
                      r"([\d.]+) s(?: \(waiting for the reader ([\d.]+) s\))?, writing out "
                      r"([\d.]+) s; ([\d.]+) s in all$", re.MULTILINE)


def test_convert_timings_says_where_the_time_went(tmp_path: Path, export: Path) -> None:
    proc = run_cli("convert", str(export), "-o", "out", "--timings", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    found = _TIMINGS.search(proc.stdout)
    assert found is not None, proc.stdout
    startup, planning, converting, _, writing, total = (
        float(v) if v is not None else None for v in found.groups())
    assert startup is not None and planning is not None and converting is not None
    assert writing is not None and total is not None
    # the process's start-up holds its imports (numpy's): the longest stage of a small export
    assert startup > 0.01 and startup == max(startup, planning, converting, writing)
    assert startup + planning + converting + writing == pytest.approx(total, abs=0.003)
    _plain(proc)
    plain = run_cli("convert", str(export), "-o", "again", cwd=tmp_path)
    assert plain.returncode == 0 and "timings" not in plain.stdout
    assert run_cli("convert", str(export), "-o", "quiet", "--timings", "--quiet",
                   cwd=tmp_path).stdout == ""


def test_convert_timings_counts_the_wait_for_the_reader(
        tmp_path: Path, export: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from prvstream.daemon.cli.main import cli
    from prvstream.daemon.nsys import sources

    monkeypatch.setattr(sources, "_READER_MIN_ROWS", 0)  # this small export read by the reader
    assert cli("convert", str(export), "-o", str(tmp_path / "out"), "--no-progress",
               "--timings") == 0
    found = _TIMINGS.search(capsys.readouterr().out)
    assert found is not None
    converting, waited = float(found.group(3)), float(found.group(4))
    assert 0 < waited <= converting
