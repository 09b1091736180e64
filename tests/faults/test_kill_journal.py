"""kill -9 inside a journal commit (report entries appended but the journal not yet naming
them, or named but older entry files not yet dropped, or a rewrite's new entry file not yet
adopted): the restarted job holds every report exactly once, and its trace is byte-identical
to an uninterrupted run's."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from prvstream.daemon.config import load_settings
from prvstream.daemon.live.group import append_group
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.live.livetrace import LiveTrace
from prvstream.daemon.service.readiness import report_identity
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from tests.prv_check import validate

_FILES = ("job.prv", "job.pcf", "job.row", "summary.json")

#: the child appends the first report alone, then the rest as one group, and kills itself
#: with SIGKILL at the named point of the group's journal commit
_CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from prvstream.daemon.config import load_settings
    from prvstream.daemon.live import reportlog
    from prvstream.daemon.live.group import append_group
    from prvstream.daemon.live.journal import JobJournal
    from prvstream.daemon.live.livetrace import LiveTrace
    from prvstream.daemon.service.readiness import report_identity

    job, state, point = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    settings = load_settings(None, {"state_dir": state, "header_capacity": 256}, environ={})
    journal = JobJournal.open(settings.state_dir, job)
    journal.lock()
    trace = LiveTrace(journal, job / "prvstream", "job", settings)
    items = [(p, report_identity(p)) for p in sorted(job.glob("*.sqlite"))]
    trace.append(*items[0])

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    if point == "entries_written":  # entries appended and fsynced, journal not replaced
        real_write = reportlog.ReportLog.write
        def write_then_die(self):
            real_write(self)
            if len(self) > 1:
                die()
        reportlog.ReportLog.write = write_then_die
    elif point == "ids_written":  # entries and the new ids fsynced, journal not replaced
        from prvstream.daemon.live import idslog
        real_ids = idslog.IdsLog.write
        def ids_then_die(self, state):
            real_ids(self, state)
            if len(state.tasks) > 1:
                die()
        idslog.IdsLog.write = ids_then_die
    elif point == "journal_replaced":  # journal names the rewritten entries, old file kept
        real_drop = reportlog.ReportLog.drop_others
        def drop_or_die(self):
            if len(list(self.folder.glob(self.stem + ".entries.*"))) > 1:
                die()
            real_drop(self)
        reportlog.ReportLog.drop_others = drop_or_die
    elif point == "rewritten":  # the header outgrew its capacity: every entry rewritten
        real = reportlog.ReportLog.replace_all
        def replace_then_die(self, change):
            real(self, change)
            die()
        reportlog.ReportLog.replace_all = replace_then_die
    append_group(trace, items[1:], max_seconds=1e9)  # one group, however slow the machine
    sys.exit(3)  # the kill point was never reached
""")


def _open(job: Path, state: Path) -> LiveTrace:
    settings = load_settings(None, {"state_dir": str(state), "header_capacity": 256},
                             environ={})
    journal = JobJournal.open(settings.state_dir, job)
    journal.lock()
    return LiveTrace(journal, job / "prvstream", "job", settings)


def _place(job: Path, sources: list[Path]) -> list[Path]:
    job.mkdir(parents=True)
    for source in sources:
        shutil.copy(source, job / source.name)
    return sorted(job.glob("*.sqlite"))


def _finish(job: Path, state: Path) -> dict[str, bytes]:
    """Reopen (recover), append what is missing, finalize; the outputs."""
    trace = _open(job, state)
    trace.recover()
    for path in sorted(job.glob("*.sqlite")):
        identity = report_identity(path)
        if not trace.journal.has_report(identity):
            trace.append(path, identity)
    validate(trace.prv)
    names = sorted(r.name for r in trace.journal.reports)
    assert names == sorted(p.name for p in job.glob("*.sqlite")), names
    trace.finalize()
    trace.close()
    trace.journal.unlock()
    return {name: (job / "prvstream" / name).read_bytes() for name in _FILES}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_job(tmp_path_factory.mktemp("kill_journal_src"),
                     SynthSpec(ranks=32, steps=1, hosts=32, layers=1))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, sources: list[Path]
                  ) -> dict[str, bytes]:
    base = tmp_path_factory.mktemp("kill_journal_ref")
    job = base / "job"
    items = [(p, report_identity(p)) for p in _place(job, sources)]
    trace = _open(job, base / "state")
    trace.append(*items[0])
    append_group(trace, items[1:], max_seconds=1e9)
    trace.close()
    trace.journal.unlock()
    return _finish(job, base / "state")


@pytest.mark.parametrize("point", ["entries_written", "ids_written", "journal_replaced",
                                   "rewritten"])
def test_kill9_inside_a_journal_commit(point: str, tmp_path: Path, sources: list[Path],
                                       uninterrupted: dict[str, bytes]) -> None:
    job = tmp_path / "job"
    state = tmp_path / "state"
    _place(job, sources)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(job), str(state), point],
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stderr[-2000:])
    journal = JobJournal.load(next(state.glob("*.json")))
    assert journal is not None
    committed = len(journal.reports)
    entry_files = sorted(p.name for p in state.glob("*.entries.*"))
    if point in ("entries_written", "ids_written"):  # on disk but not committed
        written = sum((state / name).stat().st_size for name in entry_files)
        assert committed == 1 and written > journal.state.entries_length, entry_files
    elif point == "journal_replaced":  # committed; the first commit's file not yet dropped
        assert committed == len(sources) and len(entry_files) == 2, entry_files
    else:  # a rewritten file the journal does not name yet
        assert committed == 1 and len(entry_files) == 2, entry_files
    assert _finish(job, state) == uninterrupted
    final = JobJournal.load(next(state.glob("*.json")))
    assert final is not None
    assert [p.name for p in state.glob("*.entries.*")] == [final.state.entries_name]
