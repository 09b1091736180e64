"""Group commit: reports appended as one journal commit give the bytes of one-by-one appends,
a report that needs a rewrite ends the group, and a failure commits nothing of it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from prvstream.daemon.config import load_settings
from prvstream.daemon.live.group import append_group
from prvstream.daemon.live.inputs import InputChanged
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.live.livetrace import LiveTrace
from prvstream.daemon.service.readiness import report_identity
from prvstream.daemon.stream.batch import convert
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from prvstream.sinks.summary import load_summary
from tests.prv_check import validate

_FILES = ("job.prv", "job.pcf", "job.row")


def _job(tmp_path: Path, name: str, **overrides: object) -> tuple[Path, LiveTrace]:
    job = tmp_path / name
    job.mkdir(parents=True)
    settings = load_settings(None, {"state_dir": str(tmp_path / f"{name}-state"),
                                    **overrides}, environ={})
    journal = JobJournal.open(settings.state_dir, job)
    journal.lock()
    return job, LiveTrace(journal, job / "prvstream", "job", settings)


def _placed(job: Path, sources: list[Path]) -> list[tuple[Path, object]]:
    out = []
    for source in sources:
        target = job / source.name
        shutil.copy(source, target)
        out.append((target, report_identity(target)))
    return out


def _files(job: Path) -> dict[str, bytes]:
    return {name: (job / "prvstream" / name).read_bytes() for name in _FILES}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_job(tmp_path_factory.mktemp("group_src"), SynthSpec(ranks=5, steps=2,
                                                                     hosts=2))


def test_group_gives_the_bytes_of_one_by_one_appends(tmp_path: Path,
                                                     sources: list[Path]) -> None:
    one_job, one = _job(tmp_path, "one")
    for path, identity in _placed(one_job, sources):
        one.append(path, identity)  # type: ignore[arg-type]
    group_job, group = _job(tmp_path, "group")
    items = _placed(group_job, sources)
    with capture_logs() as logs:
        first = append_group(group, items[:1])  # type: ignore[arg-type]
        rest = append_group(group, items[1:])  # type: ignore[arg-type]
    assert [r.report for r in first + rest] == [p.name for p in sources]
    commits = [e for e in logs if e["event"] == "group_committed"]
    assert [e["reports"] for e in commits] == [len(sources) - 1]
    assert _files(group_job) == _files(one_job)
    validate(group.prv)
    journal = JobJournal.load(group.journal.path)
    assert journal is not None
    assert [r.name for r in journal.reports] == [p.name for p in sources]
    assert journal.state.prv_length == group.prv.stat().st_size
    # the summaries hold the same state (the history has one update per commit)
    state_one, _ = load_summary(one.summary_json)
    state_group, _ = load_summary(group.summary_json)
    assert state_group == state_one
    group.finalize()
    convert([str(group_job)], tmp_path / "batch", group.settings)
    for name in _FILES:
        assert (group_job / "prvstream" / name).read_bytes() == \
            (tmp_path / f"batch{name[3:]}").read_bytes(), name


def test_a_report_needing_a_rewrite_ends_the_group(tmp_path: Path) -> None:
    src = write_job(tmp_path / "src", SynthSpec(ranks=2, slices=2, steps=1))
    by_name = {p.name: p for p in src}
    order = ["rank0000.slice01.sqlite", "rank0001.slice01.sqlite",
             "rank0000.slice00.sqlite", "rank0001.slice00.sqlite"]
    job, trace = _job(tmp_path, "job", skew_allowance=0.0)
    items = _placed(job, [by_name[n] for n in order])
    done = append_group(trace, items)  # type: ignore[arg-type]
    assert [r.report for r in done] == order[:2]  # the third is before the origin
    again = append_group(trace, items[2:])  # type: ignore[arg-type]
    assert again[0].compacted  # appended alone, with the rewrite
    rest = append_group(trace, items[2 + len(again):])  # type: ignore[arg-type]
    assert len(done) + len(again) + len(rest) == 4
    trace.finalize()
    convert([str(job)], tmp_path / "batch", trace.settings)
    for name in _FILES:
        assert (job / "prvstream" / name).read_bytes() == \
            (tmp_path / f"batch{name[3:]}").read_bytes(), name


def test_a_file_rewritten_before_the_commit_rolls_the_group_back(
        tmp_path: Path, sources: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    job, trace = _job(tmp_path, "job")
    items = _placed(job, sources)
    append_group(trace, items[:1])  # type: ignore[arg-type]
    before = _files(job) | {"journal": trace.journal.path.read_bytes()}
    changed = items[2][0]
    real = LiveTrace._publish_header

    def rewrite_then_publish(self: LiveTrace) -> None:  # the group's commit is next
        data = changed.read_bytes()
        changed.write_bytes(data)  # same bytes, rewritten in place: a new mtime
        real(self)

    monkeypatch.setattr(LiveTrace, "_publish_header", rewrite_then_publish)
    with pytest.raises(InputChanged):
        append_group(trace, items[1:])  # type: ignore[arg-type]
    monkeypatch.undo()
    assert _files(job) | {"journal": trace.journal.path.read_bytes()} == before
    assert len(trace.journal.reports) == 1
    # read again as a new report, it lands (with the others)
    fresh = [(p, report_identity(p)) for p, _ in items[1:]]
    assert len(append_group(trace, fresh)) == len(sources) - 1  # type: ignore[arg-type]
    validate(trace.prv)


def test_a_file_rewritten_during_a_single_append_is_not_committed(
        tmp_path: Path, sources: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    job, trace = _job(tmp_path, "job")
    (first, first_id), (second, second_id) = _placed(job, sources[:2])
    trace.append(first, first_id)  # type: ignore[arg-type]
    before = _files(job) | {"journal": trace.journal.path.read_bytes()}
    real = LiveTrace._remember_prv

    def truncate_then_remember(self: LiveTrace) -> None:  # its block is read and written
        with second.open("r+b") as fh:
            fh.truncate(second.stat().st_size // 2)  # half of it: never committed
        real(self)

    monkeypatch.setattr(LiveTrace, "_remember_prv", truncate_then_remember)
    with pytest.raises(InputChanged):
        trace.append(second, second_id)  # type: ignore[arg-type]
    monkeypatch.undo()
    assert _files(job) | {"journal": trace.journal.path.read_bytes()} == before
    assert [r.name for r in trace.journal.reports] == [first.name]
    shutil.copy(sources[1], second)  # whole again: read anew, it lands
    trace.append(second, report_identity(second))
    validate(trace.prv)
