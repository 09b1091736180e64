"""Opening safely: files swapped after discovery for FIFOs, devices, sockets or links out of
the root are refused with a reason, never read, and never block the service (real daemons)."""

from __future__ import annotations

import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from prvstream.daemon.live.inputs import InputRefused, open_input
from prvstream.daemon.nsys.export import open_export
from prvstream.sinks.errors import NotAnExport
from tests.daemon.daemon_proc import (
    DaemonProcess,
    job_status,
    load_journal,
    place_atomically,
    wait_for,
)
from tests.faults.helpers import LAND, assert_landed, live_trace, wait_reports
from tests.prv_check import validate

Start = Callable[..., DaemonProcess]


def _half(src: Path, dest: Path) -> Path:
    dest.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    return dest


def _set_aside(job: Path) -> dict[str, str]:
    return {q["path"]: q["reason"] for q in job_status(job).get("quarantined", [])}


def _only_real_ones_landed_then_stop(daemon: DaemonProcess, state: Path,
                                     *jobs: tuple[Path, str]) -> None:
    """Each job holds just its one real export, once (nothing swapped was read), with a
    valid trace; the service is alive and stops within 10 s of SIGTERM."""
    for job, name in jobs:
        journal = load_journal(state, job)
        assert journal is not None
        assert [r.name for r in journal.reports] == [name]
        validate(live_trace(job))
        if not journal.state.quarantined:  # the other job: nothing set aside either
            assert_landed(state, job, [name])
    assert daemon.alive()
    started = time.monotonic()
    assert daemon.terminate(timeout=10.0) == 0
    assert time.monotonic() - started < 10.0


def test_exports_swapped_for_fifos_never_block_the_service(
        tmp_path: Path, synth_sources: list[Path], start_daemon: Start) -> None:
    root = tmp_path / "root"
    a, b = root / "a", root / "b"
    a.mkdir(parents=True)
    b.mkdir()
    place_atomically(synth_sources[0], a / synth_sources[0].name)
    halves = [_half(synth_sources[1], a / f"rank{1000 + i}.sqlite") for i in range(45)]
    daemon = start_daemon(root, settle=2.0)  # long enough to swap them while they settle
    wait_for(lambda: bool(daemon.named("job_opened")), LAND, "discovery", daemon)
    time.sleep(0.5)
    for path in halves:  # discovered and waiting to settle: now swapped for FIFOs
        path.unlink()
        os.mkfifo(path)
    place_atomically(synth_sources[2], b / synth_sources[2].name)
    wait_reports(daemon, b, 1)  # 45 FIFOs starve nothing
    wait_reports(daemon, a, 1)
    wait_for(lambda: len(_set_aside(a)) == len(halves), LAND + 30, "every FIFO set aside",
             daemon)
    assert all("FIFO" in reason for reason in _set_aside(a).values()), _set_aside(a)
    _only_real_ones_landed_then_stop(daemon, tmp_path / "state", (a, synth_sources[0].name),
                                     (b, synth_sources[2].name))


def test_job_dir_swapped_for_a_link_out_of_the_root_is_not_read(
        tmp_path: Path, synth_sources: list[Path], start_daemon: Start) -> None:
    root = tmp_path / "root"
    a = root / "a"
    a.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    name = synth_sources[0].name
    place_atomically(synth_sources[0], outside / name)  # complete, but not in the root
    _half(synth_sources[0], a / name)
    daemon = start_daemon(root, settle=2.0)  # long enough to swap it while it settles
    time.sleep(0.5)  # discovered, waiting for it to settle
    os.rename(a, root / ".a.old")
    a.symlink_to(outside, target_is_directory=True)
    (root / "b").mkdir()
    place_atomically(synth_sources[1], root / "b" / synth_sources[1].name)
    wait_reports(daemon, root / "b", 1)
    wait_for(lambda: bool(daemon.named("input_refused")), LAND, "the refusal", daemon)
    refused = daemon.named("input_refused")
    assert refused and "outside" in refused[0]["reason"], daemon.tail()
    assert not daemon.named("report_appended", report=name), "the outside file was appended"
    assert daemon.alive()
    assert_landed(tmp_path / "state", root / "b", [synth_sources[1].name])
    assert daemon.terminate() == 0


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "symlink"])
def test_open_input_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "rank0.sqlite"
    sock: socket.socket | None = None
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    elif kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("creating a device node is not permitted here")
    else:
        (tmp_path / "real.sqlite").write_bytes(b"x")
        path.symlink_to(tmp_path / "real.sqlite")
    started = time.monotonic()
    with pytest.raises(InputRefused) as caught, open_input(path, tmp_path):
        pass
    if sock is not None:
        sock.close()
    assert time.monotonic() - started < 1.0
    assert str(path) in str(caught.value)


