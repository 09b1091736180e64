"""``prvstream summary``: target resolution, table and verdict, --json, --prom-file, --follow."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from prvstream.daemon.cli.main import cli
from prvstream.daemon.cli.summary import resolve_target
from prvstream.sinks.base import ACTIVITY_DTYPE, ActivityKind, DeviceInfo, ProcessInfo, ReportInfo
from prvstream.sinks.efficiency import EfficiencyModel, feed_report
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.summary import SummaryRecord, SummaryWriter, encode_record

C, N = int(ActivityKind.COMPUTE), int(ActivityKind.NCCL)


def _updates(ranks: int = 3) -> list[list[SummaryRecord]]:
    """Per report, the records the daemon would append: rank r computes (r+1)*100 ns of 400."""
    model = EfficiencyModel("train", window_ns=200, gap_threshold_ns=10)
    out = []
    for r in range(ranks):
        info = ReportInfo(report_id=f"r{r}", processes=[ProcessInfo(host=f"n{r}", pid=1, rank=r)],
                          devices=[DeviceInfo(host=f"n{r}", device=0, process=0, rank=r)],
                          origin_wall_ns=0, start_ns=0, end_ns=400)
        work = (r + 1) * 100
        act = np.array([(0, work, 0, 0, C), (work, work + 20, 0, 1, N)], dtype=ACTIVITY_DTYPE)
        feed_report(model, info, act)
        out.append(model.take_updates())
    return out


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A job directory as the daemon leaves it: JOB/prvstream/summary.jsonl and summary.json."""
    out = tmp_path / "job" / "prvstream"
    out.mkdir(parents=True)
    writer = SummaryWriter(out / "summary.jsonl")
    model_records = _updates()
    for recs in model_records:
        writer.append_many(recs)
    return tmp_path / "job"


