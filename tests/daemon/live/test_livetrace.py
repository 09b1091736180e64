"""The live trace's own paths: out-of-order capture slices (rewrite), header growth, recovery."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from prvstream.daemon.config import load_settings
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.live.livetrace import LiveTrace
from prvstream.daemon.service.readiness import report_identity
from prvstream.daemon.stream.batch import convert
from prvstream.daemon.stream.numbering import state_json
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from tests.prv_check import validate


def _job(tmp_path: Path, **overrides: object) -> tuple[Path, LiveTrace]:
    job = tmp_path / "job"
    job.mkdir(parents=True)
    settings = load_settings(None, {"state_dir": str(tmp_path / "state"), **overrides},
                             environ={})
    journal = JobJournal.open(settings.state_dir, job)
    journal.lock()
    return job, LiveTrace(journal, job / "prvstream", "job", settings)


def _same_as_convert(job: Path, tmp_path: Path, trace: LiveTrace) -> None:
    """The finalized trace equals a batch conversion of the job with the same settings."""
    convert([str(job)], tmp_path / "batch", trace.settings)
    for ext in (".prv", ".pcf", ".row"):
        live = (job / "prvstream" / f"job{ext}").read_bytes()
        assert live == (tmp_path / f"batch{ext}").read_bytes(), ext


def _append(trace: LiveTrace, job: Path, source: Path) -> bool:
    target = job / source.name
    shutil.copy(source, target)
    result = trace.append(target, report_identity(target))
    validate(trace.prv)
    return result.compacted


def test_slices_arriving_out_of_order_are_rewritten_then_finalized(tmp_path: Path) -> None:
    sources = write_job(tmp_path / "src", SynthSpec(ranks=2, slices=2, steps=2))
    by_name = {p.name: p for p in sources}
    job, trace = _job(tmp_path, skew_allowance=0.0)
    late_first = ["rank0000.slice01.sqlite", "rank0001.slice01.sqlite",
                  "rank0000.slice00.sqlite", "rank0001.slice00.sqlite"]
    with capture_logs() as logs:
        compacted = [_append(trace, job, by_name[name]) for name in late_first]
    assert compacted == [False, False, True, True]
    assert not [e for e in logs if e["event"] == "device_overlaps_earlier_report"]
    trace.finalize()
    stats = validate(trace.prv, globally_sorted=True)
    assert len(stats.threads_per_task) == 2
    _same_as_convert(job, tmp_path, trace)


def test_header_outgrowing_its_capacity_is_rewritten(tmp_path: Path) -> None:
    sources = write_job(tmp_path / "src", SynthSpec(ranks=40, hosts=40, steps=1))
    job, trace = _job(tmp_path, header_capacity=256)
    for source in sources:
        _append(trace, job, source)
    assert trace.journal.state.header_capacity > 256
    header = trace.prv.read_bytes()[: trace.journal.state.header_capacity]
    assert header.endswith(b"\n") and b",0" in header
    trace.finalize()
    _same_as_convert(job, tmp_path, trace)


def test_recovery_truncates_an_uncommitted_block(tmp_path: Path) -> None:
    sources = write_job(tmp_path / "src", SynthSpec(ranks=2, steps=1))
    job, trace = _job(tmp_path)
    _append(trace, job, sources[0])
    committed = trace.prv.read_bytes()
    with trace.prv.open("ab") as fh:  # a block written, never committed (crash)
        fh.write(b"2:0:1:1:1:5:63000000:1\n" * 100)
    trace.close()  # the crashed writer's locks are gone with it
    trace.journal.unlock()
    journal = JobJournal.open(trace.settings.state_dir, job)
    journal.lock()
    again = LiveTrace(journal, job / "prvstream", "job", trace.settings)
    again.recover()
    assert again.prv.read_bytes() == committed
    _append(again, job, sources[1])
    again.finalize()
    _same_as_convert(job, tmp_path, again)


@pytest.mark.parametrize("kinds", [pytest.param(["kernel", "memcpy"], id="gpu-only")])
def test_restricted_kinds_still_finalize_like_convert(tmp_path: Path, kinds: list[str]) -> None:
    sources = write_job(tmp_path / "src", SynthSpec(ranks=2, steps=1))
    job, trace = _job(tmp_path, kinds=kinds)
    for source in sources:
        _append(trace, job, source)
    trace.finalize()
    settings = load_settings(None, {"kinds": kinds}, environ={})
    convert([str(job)], tmp_path / "batch", settings)
    assert trace.prv.read_bytes() == (tmp_path / "batch.prv").read_bytes()


def test_summaries_after_recovery_equal_an_uninterrupted_run(tmp_path: Path) -> None:
    sources = write_job(tmp_path / "src", SynthSpec(ranks=3, steps=2))
    plain_job, plain = _job(tmp_path / "plain")
    for source in sources:
        _append(plain, plain_job, source)

    job, trace = _job(tmp_path / "crash")
    _append(trace, job, sources[0])
    with trace.summary_jsonl.open("ab") as fh:  # a torn, uncommitted summary line
        fh.write(b'{"schema":1,"job":"job","view":"cumul')
    trace.close()  # the crashed writer's locks are gone with it
    trace.journal.unlock()
    journal = JobJournal.open(trace.settings.state_dir, job)
    journal.lock()
    again = LiveTrace(journal, job / "prvstream", "job", trace.settings)
    again.recover()
    for source in sources[1:]:
        _append(again, job, source)
    for name in ("summary.jsonl", "summary.json", "job.prv", "job.pcf", "job.row"):
        assert (job / "prvstream" / name).read_bytes() == \
            (plain_job / "prvstream" / name).read_bytes(), name


def test_recovery_reads_no_export_and_keeps_the_summaries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Restart is O(1) in the job: the model comes from its checkpoint, never the exports."""
    import prvstream.daemon.live.sources as live_sources

    sources = write_job(tmp_path / "src", SynthSpec(ranks=3, steps=2))
    job, trace = _job(tmp_path)
    for source in sources:
        _append(trace, job, source)
    before = {n: (job / "prvstream" / n).read_bytes() for n in ("summary.json", "job.prv")}
    trace.close()
    trace.journal.unlock()

    def no_reading(*args: object, **kwargs: object) -> None:
        raise AssertionError("recovery read an export")

    monkeypatch.setattr(live_sources, "prepare", no_reading)
    journal = JobJournal.open(trace.settings.state_dir, job)
    journal.lock()
    again = LiveTrace(journal, job / "prvstream", "job", trace.settings)
    again.recover()
    after = {n: (job / "prvstream" / n).read_bytes() for n in before}
    assert after == before


