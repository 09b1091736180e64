"""Journal round trips, atomic commits, corrupt journals, and output ownership."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.live.journal import (
    JobJournal,
    ReportEntry,
    ThreadTime,
    journal_path,
)
from prvstream.daemon.live.outputdir import OutputDir
from prvstream.daemon.service.readiness import ReportIdentity
from prvstream.daemon.stream.numbering import Numbering, clean_label, cpu_key, gpu_key
from prvstream.sinks.errors import JournalCorrupt, OutputConflict
from prvstream.sinks.files import OWNED_MARKER

IDENT = ReportIdentity(device=1, inode=2, size=3, mtime_ns=4, head_sha256="ab" * 32)


def _filled(tmp_path: Path) -> JobJournal:
    job = tmp_path / "jobs" / "run 42"
    j = JobJournal.open(tmp_path / "state", job, root=tmp_path / "jobs")
    num = Numbering(j.state.numbering)
    a = num.task("node1", 100, "python", rank=0)
    b = num.task("node2", 100, "python")  # same pid on another host is another task
    assert (a, b) == (1, 2)
    assert num.thread(a, cpu_key(100), "python") == 1
    assert num.thread(a, gpu_key(0, 7), "CUDA-D0.S7") == 2
    assert num.value("kernel", "gemm") == 1
    assert num.value("kernel", "nccl") == 2
    j.add_report(ReportEntry(identity=IDENT, name="rank0.sqlite", path=str(job / "rank0.sqlite"),
                             block_start=4096, block_end=9000, records=77,
                             thread_last=[ThreadTime(1, 1, 123), ThreadTime(1, 2, 456)]))
    j.state.origin_wall_ns = 1_700_000_000_000_000_000
    j.state.skew_allowance_ns = 60_000_000_000
    j.state.prv_length = 9000
    j.state.summary_length = 321
    j.state.header_capacity = 4096
    j.state.outputs = [str(job / "prvstream" / "run 42.prv")]
    j.quarantine(job / "bad.sqlite", "not an SQLite database", IDENT)
    return j


def test_round_trip(tmp_path: Path) -> None:
    j = _filled(tmp_path)
    j.commit()
    again = JobJournal.load(j.path)
    assert again is not None
    assert again.state == j.state
    assert again.has_report(IDENT)
    assert again.is_quarantined(str(tmp_path / "jobs" / "run 42" / "bad.sqlite"), IDENT)
    assert not again.is_quarantined(str(tmp_path / "jobs" / "run 42" / "bad.sqlite"),
                                    ReportIdentity(1, 2, 4, 4, "00" * 32))
    # the numbering continues where it stopped
    num = Numbering(again.state.numbering)
    assert num.task("node2", 100) == 2
    assert num.task("node3", 1) == 3
    assert num.thread(1, gpu_key(0, 7), "x") == 2
    assert num.thread(1, gpu_key(0, 8), "CUDA-D0.S8") == 3
    assert num.value("kernel", "gemm") == 1
    assert num.value("kernel", "new") == 3
    assert again.state.numbering.nodes == ["node1", "node2", "node3"]


def test_open_reuses_the_same_file(tmp_path: Path) -> None:
    j = _filled(tmp_path)
    j.commit()
    again = JobJournal.open(tmp_path / "state", tmp_path / "jobs" / "run 42")
    assert again.path == j.path and list(again.reports) == list(j.reports)


def test_journal_name_is_readable_and_unique(tmp_path: Path) -> None:
    a = journal_path(tmp_path, "/scratch/u/run1/job 7")
    b = journal_path(tmp_path, "/scratch/v/run1/job 7")
    assert a != b
    assert a.name.startswith("run1_job_7-") and a.suffix == ".json"
    assert journal_path(tmp_path, "/").name.startswith("root-")


def test_commit_is_atomic(tmp_path: Path) -> None:
    """Only a complete journal is ever visible; no temporary file is left behind."""
    j = _filled(tmp_path)
    j.commit()
    first = j.path.read_bytes()
    inode = j.path.stat().st_ino
    j.state.prv_length = 12345
    j.commit()
    assert j.path.stat().st_ino != inode  # replaced, not rewritten in place
    assert j.path.read_bytes() != first
    # the journal and the one file of report entries and of ids it names
    assert sorted(p.name for p in j.path.parent.iterdir()) == sorted(
        [j.path.name, j.state.entries_name, j.state.ids_name])
    loaded = JobJournal.load(j.path)
    assert loaded is not None and loaded.state.prv_length == 12345


@pytest.mark.parametrize("content", [
    pytest.param(b"", id="empty"),
    pytest.param(b"{\"version\": 1, \"job_dir\": ", id="truncated"),
    pytest.param(b"\x00\xff garbage", id="garbage"),
    pytest.param(b"{\"version\": 1, \"job_dir\": \"/x\", \"bogus\": 1}", id="unknown-field"),
    pytest.param(b"{\"version\": 99, \"job_dir\": \"/x\"}", id="newer"),
])
def test_corrupt_journal_names_the_file(tmp_path: Path, content: bytes) -> None:
    path = journal_path(tmp_path, "/jobs/a")
    path.write_bytes(content)
    with pytest.raises(JournalCorrupt) as exc:
        JobJournal.load(path)
    assert str(path) in str(exc.value)
    assert "move" in str(exc.value)


def test_missing_journal_is_none(tmp_path: Path) -> None:
    assert JobJournal.load(tmp_path / "nope.json") is None


def test_lock_is_exclusive(tmp_path: Path) -> None:
    a = JobJournal.open(tmp_path, tmp_path / "job")
    b = JobJournal.open(tmp_path, tmp_path / "job")
    a.lock()
    try:
        with pytest.raises(OutputConflict, match="another prvstream"):
            b.lock()
    finally:
        a.unlock()
    b.lock()
    b.unlock()


@settings(max_examples=40, deadline=None)
@given(labels=st.lists(st.text(max_size=8), max_size=30),
       tasks=st.lists(st.tuples(st.sampled_from(["n1", "n2", "é"]), st.integers(0, 2**24)),
                      max_size=20))
def test_numbering_survives_commit(tmp_path_factory: pytest.TempPathFactory,
                                   labels: list[str], tasks: list[tuple[str, int]]) -> None:
    base = tmp_path_factory.mktemp("j")
    j = JobJournal.open(base, base / "job")
    num = Numbering(j.state.numbering)
    ids = {lab: num.value("g", lab) for lab in labels}
    tids = {(h, p): num.task(h, p) for h, p in tasks}
    # labels equal once cleaned of control characters (clean_label) share an id
    distinct = {clean_label(lab) for lab in labels}
    assert sorted(set(ids.values())) == list(range(1, len(distinct) + 1))
    j.commit()
    again = JobJournal.load(j.path)
    assert again is not None
    num2 = Numbering(again.state.numbering)
    assert {lab: num2.value("g", lab) for lab in labels} == ids
    assert {k: num2.task(*k) for k in tids} == tids


# ----------------------------------------------------------------------------------- outputs


def test_output_dir_claims_and_rewrites(tmp_path: Path) -> None:
    out = OutputDir(tmp_path / "job" / "prvstream").prepare()
    with out.open("t.prv", "ab") as fh:
        fh.write(b"#Paraver\n")
    out.replace("t.pcf", b"DEFAULT_OPTIONS\n")
    assert (out.path / OWNED_MARKER).read_text().split() == ["t.pcf", "t.prv"]
    # a new process trusts the sidecar
    again = OutputDir(out.path).prepare()
    with again.open("t.prv", "ab") as fh:
        fh.write(b"1:0\n")
    assert (out.path / "t.prv").read_bytes() == b"#Paraver\n1:0\n"
    assert again.replace("t.pcf", b"x") == out.path / "t.pcf"


def test_refuses_foreign_file(tmp_path: Path) -> None:
    (tmp_path / "trace.prv").write_text("user data")
    with pytest.raises(OutputConflict, match="not created by prvstream"):
        OutputDir(tmp_path).path_for("trace.prv")
    assert (tmp_path / "trace.prv").read_text() == "user data"
    # listed in the journal's outputs: ours
    assert OutputDir(tmp_path, owned=[str(tmp_path / "trace.prv")]).path_for("trace.prv")


def test_refuses_symlinks(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / "t.prv").symlink_to(victim)
    with pytest.raises(OutputConflict, match="symlink"):
        OutputDir(out, owned=["t.prv"]).open("t.prv")
    linked_dir = tmp_path / "linkdir"
    linked_dir.symlink_to(out)
    with pytest.raises(OutputConflict, match="symlink"):
        OutputDir(linked_dir).prepare()
    assert victim.read_text() == "keep"


def test_open_does_not_follow_a_symlink_planted_after_the_check(tmp_path: Path) -> None:
    out = OutputDir(tmp_path).prepare()
    out.path_for("t.prv")
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.symlink(victim, tmp_path / "t.prv")
    with pytest.raises(OutputConflict):
        out.open("t.prv")
    assert victim.read_text() == "keep"


def test_a_first_release_journal_with_extra_is_read(tmp_path: Path) -> None:
    """Journals written before the typed fields kept them in an ``extra`` dict."""
    path = tmp_path / "old.json"
    path.write_bytes(b'{"version": 1, "job_dir": "/x", "extra": {"end_time": 42, '
                     b'"prv_inode": 7}}')
    journal = JobJournal.load(path)
    assert journal is not None
    assert (journal.state.end_time, journal.state.prv_inode) == (42, 7)


def _entry(n: int, **extra: object) -> ReportEntry:
    return ReportEntry(identity=ReportIdentity(1, 100 + n, 3, 4, f"{n:02x}" * 32),
                       name=f"rank{n}.sqlite", path=f"/j/rank{n}.sqlite", block_start=n,
                       block_end=n + 1, records=10 * n, fingerprint=f"fp{n}", **extra)


def test_a_version_1_journal_with_inline_reports_is_moved_to_an_entries_file(
        tmp_path: Path) -> None:
    """Version 1 kept every report entry inside the journal: read once, they move to the
    entries file, and the next commit drops them from the journal."""
    j = _filled(tmp_path)
    j.add_report(_entry(5, hostile={"kernel end_before_start": 2}))
    j.commit()
    entries = list(j.reports)
    data = msgspec.json.decode(j.path.read_bytes())
    for key in ("entries_name", "entries_length", "entries_count", "records_total",
                "hostile"):
        del data[key]
    data["version"] = 1
    data["reports"] = msgspec.to_builtins(entries)
    for path in j.path.parent.glob("*.entries.*"):
        path.unlink()
    j.path.write_bytes(msgspec.json.encode(data))
    old = JobJournal.load(j.path)
    assert old is not None
    assert list(old.reports) == entries and old.has_report(IDENT)
    assert old.state.records_total == 77 + 50
    assert old.state.hostile == {"rank5.sqlite": {"kernel end_before_start": 2}}
    assert old.report_with("fp5") == entries[1]
    old.commit()
    assert b'"reports":[]' in old.path.read_bytes()
    again = JobJournal.load(old.path)
    assert again is not None and list(again.reports) == entries
    assert again.state.version == 2


def test_entries_written_but_not_committed_are_not_in_the_journal(tmp_path: Path) -> None:
    """A crash between appending the entries and replacing the journal: the journal's count
    wins, and the next commit writes over the bytes beyond it."""
    j = _filled(tmp_path)
    j.commit()
    j.add_report(_entry(2))
    j.add_report(_entry(3))
    j.reports.write()  # on disk, fsynced, not committed
    again = JobJournal.load(j.path)
    assert again is not None
    assert [r.name for r in again.reports] == ["rank0.sqlite"]
    assert not again.has_report(_entry(2).identity)
    again.add_report(_entry(4))
    again.commit()
    last = JobJournal.load(j.path)
    assert last is not None
    assert [r.name for r in last.reports] == ["rank0.sqlite", "rank4.sqlite"]
    assert last.reports[1] == again.reports[1] and last.reports[-1].records == 40


def test_restore_forgets_the_entries_added_since(tmp_path: Path) -> None:
    j = _filled(tmp_path)
    j.commit()
    snapshot = j.snapshot()
    j.add_report(_entry(2))
    j.reports.write()
    j.add_report(_entry(3))
    j.restore(snapshot)
    assert len(j.reports) == 1 and j.state.records_total == 77
    assert not j.has_report(_entry(2).identity) and j.report_with("fp3") is None
    j.add_report(_entry(6))
    j.commit()
    again = JobJournal.load(j.path)
    assert again is not None
    assert [r.name for r in again.reports] == ["rank0.sqlite", "rank6.sqlite"]
    assert again.report_with("fp6") == _entry(6, committed_ns=again.reports[1].committed_ns)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=12))
def test_entries_survive_any_sequence_of_commits_and_rewrites(
        tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[int, bool]]) -> None:
    """Appends in commits of any size, with whole rewrites (a grown header) between them:
    what is loaded is what was committed, in order."""
    j = JobJournal.open(tmp_path_factory.mktemp("log"), "/jobs/x")
    expect: list[ReportEntry] = []
    n = 0
    for adds, rewrite in steps:
        for _ in range(adds):
            n += 1
            j.add_report(_entry(n, committed_ns=1))
            expect.append(_entry(n, committed_ns=1))
        if rewrite:
            j.reports.replace_all(lambda e: setattr(e, "block_start", e.block_start + 7))
            for e in expect:
                e.block_start += 7
        j.commit()
        again = JobJournal.load(j.path)
        assert again is not None
        assert list(again.reports) == expect
        assert [again.reports[i] for i in range(len(expect))] == expect
        assert len(list(j.path.parent.glob("*.entries.*"))) <= 1


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5), st.integers(0, 3)),
                         max_size=6), min_size=1, max_size=8))
def test_ids_survive_any_sequence_of_commits(tmp_path_factory: pytest.TempPathFactory,
                                             commits: list[list[tuple[int, int, int]]]) -> None:
    """Tasks, threads of older tasks and labels added between commits (each commit appends
    only what it added): what is loaded is the numbering committed, and it goes on alike."""
    j = JobJournal.open(tmp_path_factory.mktemp("ids"), "/jobs/x")
    num = Numbering(j.state.numbering)
    for adds in commits:
        for host, pid, tid in adds:
            task = num.task(f"node{host}", pid, "p")
            num.thread(task, cpu_key(tid), f"t{tid}")
            num.value("kernel", f"k{pid}{tid}")
        j.commit()
        again = JobJournal.load(j.path)
        assert again is not None
        assert again.state.numbering == j.state.numbering
        assert len(list(j.path.parent.glob("*.ids.*"))) == 1
    assert b'"tasks":[]' in j.path.read_bytes()  # not in the journal file itself


def test_a_journal_replaced_while_it_is_read_is_read_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``prvstream finalize`` reads a journal before taking the job's lock: a commit of the
    running daemon may drop the entries file the header it read names."""
    j = _filled(tmp_path)
    j.commit()
    old = j.path.read_bytes()
    j.reports.replace_all(lambda entry: None)  # a rewrite: a new entries file
    j.commit()  # the one ``old`` names is dropped
    real = Path.read_bytes
    reads: list[Path] = []

    def stale_first(self: Path) -> bytes:
        reads.append(self)
        return old if self == j.path and len(reads) == 1 else real(self)

    monkeypatch.setattr(Path, "read_bytes", stale_first)
    again = JobJournal.load(j.path)
    assert again is not None and list(again.reports) == list(j.reports)
    assert reads.count(j.path) >= 2
    monkeypatch.setattr(Path, "read_bytes", lambda self: old)  # never replaced: corrupt
    with pytest.raises(JournalCorrupt):
        JobJournal.load(j.path)
