"""``prvstream doctor``: check, in one screen, what the daemon needs on this machine.

Each check prints ok, warn or fail with the fix: inotify limits against the directories to
watch, network file systems under a root (inotify misses other nodes' writes: ``--poll``),
write access and free disk for outputs and state, ``nsys`` for ``.nsys-rep`` reports, and
whether the compiled extensions load. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from prvstream.daemon import runtime
from prvstream.daemon.config import Settings
from prvstream.sinks.logger import get_logger

__all__ = ["Check", "Mount", "mount_of", "parse_mountinfo", "run", "run_checks"]

log = get_logger(__name__)

Status = Literal["ok", "warn", "fail"]

#: file systems whose changes made on other machines raise no inotify event
NETWORK_FS = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "smbfs", "ceph", "cephfs",
    "glusterfs", "fuse.glusterfs", "fuse.sshfs", "fuse.beegfs", "fuse.ceph", "9p", "panfs",
    "afs", "ocfs2", "gfs2", "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs", "wekafs",
})
#: directories counted before giving up (the count is then a lower bound)
_MAX_DIRS = 1_000_000
_MIB = 1 << 20
#: free space below which outputs or journals are in danger, and where a warning starts
_FAIL_FREE = 256 * _MIB
_WARN_FREE = 2048 * _MIB


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, the outcome, and the fix when not ok."""

    status: Status
    name: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        fix = f"\n        fix: {self.fix}" if self.fix and self.status != "ok" else ""
        return f"  {self.status:<5} {self.name:<12} {self.detail}{fix}"


@dataclass(frozen=True)
class Mount:
    """One line of /proc/self/mountinfo: where, what file system, with which options."""

    point: str
    fstype: str
    source: str
    options: frozenset[str]


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo octal."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a /proc/<pid>/mountinfo text (proc(5) format)."""
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if "-" not in parts:
            continue
        sep = parts.index("-")
        if sep < 6 or len(parts) < sep + 3:
            continue
        opts = frozenset(parts[5].split(",")) | frozenset(parts[sep + 3].split(",")
                                                          if len(parts) > sep + 3 else ())
        mounts.append(Mount(point=_unescape(parts[4]), fstype=parts[sep + 1],
                            source=_unescape(parts[sep + 2]), options=opts))
    return mounts


def mount_of(path: Path, mounts: Iterable[Mount]) -> Mount | None:
    """The mount ``path`` lives on: the last-mounted one with the longest matching point."""
    real = os.path.realpath(path)
    best: Mount | None = None
    for m in mounts:
        point = m.point.rstrip("/") or "/"
        inside = real == point or real.startswith(point + "/") or point == "/"
        if inside and (best is None or len(point) >= len(best.point.rstrip("/") or "/")):
            best = m
    return best


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _count_dirs(roots: list[Path]) -> int:
    """Directories under the roots (each is one inotify watch), up to ``_MAX_DIRS``."""
    n = 0
    for root in roots:
        for _, dirs, _ in os.walk(root, onerror=lambda e: None):
            n += 1
            if n >= _MAX_DIRS:
                return n
            dirs[:] = [d for d in dirs if not d.startswith(".")]
    return n


def check_inotify(roots: list[Path], poll: float) -> Check:
    if poll > 0:
        return Check("ok", "inotify", f"not used: polling every {poll:g} s")
    watches = _read("/proc/sys/fs/inotify/max_user_watches")
    instances = _read("/proc/sys/fs/inotify/max_user_instances")
    if watches is None:
        return Check("warn", "inotify", "cannot read /proc/sys/fs/inotify/max_user_watches",
                     "run watch with --poll SECONDS if new exports are not picked up")
    limit = int(watches)
    dirs = _count_dirs(roots) if roots else 0
    where = f"{dirs:,} directories to watch under {len(roots)} root(s)" if roots else \
        "no root given"
    detail = f"{where}; limit {limit:,} watches (fs.inotify.max_user_watches), " \
             f"{int(instances or 0):,} instances"
    bigger = max(4 * dirs, 65536)
    fix = (f"raise the limit: echo fs.inotify.max_user_watches={bigger} > "
           f"/etc/sysctl.d/90-prvstream.conf && sysctl --system, or run watch with --poll 10")
    if dirs > limit:
        return Check("fail", "inotify", detail, fix)
    if dirs > limit // 2:
        return Check("warn", "inotify", detail + " (more than half, shared with other "
                     "programs of the user)", fix)
    return Check("ok", "inotify", detail)


def check_network(roots: list[Path], poll: float, mounts: list[Mount]) -> Iterator[Check]:
    for root in roots:
        m = mount_of(root, mounts)
        if m is None:
            yield Check("warn", "file system", f"{root}: not found in /proc/self/mountinfo")
            continue
        what = f"{root} is on {m.fstype} ({m.point})"
        if m.fstype not in NETWORK_FS:
            yield Check("ok", "file system", f"{what}: local, inotify sees every write")
        elif poll > 0:
            yield Check("ok", "file system", f"{what}: network, polled every {poll:g} s")
        else:
            yield Check("warn", "file system",
                        f"{what}: a network file system; inotify misses exports other nodes "
                        "write", "run watch with --poll 10 (or PRVSTREAM_POLL=10, poll = 10 "
                        "in the config file)")


