"""``prvstream doctor`` through a real process: a tmpfs root, a read-only output directory, and
network file systems read from a mountinfo text."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from prvstream.daemon.cli.doctor import mount_of, parse_mountinfo, run_checks
from prvstream.daemon.config import load_settings
from tests.daemon.daemon_proc import _clean_env

Mounter = Callable[..., Path]


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Mounter]:
    """Factory: ``tmpfs(name, ro=False)`` mounts a tmpfs at tmp_path/name (root only);
    skips, saying why, where mounting is not permitted. Unmounted at teardown."""
    mounted: list[Path] = []

    def mount(name: str, ro: bool = False) -> Path:
        target = tmp_path / name
        target.mkdir()
        opts = "ro,size=16m" if ro else "size=4g"  # tmpfs takes memory only when used
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(target)],
                              capture_output=True, text=True, timeout=30, check=False)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): "
                        f"{proc.stderr.strip() or proc.returncode}")
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", str(target)], capture_output=True, timeout=30, check=False)


def _doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "prvstream.daemon", "doctor", *args],
                          env=_clean_env(), capture_output=True, text=True, timeout=120,
                          check=False)


def _line(out: str, status: str, name: str) -> str:
    found = [ln for ln in out.splitlines() if ln.split()[:2] == [status, *name.split()[:1]]
             and ln[2:].startswith(f"{status:<5} {name}")]
    assert found, f"no '{status} {name}' line in:\n{out}"
    return found[0]


def test_tmpfs_root_is_local_and_writable(tmp_path: Path, tmpfs: Mounter) -> None:
    root = tmpfs("root")
    (root / "job1" / "sub").mkdir(parents=True)
    proc = _doctor(str(root), "--state", str(tmp_path / "state"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == "" and "Traceback" not in proc.stdout
    assert f"{root} is on tmpfs ({root}): local" in _line(proc.stdout, "ok", "file system")
    assert "3 directories to watch under 1 root(s)" in _line(proc.stdout, "ok", "inotify")
    assert f"{root} is writable" in _line(proc.stdout, "ok", "outputs")
    assert "GiB free" in _line(proc.stdout, "ok", "disk outputs")
    assert proc.stdout.splitlines()[-1].startswith("prvstream doctor: ")
    assert proc.stdout.splitlines()[-1].endswith(" 0 failed")


def test_read_only_output_fails_with_the_fix(tmp_path: Path, tmpfs: Mounter) -> None:
    root = tmp_path / "root"
    root.mkdir()
    out = tmpfs("out", ro=True)
    proc = _doctor(str(root), "--out", str(out), "--state", str(tmp_path / "state"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = _line(proc.stdout, "fail", "outputs")
    assert f"{out} is not writable: Read-only file system" in line
    after = proc.stdout.splitlines()[proc.stdout.splitlines().index(line) + 1]
    assert after.strip().startswith("fix: make") and "--out DIR" in after
    assert proc.stdout.splitlines()[-1].endswith(" 1 failed")
    assert "Traceback" not in proc.stdout + proc.stderr


def test_missing_root_fails() -> None:
    proc = _doctor("/nonexistent/prvstream-root")
    assert proc.returncode == 1
    assert "/nonexistent/prvstream-root is not a directory" in _line(proc.stdout, "fail", "root")


MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /scratch rw,relatime shared:20 - lustre 10.0.0.1@o2ib:/fs rw,flock
41 22 0:36 / /home rw,relatime shared:21 - nfs4 nas:/export/home rw,vers=4.2
42 41 0:37 / /home/alice/fast\\040disk rw - xfs /dev/nvme0n1 rw
"""


@pytest.mark.parametrize(
    ("path", "fstype"),
    [
        pytest.param("/scratch/profiles/job", "lustre", id="lustre"),
        pytest.param("/home/bob", "nfs4", id="nfs4"),
        pytest.param("/home/alice/fast disk/x", "xfs", id="local-inside-network"),
        pytest.param("/var/tmp", "ext4", id="root-fs"),
    ],
)
def test_mount_of_picks_the_innermost_mount(path: str, fstype: str) -> None:
    mount = mount_of(Path(path), parse_mountinfo(MOUNTINFO))
    assert mount is not None and mount.fstype == fstype


def test_network_root_needs_poll(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    text = MOUNTINFO + f"50 22 0:40 / {root} rw - nfs4 server:/x rw\n"
    settings = load_settings(None, {"state_dir": str(tmp_path / "state")}, environ={})
    (net,) = [c for c in run_checks([root], settings, text) if c.name == "file system"]
    assert net.status == "warn" and "network file system" in net.detail
    assert "--poll" in net.fix
    polled = load_settings(None, {"state_dir": str(tmp_path / "state"), "poll": 10},
                           environ={})
    (net,) = [c for c in run_checks([root], polled, text) if c.name == "file system"]
    assert net.status == "ok" and "polled every 10 s" in net.detail