def test_open_input_refuses_a_path_leaving_the_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    root.mkdir()
    (outside / "rank0.sqlite").write_bytes(b"x")
    (root / "job").symlink_to(outside, target_is_directory=True)
    with pytest.raises(InputRefused, match="outside"), \
            open_input(root / "job" / "rank0.sqlite", root):
        pass
    with open_input(outside / "rank0.sqlite", tmp_path) as (_, st):
        assert stat.S_ISREG(st.st_mode)


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_an_export_swapped_after_its_check_is_refused_without_blocking(
        tmp_path: Path, kind: str) -> None:
    """Conversion opens an export by name after the checks: a FIFO put there in between
    (whose plain open waits for a writer for ever) is refused at once, naming what it is."""
    path = tmp_path / "rank0.sqlite"
    sock: socket.socket | None = None
    if kind == "fifo":
        os.mkfifo(path)
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    caught: list[BaseException] = []

    def attempt() -> None:
        try:
            open_export(path)
        except BaseException as exc:  # handed to the test thread
            caught.append(exc)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(5.0)
    if sock is not None:
        sock.close()
    assert not worker.is_alive(), f"opening a {kind} blocked"
    assert len(caught) == 1 and isinstance(caught[0], NotAnExport), caught
    assert str(path) in str(caught[0])


def test_exports_swapped_for_devices_sockets_and_links_after_discovery(
        tmp_path: Path, synth_sources: list[Path], start_daemon: Start) -> None:
    """Discovered exports replaced, while they settle, by a character device, a socket and a
    symlink to a complete export of the same job: each set aside naming what it is, none
    read, the job's real export and the other job land once, SIGTERM ends it within 10 s."""
    root = tmp_path / "root"
    a, b = root / "a", root / "b"
    a.mkdir(parents=True)
    b.mkdir()
    real = a / synth_sources[0].name
    place_atomically(synth_sources[0], real)
    swapped = {what: _half(synth_sources[1], a / f"rank{1000 + i}.sqlite")
               for i, what in enumerate(("character device", "socket", "symlink"))}
    daemon = start_daemon(root, settle=2.0)  # long enough to swap them while they settle
    wait_for(lambda: bool(daemon.named("job_opened")), LAND, "discovery", daemon)
    time.sleep(0.5)
    sock = socket.socket(socket.AF_UNIX)
    for what, path in list(swapped.items()):
        path.unlink()
        if what == "character device":
            try:
                os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null
            except PermissionError:
                del swapped[what]  # creating a device node is not permitted here
        elif what == "socket":
            sock.bind(str(path))
        else:
            path.symlink_to(real)
    place_atomically(synth_sources[2], b / synth_sources[2].name)
    wait_reports(daemon, b, 1)
    wait_for(lambda: len(_set_aside(a)) == len(swapped), LAND + 30, "every swap set aside",
             daemon)
    sock.close()
    reasons = _set_aside(a)
    for what, path in swapped.items():
        assert what in reasons[str(path)], reasons
    _only_real_ones_landed_then_stop(daemon, tmp_path / "state", (a, real.name),
                                     (b, synth_sources[2].name))
