"""The readiness pool holds a flood back: a job has at most ``ahead`` files checked or ready
at once (the group its writer commits aside), the others wait as their path text and are
taken in the order found as the writer takes reports; each file is handed on once."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from prvstream.daemon.config import load_settings
from prvstream.daemon.service.checkers import ReadinessPool
from prvstream.daemon.service.jobs import Append, Job, Shared
from prvstream.daemon.service.readiness import Pace
from tests.daemon.service.test_readiness import make_export

AHEAD = 3


@pytest.mark.anyio
async def test_a_flood_is_held_back_and_taken_in_order(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    files = [make_export(job_dir / f"r{i:02}.sqlite", rows=2) for i in range(11)]
    settings = load_settings(None, {"state_dir": str(tmp_path / "state")}, environ={})
    changes: list[int] = []
    pool: ReadinessPool

    def changed() -> None:
        changes.append(1)
        pool.refill()

    shared = Shared(settings=settings, limiter=anyio.CapacityLimiter(1), once=True,
                    stopping=lambda: False, changed=changed, appended=lambda j, p: None,
                    fatal=lambda e: None, vanished=lambda j: None)
    job = Job(job_dir, tmp_path, "job", shared)
    pool = ReadinessPool(2, Pace(0.0, first_delay=0.01), changed, ahead=AHEAD)
    most = 0

    def busy() -> int:
        return job.checking + len(job.backlog) - job.committing

    for path in files:
        pool.add(job, path, tmp_path, nsys_rep=False)
    pool.add(job, files[5], tmp_path, nsys_rep=False)  # found again while held: once
    assert job.checking == AHEAD and job.held is not None and len(job.held) == 8
    assert len(job.waiting) == len(pool) == 11
    taken: list[Path] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(pool.run)
        with anyio.fail_after(30):
            while len(taken) < len(files):
                most = max(most, busy())
                if len(job.backlog) >= 2:  # a group of two: the next ones checked meanwhile
                    job.committing = 2
                    changed()
                    most = max(most, busy())
                    await anyio.sleep(0.02)
                    job.committing = 0
                    for _ in range(2):
                        item = job.backlog.popleft()
                        assert isinstance(item, Append)
                        taken.append(item.path)
                    changed()
                elif job.backlog and not job.waiting:
                    item = job.backlog.popleft()
                    assert isinstance(item, Append)
                    taken.append(item.path)
                await anyio.sleep(0.005)
        tg.cancel_scope.cancel()
    assert sorted(taken) == files  # each once (checkers may finish out of order)
    assert most <= AHEAD
    assert job.checking == 0 and job.held is None and not job.waiting and len(pool) == 0
