"""Committed means kept: finalize merges the live trace's committed blocks and reads no export,
so deleting, truncating or replacing an export after its commit never changes the final trace
(which still equals ``prvstream convert`` of the original reports, byte for byte)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from prvstream.daemon.config import load_settings
from prvstream.daemon.live.blockstore import BlockStore
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.live.livetrace import LiveTrace
from prvstream.daemon.service.readiness import report_identity
from prvstream.daemon.stream.batch import convert
from prvstream.daemon.synthetic.synth import SynthSpec, export_name, write_export, write_job
from tests.conftest import real_exports
from tests.prv_check import validate

OUTPUTS = (".prv", ".pcf", ".row")


@pytest.fixture(scope="module")
def slices(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two ranks of two capture slices each, plus one other export to replace files with."""
    src = tmp_path_factory.mktemp("slices")
    spec = SynthSpec(ranks=2, slices=2, steps=2, seed=5)
    out = [write_export(src / export_name(spec, r, s), spec, r, s)
           for r in range(spec.ranks) for s in range(spec.slices)]
    other = SynthSpec(ranks=1, steps=1, seed=9)
    out.append(write_export(src / "other.sqlite", other, 0))
    return out


def _live(tmp: Path, skew: float) -> tuple[Path, LiveTrace]:
    job = tmp / "job"
    job.mkdir(parents=True)
    settings = load_settings(None, {"state_dir": str(tmp / "state"), "skew_allowance": skew,
                                    "fan_in": 2}, environ={})
    journal = JobJournal.open(settings.state_dir, job)
    journal.lock()
    return job, LiveTrace(journal, job / "prvstream", "job", settings)


