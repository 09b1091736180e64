"""Committed means kept, with the outputs on another file system than the exports (``--out``):
no export is linked or copied, and exports deleted, truncated in place or rewritten after their
commit still end up in the finalized trace exactly as ``prvstream convert`` of the originals
(real daemon processes)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.daemon.daemon_proc import DaemonProcess, place_atomically, run_cli, wait_for
from tests.faults.helpers import LAND
from tests.prv_check import validate

Start = Callable[..., DaemonProcess]
OUTPUTS = (".prv", ".pcf", ".row")


@pytest.fixture
def other_fs(tmp_path: Path) -> Iterator[Path]:
    """A folder on another file system than ``tmp_path`` (``/dev/shm``, a tmpfs)."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        pytest.skip("/dev/shm is not a writable folder here: no second file system to test")
    if os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("/dev/shm is on the same file system as the test's folder here")
    folder = Path(tempfile.mkdtemp(prefix="prvstream-out-", dir=shm))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _status(out_job: Path) -> dict[str, object]:
    try:
        found: dict[str, object] = json.loads((out_job / "status.json").read_bytes())
    except FileNotFoundError:
        return {}
    return found


def test_out_on_another_file_system_keeps_committed_reports(
        tmp_path: Path, other_fs: Path, synth_sources: list[Path], start_daemon: Start) -> None:
    root = tmp_path / "root"
    job = root / "job"
    job.mkdir(parents=True)
    out_job = other_fs / "job"
    daemon = start_daemon(root, extra=("--out", str(other_fs)))
    for i, src in enumerate(synth_sources[:3]):
        place_atomically(src, job / src.name)
        wait_for(lambda n=i + 1: _status(out_job).get("reports") == n, LAND,
                 f"{i + 1} report(s)", daemon)
    (job / synth_sources[0].name).unlink()  # deleted after commit
    with (job / synth_sources[1].name).open("r+b") as fh:  # truncated in place
        fh.truncate(4096)
    with (job / synth_sources[2].name).open("r+b") as fh:  # rewritten in place: a new report
        fh.seek(0)
        fh.write(synth_sources[3].read_bytes())
        fh.truncate()
    wait_for(lambda: _status(out_job).get("reports") == 4, LAND, "the new content", daemon)
    (job / "prvstream.done").touch()
    wait_for(lambda: bool(_status(out_job).get("finalized")), LAND, "finalized", daemon)
    assert daemon.terminate() == 0
    assert not list(other_fs.rglob(".prvstream-kept")), "nothing is kept besides the trace"
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for src in synth_sources[:4]:  # the three committed ones and the new content
        shutil.copyfile(src, inputs / src.name)
    done = run_cli("convert", str(inputs), "-o", str(tmp_path / "conv" / "job"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    prv = out_job / "job.prv"
    validate(prv, globally_sorted=True)
    for ext in OUTPUTS:
        assert prv.with_suffix(ext).read_bytes() == \
            (tmp_path / "conv" / f"job{ext}").read_bytes(), ext