def test_table_and_verdict_for_a_job_directory(job: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("summary", str(job)) == 0
    out = capsys.readouterr().out
    # useful 100/200/300 of 400, comm 20 each: LB 200/300, CE 300/320, OE 320/400
    assert "job train: 3 report(s), 3 device(s), span 0.000 s" in out
    assert "    load balance              66.7%" in out
    assert "    communication eff.        93.8%" in out
    assert "    orchestration eff.        80.0%" in out
    # rank 2 computes 300 ns, the mean is 200 ns: 50% longer
    assert ("verdict: load imbalance: rank 2 (n2 GPU 0) computes 50.0% longer than the mean "
            "(LB 66.7%)") in out
    hosts = [ln.split()[0] for ln in out.splitlines() if ln.startswith("  n")]
    assert hosts == ["n2", "n1", "n0"]  # the straggler (the busiest) first


@pytest.mark.parametrize("layout", ["prvstream/summary.jsonl", "summary.jsonl",
                                    "summary.json", "OUT.summary.json"])
def test_every_target_form_resolves(tmp_path: Path, layout: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / layout
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout.endswith(".jsonl"):
        SummaryWriter(path).append_many([r for recs in _updates() for r in recs])
    else:
        model = EfficiencyModel("train")
        SummaryWriter.write_state(model.state(), path)
    target = tmp_path if layout != "OUT.summary.json" else path
    assert resolve_target(target) == path
    assert cli("summary", str(target)) == 0
    assert "verdict:" in capsys.readouterr().out


def test_missing_target_is_an_error_with_advice(tmp_path: Path) -> None:
    with pytest.raises(PrvstreamError, match="--follow"):
        resolve_target(tmp_path)
    assert cli("summary", str(tmp_path / "nope.jsonl")) == 1


def test_json_views_and_prom_file(job: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    prom = tmp_path / "train.prom"
    assert cli("summary", str(job), "--json", "--prom-file", str(prom)) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["view"] == "cumulative" and rec["reports"] == 3
    assert rec["metrics"]["orchestration_efficiency"] == pytest.approx(0.8)
    assert [d["useful_ns"] for d in rec["devices"]] == [100, 200, 300]
    assert 'prvstream_orchestration_efficiency{job="train"} 0.8' in prom.read_text()
    assert cli("summary", str(job), "--json", "--view", "window") == 0
    win = json.loads(capsys.readouterr().out)
    assert (win["view"], win["index"], win["span_ns"]) == ("window", 1, 200)
    assert cli("summary", str(job), "--view", "window") == 0
    assert "per window:" in capsys.readouterr().out
    assert cli("summary", str(job), "--view", "phase") == 0
    assert "no phase rows yet" in capsys.readouterr().out


def _reader(stream, sink: queue.Queue[str]) -> None:  # type: ignore[no-untyped-def]
    for line in iter(stream.readline, ""):
        sink.put(line)


def _next_line(lines: queue.Queue[str], want: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            break
        if want in line:
            return line
    raise AssertionError(f"no line containing {want!r} within {timeout}s")


def _reap(proc: subprocess.Popen[str]) -> None:
    """Kill a follower that a failed check left running; close its output pipe."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
    assert proc.stdout is not None
    proc.stdout.close()


def _start_follower(argv: list[str], stderr: int) -> subprocess.Popen[str]:
    """``summary --follow`` as a user starts it, so that SIGINT (Ctrl-C) stops it: a test run
    started in the background by a shell ignores SIGINT, and the child would inherit that."""
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "table"])
def test_follow_prints_each_new_record_of_a_growing_file(tmp_path: Path,
                                                         as_json: bool) -> None:
    job = tmp_path / "job"
    job.mkdir()
    argv = [sys.executable, "-m", "prvstream.daemon", "summary", str(job), "--follow",
            "--interval", "0.05", "--log-level", "error"]
    if as_json:
        argv.append("--json")
    proc = _start_follower(argv, subprocess.PIPE)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    try:
        path = job / "prvstream" / "summary.jsonl"
        path.parent.mkdir()
        updates = _updates()
        with open(path, "ab") as fh:  # the file appears only after the follower started
            for n, recs in enumerate(updates, start=1):
                data = b"".join(encode_record(r) for r in recs)
                fh.write(data[:25])  # a torn line first: must not be printed half-read
                fh.flush()
                time.sleep(0.15)
                fh.write(data[25:])
                fh.flush()
                if as_json:
                    line = _next_line(lines, f'"reports":{n},')
                    assert json.loads(line)["view"] == "cumulative"
                else:
                    _next_line(lines, f"job train: {n} report(s)")
                    _next_line(lines, "verdict:")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        _reap(proc)
        assert proc.stderr is not None
        err = proc.stderr.read()
        proc.stderr.close()
    assert "Traceback" not in err


def test_follow_rereads_after_truncation(tmp_path: Path) -> None:
    path = tmp_path / "summary.jsonl"
    updates = _updates()
    writer = SummaryWriter(path)
    writer.append_many(updates[0])
    argv = [sys.executable, "-m", "prvstream.daemon", "summary", str(path), "--follow", "--json",
            "--interval", "0.05", "--log-level", "error"]
    proc = _start_follower(argv, subprocess.DEVNULL)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    try:
        _next_line(lines, '"reports":1,')
        committed = writer.append_many(updates[1])
        _next_line(lines, '"reports":2,')
        writer.truncate_to(committed - len(encode_record(updates[1][-1])) - 1)  # torn tail
        writer.truncate_to(len(b"".join(encode_record(r) for r in updates[0])))
        writer.append_many(updates[1])
        writer.append_many(updates[2])
        _next_line(lines, '"reports":3,')
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        _reap(proc)


def test_convert_writes_a_bounded_state_and_the_full_history(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from prvstream.daemon.synthetic.synth import SynthSpec, write_export
    from prvstream.sinks.summary import decode_state, iter_records

    exports = [write_export(tmp_path / f"r{r}.sqlite", SynthSpec(ranks=2, steps=12), r)
               for r in range(2)]
    cfg = tmp_path / "p.toml"
    cfg.write_text("summary_recent = 5\nwindow = 0.01\n")
    out = tmp_path / "out"
    assert cli("convert", *map(str, exports), "-o", str(out), "--no-progress",
               "--config", str(cfg)) == 0
    capsys.readouterr()
    state = decode_state((tmp_path / "out.summary.json").read_bytes())
    history = list(iter_records(tmp_path / "out.summary.jsonl"))
    instances = {(r.name, r.index) for r in history if r.view == "phase"}
    assert len(instances) == 12 and state.recent == 5
    assert [p.index for p in state.phases] == list(range(7, 12))
    assert len(state.windows) == 5 < len({r.index for r in history if r.view == "window"})
    (total,) = state.phase_totals
    assert total.index == 12 and len(total.devices) == 2
    assert not list(tmp_path.glob(".*.part"))
    assert cli("summary", str(tmp_path / "out.summary.jsonl"), "--view", "phase",
               "--config", str(cfg)) == 0
    text = capsys.readouterr().out
    assert "per phase name, all instances" in text and total.name in text
    assert "the latest 5 per name are kept" in text


def test_follow_warns_once_per_change_while_ranks_are_missing(tmp_path: Path) -> None:
    """The warning follows ``status.json``'s ``missing_ranks`` beside the growing summary."""
    out = tmp_path / "job" / "prvstream"
    out.mkdir(parents=True)
    status = out / "status.json"
    argv = [sys.executable, "-m", "prvstream.daemon", "summary", str(out.parent), "--follow",
            "--json", "--interval", "0.05", "--log-level", "error"]
    proc = _start_follower(argv, subprocess.PIPE)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    try:
        with open(out / "summary.jsonl", "ab") as fh:
            for n, (recs, missing) in enumerate(zip(_updates(), ([1, 2], [2], []),
                                                    strict=True), start=1):
                status.write_text(json.dumps({"expected_ranks": 3, "missing_ranks": missing}))
                fh.write(b"".join(encode_record(r) for r in recs))
                fh.flush()
                _next_line(lines, f'"reports":{n},')
                time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        _reap(proc)
        assert proc.stderr is not None
        err = proc.stderr.read()
        proc.stderr.close()
    assert [ln for ln in err.splitlines() if "ranks missing" in ln] == [
        "warning: 2 of 3 expected ranks missing (no report yet): 1, 2",
        "warning: 1 of 3 expected ranks missing (no report yet): 2",
    ]