def _mutate(path: Path, how: str, other: Path) -> None:
    if how == "delete":
        path.unlink()
    elif how == "truncate":  # in place: a hard link to it would be truncated too
        with path.open("r+b") as fh:
            fh.truncate(os.path.getsize(path) // 3)
    elif how == "replace":
        shutil.copyfile(other, path)  # same name, other content, in place


@settings(max_examples=6, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.permutations(range(4)), skew=st.sampled_from([0.0, 0.37, 60.0]),
       changes=st.lists(st.sampled_from(["keep", "delete", "truncate", "replace"]),
                        min_size=4, max_size=4))
def test_changing_exports_after_commit_never_changes_the_final_trace(
        tmp_path_factory: pytest.TempPathFactory, slices: list[Path], order: list[int],
        skew: float, changes: list[str]) -> None:
    tmp = tmp_path_factory.mktemp("case")
    job, trace = _live(tmp, skew)
    for i, how in zip(order, changes, strict=True):
        target = job / slices[i].name
        shutil.copyfile(slices[i], target)
        trace.append(target, report_identity(target))
        # changed at once: a later report arriving out of order compacts without it
        _mutate(target, how, slices[4])
    originals = tmp / "originals"
    originals.mkdir()
    for i in range(4):
        shutil.copyfile(slices[i], originals / slices[i].name)
    convert([str(originals)], tmp / "batch", trace.settings)
    trace.finalize()
    trace.close()
    validate(trace.prv, globally_sorted=True)
    for ext in OUTPUTS:
        assert trace.prv.with_suffix(ext).read_bytes() == (tmp / f"batch{ext}").read_bytes()


def test_real_exports_finalize_from_blocks_with_their_names_gone(tmp_path: Path) -> None:
    found = real_exports()
    if not found:
        pytest.skip("real exports not found (set PRVSTREAM_TEST_DATA)")
    job, trace = _live(tmp_path, 0.37)  # an origin off the host states' grid: cut again
    for src in reversed(found):
        target = job / src.name
        shutil.copyfile(src, target)
        trace.append(target, report_identity(target))
    convert([str(job)], tmp_path / "batch", trace.settings)
    for src in found:
        (job / src.name).unlink()
    assert BlockStore(trace.journal).complete
    trace.finalize()
    for ext in OUTPUTS:
        assert trace.prv.with_suffix(ext).read_bytes() == (tmp_path / f"batch{ext}").read_bytes()
    # and again after more reports: the finalized trace is itself a committed block
    trace.close()


def test_a_job_without_block_codes_finalizes_from_its_exports(tmp_path: Path,
                                                              slices: list[Path]) -> None:
    """A journal of an older prvstream (no codes kept) still finalizes, reading its exports
    once; from then on the job keeps codes."""
    job, trace = _live(tmp_path, 60.0)
    for src in slices[:2]:
        target = job / src.name
        shutil.copyfile(src, target)
        trace.append(target, report_identity(target))
    state = trace.journal.state
    state.block_format, state.codes_name, state.codes_records = 0, "", 0
    trace.journal.commit()
    convert([str(job)], tmp_path / "batch", trace.settings)
    trace.finalize()
    assert BlockStore(trace.journal).complete
    for ext in OUTPUTS:
        assert trace.prv.with_suffix(ext).read_bytes() == (tmp_path / f"batch{ext}").read_bytes()
    for src in slices[:2]:
        (job / src.name).unlink()
    trace.finalize()  # now from its blocks alone
    for ext in OUTPUTS:
        assert trace.prv.with_suffix(ext).read_bytes() == (tmp_path / f"batch{ext}").read_bytes()
    trace.close()


def test_a_finalize_killed_before_its_commit_is_undone_without_exports(
        tmp_path: Path, slices: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The canonical rewrite is renamed over the trace, then the process dies before the
    journal commit: recovery puts back the committed trace (kept as a hard link) instead of
    rebuilding it from exports, which are gone; finalize then equals convert."""
    job, trace = _live(tmp_path, 0.37)
    for src in slices[:3]:
        target = job / src.name
        shutil.copyfile(src, target)
        trace.append(target, report_identity(target))
    committed = trace.prv.read_bytes()
    convert([str(job)], tmp_path / "batch", trace.settings)
    for src in slices[:3]:
        (job / src.name).unlink()

    class Killed(BaseException):
        pass

    def die() -> None:
        raise Killed

    monkeypatch.setattr(trace, "_commit", die)
    with pytest.raises(Killed):
        trace.finalize()
    assert trace.prv.read_bytes() != committed  # the rewrite is in place, uncommitted
    trace.close()
    trace.journal.unlock()
    monkeypatch.undo()
    journal = JobJournal.open(trace.settings.state_dir, job)
    journal.lock()
    again = LiveTrace(journal, job / "prvstream", "job", trace.settings)
    again.recover()
    assert again.prv.read_bytes() == committed
    again.finalize()
    again.close()
    for ext in OUTPUTS:
        assert again.prv.with_suffix(ext).read_bytes() == (tmp_path / f"batch{ext}").read_bytes()


def test_a_header_growth_killed_before_its_commit_is_undone_without_exports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The header outgrows its capacity: the grown file is renamed over the trace, then the
    process dies before the journal commit. Recovery puts back the committed trace from its
    hard link (the exports are gone), and finalize equals convert of what was committed."""
    sources = write_job(tmp_path / "src", SynthSpec(ranks=40, hosts=40, steps=1))
    job = tmp_path / "job"
    job.mkdir()
    settings = load_settings(None, {"state_dir": str(tmp_path / "state"), "header_capacity": 256},
                             environ={})
    journal = JobJournal.open(settings.state_dir, job)
    journal.lock()
    trace = LiveTrace(journal, job / "prvstream", "job", settings)
    grown: list[bool] = []
    real_grow = trace._grow_header

    def grow() -> None:
        real_grow()
        grown.append(True)

    class Killed(BaseException):
        pass

    real_commit = trace._commit

    def commit() -> None:
        if grown:
            raise Killed
        real_commit()

    def no_roll_back(snapshot: bytes) -> None:  # a kill -9 rolls nothing back
        pass

    monkeypatch.setattr(trace, "_grow_header", grow)
    monkeypatch.setattr(trace, "_commit", commit)
    monkeypatch.setattr(trace, "_roll_back", no_roll_back)
    committed_sources: list[Path] = []
    with pytest.raises(Killed):
        for src in sources:
            target = job / src.name
            shutil.copyfile(src, target)
            trace.append(target, report_identity(target))
            committed_sources.append(src)
    assert grown and committed_sources
    trace.close()
    journal.unlock()
    monkeypatch.undo()
    for src in sources:
        (job / src.name).unlink(missing_ok=True)
    journal = JobJournal.open(settings.state_dir, job)
    journal.lock()
    again = LiveTrace(journal, job / "prvstream", "job", settings)
    with capture_logs() as logs:
        again.recover()
    assert not [e for e in logs if e["event"] == "trace_replaced_uncommitted_rebuilding"]
    validate(again.prv)
    again.finalize()
    again.close()
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for src in committed_sources:
        shutil.copyfile(src, inputs / src.name)
    convert([str(inputs)], tmp_path / "batch", settings)
    for ext in OUTPUTS:
        assert again.prv.with_suffix(ext).read_bytes() == (tmp_path / f"batch{ext}").read_bytes()
