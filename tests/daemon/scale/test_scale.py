"""Dask scale-out: cluster specs, sorted runs and range merges, and conversions on a real
LocalCluster (threads in this process, and two worker processes) byte-identical to one
process, including a worker killed mid-task."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from prvstream.daemon.config import Settings, load_settings
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.live.livetrace import LiveTrace
from prvstream.daemon.scale.cluster import ClusterSpec, parse_spec
from prvstream.daemon.scale.runs import RunWriter, merge_range, range_extents, split_times
from prvstream.daemon.service.readiness import report_identity
from prvstream.daemon.stream.batch import convert
from prvstream.daemon.stream.merge import RecordBatch, make_keys, sort_batch
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.errors import ConfigError
from prvstream.sinks.paraver.fastfmt import WIDTH, template
from prvstream.sinks.summary import encode_record
from tests.conftest import real_exports
from tests.daemon.scale.nodask import assert_runs_without_dask

_OUTPUTS = (".prv", ".pcf", ".row", ".summary.jsonl")


@pytest.mark.parametrize(("text", "spec"), [
    pytest.param("local", ClusterSpec("local", 0), id="local"),
    pytest.param("local:2", ClusterSpec("local", 2), id="local-2"),
    pytest.param("inproc:3", ClusterSpec("inproc", 3), id="inproc-3"),
    pytest.param("tcp://10.0.0.1:8786", ClusterSpec("address", target="tcp://10.0.0.1:8786"),
                 id="address"),
    pytest.param("/shared/sched.json", ClusterSpec("file", target="/shared/sched.json"),
                 id="scheduler-file"),
])
def test_cluster_specs(text: str, spec: ClusterSpec) -> None:
    assert parse_spec(text) == spec


@pytest.mark.parametrize("text", ["local:x", "nonsense", "inproc:-1"])
def test_bad_cluster_spec_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match="dask"):
        load_settings(None, {"dask": text}, environ={})


def test_dask_from_environment_and_config_file(tmp_path: Path) -> None:
    assert load_settings(None, environ={"PRVSTREAM_DASK": "local:4"}).dask == "local:4"
    cfg = tmp_path / "p.toml"
    cfg.write_text('dask = "tcp://sched:8786"\n')
    assert load_settings(cfg, environ={}).dask == "tcp://sched:8786"


def test_without_dask_distributed_is_never_imported(tmp_path: Path) -> None:
    src = write_job(tmp_path / "src", SynthSpec(ranks=2, steps=1))
    assert_runs_without_dask('convert', str(src[0].parent), '-o', str(tmp_path / 'out'),
                             '--log-level', 'error')


# -- runs and range merges ---------------------------------------------------------------

_TMPL = template("2:0:1:%d:%d:%d:9:%d")


def _batch(times: list[int], report: int) -> RecordBatch:
    t = np.array(times, dtype=np.int64)
    seq = np.arange(len(t), dtype=np.int64)
    task = 1 + seq % 3
    keys = make_keys(t, 1, task, 1, 0, report, seq)
    fields = np.zeros((len(t), WIDTH), dtype=np.int64)
    fields[:, 0], fields[:, 1], fields[:, 2], fields[:, 3] = task, 1, t, report * 1000 + seq
    return sort_batch(RecordBatch(keys, fields, np.full(len(t), _TMPL, dtype=np.int16)))


@hsettings(max_examples=25, deadline=None)
@given(reports=st.lists(st.lists(st.integers(0, 50), max_size=40), min_size=1, max_size=5),
       ranges=st.integers(1, 7), chunk=st.integers(1, 16))
def test_ranges_of_runs_concatenate_to_the_full_merge(
        tmp_path_factory: pytest.TempPathFactory, reports: list[list[int]], ranges: int,
        chunk: int) -> None:
    """Whatever the cut points and batch sizes, range merges in order = one full sort."""
    work = tmp_path_factory.mktemp("runs")
    batches = [_batch(times, i) for i, times in enumerate(reports)]
    runs = []
    for i, batch in enumerate(batches):
        writer = RunWriter(work / f"run{i}")
        for lo in range(0, len(batch), chunk):
            writer.add(RecordBatch(batch.keys[lo:lo + chunk], batch.fields[lo:lo + chunk],
                                   batch.tmpl[lo:lo + chunk]))
        runs.append(writer.close())
    cuts = split_times(runs, ranges)
    assert cuts == sorted(set(cuts))
    extents = range_extents(runs, cuts)
    text = b""
    for k, (lo, hi) in enumerate(zip([None, *cuts], [*cuts, None], strict=True)):
        got = merge_range([(r.base, r.records) for r in runs], lo, hi, str(work / f"r{k}"))
        assert got == extents[k]  # known before the merge
        text += (work / f"r{k}").read_bytes()
    full = sort_batch(RecordBatch.concat(batches)).text()
    assert text == full
    # in place: every range at its offset of one pre-sized file, merged in reverse order
    trace = work / "trace"
    trace.write_bytes(b"H" * 7 + b"\0" * len(full))
    offsets = np.cumsum([7] + [n for _, n in extents])
    for k, (lo, hi) in reversed(list(enumerate(zip([None, *cuts], [*cuts, None],
                                                    strict=True)))):
        merge_range([(r.base, r.records) for r in runs], lo, hi, str(trace), int(offsets[k]))
    assert trace.read_bytes() == b"H" * 7 + full


# -- conversions on a real cluster ----------------------------------------------------------

def _settings(tmp_path: Path, **extra: Any) -> Settings:
    return load_settings(None, {"state_dir": str(tmp_path / "state"), **extra}, environ={})


def _model(name: str, settings: Settings) -> EfficiencyModel:
    return EfficiencyModel(name, window_ns=int(settings.window * 1e9), flush_rows=8192,
                           gap_threshold_ns=settings.gap_threshold_ns,
                           recent=settings.summary_recent)


def _digest(data: bytes) -> str:
    """Compared by digest: a failed comparison of whole traces would print megabytes."""
    return hashlib.sha256(data).hexdigest()


def _outputs(out: Path) -> dict[str, str]:
    return {ext: _digest(Path(str(out) + ext).read_bytes()) for ext in _OUTPUTS}


def _convert_both(client: Any, inputs: list[str], tmp_path: Path, **hooks: Any
                  ) -> tuple[dict[str, str], dict[str, str]]:
    from prvstream.daemon.scale.convert import convert_dask

    settings = _settings(tmp_path)
    got = []
    for name, fn in (("one", convert), ("dask", None)):
        out = tmp_path / name / "trace"
        model = _model("trace", settings)
        history = Path(str(out) + ".summary.jsonl")
        if fn is None:
            convert_dask(client, inputs, out, settings, model=model, summary_jsonl=history,
                         **hooks)
        else:
            fn(inputs, out, settings, model=model, summary_jsonl=history)
        outputs = _outputs(out)
        outputs["state"] = _digest(encode_record(model.state()))
        got.append(outputs)
    return got[0], got[1]


@pytest.mark.skipif(not real_exports(), reason="real exports not found (PRVSTREAM_TEST_DATA)")
def test_real_exports_in_process_cluster_byte_identical(inproc: Any, tmp_path: Path) -> None:
    one, dask = _convert_both(inproc, [str(p) for p in real_exports()], tmp_path)
    assert one == dask


def test_finalize_on_dask_equals_convert(inproc: Any, tmp_path: Path) -> None:
    sources = write_job(tmp_path / "src", SynthSpec(ranks=3, steps=2))
    job = tmp_path / "job"
    job.mkdir()
    settings = _settings(tmp_path, dask="inproc:2")
    journal = JobJournal.open(settings.state_dir, job)
    journal.lock()
    trace = LiveTrace(journal, job / "prvstream", "job", settings)
    for source in sources:
        target = job / source.name
        shutil.copy(source, target)
        trace.append(target, report_identity(target))
    trace.finalize()
    convert([str(job)], tmp_path / "batch", _settings(tmp_path))
    for ext in (".prv", ".pcf", ".row"):
        assert (job / "prvstream" / f"job{ext}").read_bytes() == \
            (tmp_path / f"batch{ext}").read_bytes(), ext
    assert trace.journal.state.finalized
    assert trace.journal.state.prv_length == (job / "prvstream" / "job.prv").stat().st_size


def test_sixteen_ranks_on_two_worker_processes_byte_identical(processes: Any,
                                                              tmp_path: Path) -> None:
    src = write_job(tmp_path / "src", SynthSpec(ranks=16, steps=2, hosts=4))
    one, dask = _convert_both(processes, [str(src[0].parent)], tmp_path)
    assert one == dask


def test_worker_killed_mid_task_job_completes_once(processes: Any, tmp_path: Path) -> None:
    src = write_job(tmp_path / "src", SynthSpec(ranks=16, steps=2))
    killed: list[int] = []

    def kill_one(done: int, total: int) -> None:
        if not killed:  # the first report is in: the others are queued or running
            pids = processes.run(os.getpid)
            killed.append(sorted(pids.values())[0])
            os.kill(killed[0], signal.SIGKILL)

    one, dask = _convert_both(processes, [str(src[0].parent)], tmp_path, progress=kill_one)
    assert killed
    assert one == dask


def test_convert_command_with_dask_flag(inproc: Any, tmp_path: Path) -> None:
    from prvstream.daemon.cli.main import cli

    src = write_job(tmp_path / "src", SynthSpec(ranks=3, steps=1))
    assert cli("convert", str(src[0].parent), "-o", str(tmp_path / "a" / "t"), "--dask",
               "inproc:2") == 0
    assert cli("convert", str(src[0].parent), "-o", str(tmp_path / "b" / "t")) == 0
    for ext in (".prv", ".pcf", ".row", ".summary.json", ".summary.jsonl"):
        assert (tmp_path / "a" / f"t{ext}").read_bytes() == \
            (tmp_path / "b" / f"t{ext}").read_bytes(), ext


def _live_job(tmp_path: Path, name: str, **extra: Any) -> tuple[Path, LiveTrace]:
    job = tmp_path / name
    job.mkdir()
    settings = _settings(tmp_path / f"{name}-state", **extra)
    journal = JobJournal.open(settings.state_dir, job)
    journal.lock()
    return job, LiveTrace(journal, job / "prvstream", "job", settings)


def _live_outputs(job: Path) -> dict[str, str]:
    out = job / "prvstream"
    return {p: _digest((out / p).read_bytes()) for p in ("job.prv", "job.pcf", "job.row",
                                                 "summary.jsonl", "summary.json")}


@pytest.mark.parametrize("order", [
    pytest.param([3, 1, 5, 0, 2, 4], id="shuffled"),
    pytest.param([4, 5, 0, 1, 2, 3], id="late-slices-first"),
])
def test_live_appends_on_dask_byte_identical(inproc: Any, tmp_path: Path,
                                             order: list[int]) -> None:
    """Reports converted ahead on workers and committed in order give the trace, summary and
    journal offsets of the single-process daemon, rewrites included."""
    from prvstream.daemon.live.remote import RemoteAppender

    sources = write_job(tmp_path / "src", SynthSpec(ranks=3, slices=2, steps=1))
    arrivals = [sources[i] for i in order]
    one_job, one = _live_job(tmp_path, "one", skew_allowance=0.0)
    dask_job, trace = _live_job(tmp_path, "dask", skew_allowance=0.0)
    for source in arrivals:
        target = one_job / source.name
        shutil.copy(source, target)
        one.append(target, report_identity(target))
    remote = RemoteAppender(trace, inproc)
    try:
        targets = []
        for source in arrivals:
            target = dask_job / source.name
            shutil.copy(source, target)
            remote.submit(target)
            targets.append(target)
        for target in targets:
            remote.commit(target, report_identity(target))
    finally:
        remote.close()
    assert _live_outputs(one_job) == _live_outputs(dask_job)
    blocks = [(r.block_start, r.block_end) for r in trace.journal.reports]
    assert blocks == [(r.block_start, r.block_end) for r in one.journal.reports]
    # the model checkpoint is named by its content: the same model state
    digest = [t.journal.state.model_checkpoint.rsplit(".", 1)[-1] for t in (trace, one)]
    assert digest[0] == digest[1] != ""


def test_watch_once_with_dask_flag(tmp_path: Path) -> None:
    """The daemon with ``--dask``: every report in, finalized, same bytes as ``convert``."""
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    from tests.daemon.daemon_proc import run_cli

    job = tmp_path / "root" / "job"
    write_job(job, SynthSpec(ranks=4, steps=1))
    (job / "prvstream.done").touch()
    done = run_cli("watch", str(job.parent), "--once", "--settle", "0", "--state",
                   str(tmp_path / "state"), "--dask", "inproc:2", "--log-json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert '"dask": true' in done.stdout + done.stderr
    convert([str(job)], tmp_path / "batch", _settings(tmp_path))
    for ext in (".prv", ".pcf", ".row"):
        assert (job / "prvstream" / f"job{ext}").read_bytes() == \
            (tmp_path / f"batch{ext}").read_bytes(), ext


def test_hostile_rows_are_counted_on_dask_too(tmp_path: Path) -> None:
    """Rows dropped on a worker reach the convert summary and the job's status.json."""
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    import json
    import sqlite3

    from tests.daemon.daemon_proc import run_cli

    job = tmp_path / "root" / "job"
    sources = write_job(job, SynthSpec(ranks=2, steps=1))
    con = sqlite3.connect(sources[0])
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = 9223372036854775807 WHERE rowid = "
                "(SELECT MIN(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    con.commit()
    con.close()
    done = run_cli("convert", str(job), "-o", str(tmp_path / "t"), "--dask", "inproc:2",
                   "--no-progress", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{sources[0].name}: 1 kernel dropped" in done.stdout
    (job / "prvstream.done").touch()
    done = run_cli("watch", str(job.parent), "--once", "--settle", "0", "--state",
                   str(tmp_path / "state"), "--dask", "inproc:2", "--log-json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    status = json.loads((job / "prvstream" / "status.json").read_text())
    assert status["hostile"] == {sources[0].name: {"kernel dropped": 1}}