def test_a_report_failing_midway_leaves_the_job_as_it_was(tmp_path: Path) -> None:
    """A report that breaks while streaming (and the origin it would have set) is undone."""
    import sqlite3

    from prvstream.sinks.errors import NotAnExport

    sources = write_job(tmp_path / "src", SynthSpec(ranks=2, steps=2))
    job, trace = _job(tmp_path)
    _append(trace, job, sources[0])
    before = {p.name: p.read_bytes() for p in (job / "prvstream").iterdir() if p.is_file()}
    state_before = state_json(trace.journal.state.numbering)
    hostile = job / "rank0001.sqlite"
    shutil.copy(sources[1], hostile)
    con = sqlite3.connect(hostile)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = 'x' "
                "WHERE rowid IN (SELECT rowid FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                "ORDER BY start DESC LIMIT 5)")
    con.commit()
    con.close()
    with pytest.raises(NotAnExport, match=r"rank0001\.sqlite"):
        trace.append(hostile, report_identity(hostile))
    after = {p.name: p.read_bytes() for p in (job / "prvstream").iterdir() if p.is_file()}
    assert after == before
    assert len(trace.journal.reports) == 1
    assert state_json(trace.journal.state.numbering) == state_before
    hostile.unlink()
    _append(trace, job, sources[1])  # the job goes on
    trace.finalize()
    _same_as_convert(job, tmp_path, trace)


def test_a_trace_deleted_between_appends_is_an_output_fault_never_a_hole(tmp_path: Path) -> None:
    """A ``.prv`` removed while reports are committed: the next append refuses (an output
    fault, so the job degrades) instead of writing its block past the end of a new file behind
    a run of zero bytes; recovery rebuilds the trace and the report then lands."""
    from prvstream.sinks.errors import OutputConflict

    sources = write_job(tmp_path / "src", SynthSpec(ranks=2, steps=1))
    job, trace = _job(tmp_path)
    _append(trace, job, sources[0])
    trace.prv.unlink()
    with pytest.raises(OutputConflict, match="is gone"):
        _append(trace, job, sources[1])
    assert not trace.prv.exists() or b"\0" not in trace.prv.read_bytes()
    trace.recover()
    _append(trace, job, sources[1])
    assert b"\0" not in trace.prv.read_bytes()
    assert len(trace.journal.reports) == 2
