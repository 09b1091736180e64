"""Overlapping capture ranges of one process appended live on Dask workers: a block yields to
the committed reports that come first in canonical order when the worker converts it, as a
single-process append does. So the worker's block is committed as it is (before, its host
states overlapped the committed ones, broke the thread order and were converted again in the
coordinator), and the live trace read after every commit is the single-process daemon's byte
for byte, one host state at a time, and so is the finalized one."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from prvstream.daemon.config import load_settings
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.live.livetrace import LiveTrace
from prvstream.daemon.service.readiness import report_identity
from tests.daemon.overlap import early_kernel_parts, host_states, one_state_at_a_time

__all__: list[str] = []

_FILES = ("job.prv", "job.pcf", "job.row", "summary.json")


def _live(tmp: Path, name: str) -> tuple[Path, LiveTrace]:
    job = tmp / name
    job.mkdir()
    settings = load_settings(None, {"state_dir": str(tmp / f"{name}-state"),
                                    "skew_allowance": 0.37}, environ={})
    journal = JobJournal.open(settings.state_dir, job)
    journal.lock()
    return job, LiveTrace(journal, job / "prvstream", "job", settings)


def _read(job: Path) -> dict[str, bytes]:
    return {f: (job / "prvstream" / f).read_bytes() for f in _FILES}


def test_live_blocks_on_dask_yield_at_append_as_in_process(inproc: Any, tmp_path: Path) -> None:
    from prvstream.daemon.live.remote import RemoteAppender

    arrivals = early_kernel_parts(tmp_path / "parts")  # in canonical order
    one_job, one = _live(tmp_path, "one")
    expected = []
    for src in arrivals:
        target = one_job / src.name
        shutil.copyfile(src, target)
        assert not one.append(target, report_identity(target)).compacted
        expected.append(_read(one_job))
    dask_job, trace = _live(tmp_path, "dask")
    remote = RemoteAppender(trace, inproc)
    got = []
    try:
        targets = []
        for src in arrivals:
            target = dask_job / src.name
            shutil.copyfile(src, target)
            remote.submit(target)
            targets.append(target)
        with capture_logs() as logs:
            for target in targets:
                remote.commit(target, report_identity(target))
                got.append(_read(dask_job))
                one_state_at_a_time(host_states(trace.prv))
    finally:
        remote.close()
    appended = [e for e in logs if e["event"] == "report_appended"]
    assert [(e["report"], e.get("dask"), e["compacted"]) for e in appended] == [
        (p.name, True, False) for p in arrivals]
    for n, (a, b) in enumerate(zip(expected, got, strict=True)):
        for f in _FILES:
            assert a[f] == b[f], f"{f} after commit {n + 1}"
    for t in (one, trace):
        t.finalize()
        t.close()
    assert _read(one_job) == _read(dask_job)