def _existing(path: Path) -> Path:
    """``path``, or its nearest existing parent (where it would be created)."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _probe_write(directory: Path) -> str | None:
    """Create and remove a file in ``directory``; the error text if that fails."""
    try:
        fd, name = tempfile.mkstemp(prefix=".prvstream-doctor-", dir=directory)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(name)
    return None


def check_writable(label: str, target: Path, fix: str) -> Check:
    place = _existing(target)
    if not place.is_dir():
        return Check("fail", label, f"{target}: {place} is not a directory", fix)
    error = _probe_write(place)
    where = str(target) if place == target else f"{target} (to be created in {place})"
    if error is not None:
        return Check("fail", label, f"{where} is not writable: {error}", fix)
    return Check("ok", label, f"{where} is writable")


def check_free(label: str, target: Path) -> Check:
    place = _existing(target)
    try:
        usage = shutil.disk_usage(place)
    except OSError as exc:
        return Check("warn", label, f"{place}: cannot measure free space ({exc.strerror})")
    detail = f"{usage.free / _MIB / 1024:,.1f} GiB free of {usage.total / _MIB / 1024:,.1f} " \
             f"GiB at {place}"
    fix = f"free space at {place} or write elsewhere (--out DIR, --state DIR)"
    if usage.free < _FAIL_FREE:
        return Check("fail", label, detail, fix)
    if usage.free < _WARN_FREE:
        return Check("warn", label, detail, fix)
    return Check("ok", label, detail)


def check_nsys() -> Check:
    found = shutil.which("nsys")
    if found:
        return Check("ok", "nsys", f"{found}: .nsys-rep reports are exported to .sqlite")
    return Check("warn", "nsys", "not on PATH: .nsys-rep reports wait until a .sqlite sits "
                 "beside them", "add Nsight Systems' bin directory to the daemon's PATH, or "
                 "profile with nsys profile --export=sqlite")


def check_extensions(settings: Settings) -> Iterator[Check]:
    for ext in runtime.extensions():
        if not ext.built():
            yield Check("warn", "C extension", f"{ext.what} ({ext.module}) not loaded: "
                        f"{ext.error}; the Python fallback is slower", "reinstall with a C "
                        "compiler present: pip install . (or pip wheel . on a machine with one)")
        elif settings.pure_python:
            yield Check("warn", "C extension", f"{ext.what} built but pure_python is set "
                        "(PRVSTREAM_PURE_PYTHON): the Python fallback is used",
                        "unset PRVSTREAM_PURE_PYTHON (or pure_python in the config file)")
        else:
            yield Check("ok", "C extension", f"{ext.what} loaded")


def run_checks(roots: list[Path], settings: Settings, mountinfo: str | None = None,
               ) -> list[Check]:
    """Every check, in report order."""
    mounts = parse_mountinfo(mountinfo if mountinfo is not None
                             else _read("/proc/self/mountinfo") or "")
    checks: list[Check] = []
    for root in roots:
        if not root.is_dir():
            checks.append(Check("fail", "root", f"{root} is not a directory",
                                f"create it (mkdir -p {root}) or pass the right path"))
    present = [r for r in roots if r.is_dir()]
    checks.append(check_inotify(present, settings.poll))
    checks += check_network(present, settings.poll, mounts)
    targets = [("outputs", Path(settings.out_dir), f"make {settings.out_dir} writable by the "
                "daemon's user, or pass another --out DIR")] if settings.out_dir else [
        ("outputs", root, f"outputs go to JOB/prvstream under {root}: make it writable by the "
         "daemon's user, or pass --out DIR on a writable disk") for root in present]
    state = Path(settings.state_dir)
    targets.append(("state", state, f"make {state} writable, or pass --state DIR on a local "
                    "disk"))
    for label, target, fix in targets:
        writable = check_writable(label, target, fix)
        checks.append(writable)
        if writable.status == "ok":  # free space matters only where it can be written
            checks.append(check_free(f"disk {label}", target))
    m = mount_of(state, mounts)
    if m is not None and m.fstype in NETWORK_FS:
        checks.append(Check("warn", "state", f"{state} is on {m.fstype}: journals belong on a "
                            "local disk", "pass --state DIR on a local disk"))
    checks.append(check_nsys())
    checks += check_extensions(settings)
    return checks


def run(args: argparse.Namespace, settings: Settings) -> int:
    """``prvstream doctor``."""
    checks = run_checks([Path(r) for r in args.roots], settings)
    counts = {s: sum(c.status == s for c in checks) for s in ("ok", "warn", "fail")}
    sys.stdout.write("\n".join(c.line() for c in checks) + "\n")
    sys.stdout.write(f"prvstream doctor: {counts['ok']} ok, {counts['warn']} warning(s), "
                     f"{counts['fail']} failed\n")
    return 1 if counts["fail"] else 0
