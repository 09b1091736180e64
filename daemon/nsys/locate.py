"""Which files under a directory are Nsight Systems exports: the discovery rules (export
names, job-end markers, skipped names and folders, no escape through symlinks) and a one-shot
scan. Shared by the watcher (service/discover.py) and batch conversion; no event loop here.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import msgspec

from prvstream.daemon.nsys.exporter import nsys_executable
from prvstream.sinks.errors import ConfigError
from prvstream.sinks.files import OWNED_MARKER
from prvstream.sinks.logger import get_logger

__all__ = [
    "AUTO_NSYS",
    "DONE_MARKER",
    "EXPECT_MARKER",
    "OUTPUT_DIRNAME",
    "Candidate",
    "DiscoveryScope",
    "scan_once",
]

log = get_logger(__name__)

#: the folder prvstream writes into beside a job's reports (``<job>/prvstream/``)
OUTPUT_DIRNAME = "prvstream"
#: touched in a job directory (e.g. by a Slurm epilog) when the job has ended: finalize it
DONE_MARKER = "prvstream.done"
#: a job directory's expected rank count (one number); written or changed: status.json again
EXPECT_MARKER = "prvstream.expect"
_IGNORED_SUFFIXES = (".tmp", "-journal", "-wal", "-shm")
CandidateKind = Literal["sqlite", "nsys-rep", "done", "expect"]
_MARKERS: dict[str, CandidateKind] = {DONE_MARKER: "done", EXPECT_MARKER: "expect"}
_EXPORT_SUFFIXES: dict[str, CandidateKind] = {".sqlite": "sqlite", ".nsys-rep": "nsys-rep"}
#: ``nsys`` argument default: look it up on PATH
AUTO_NSYS = "auto"


class Candidate(msgspec.Struct, frozen=True):
    """An export worth a readiness check, or (``kind == "done"``) a job's end marker.

    Paths are real (symlinks resolved) and absolute.
    """

    path: Path
    #: the directory directly containing the export: one job
    job_dir: Path
    #: the watched root (real path) it was found under
    root: Path
    kind: CandidateKind = "sqlite"

    @property
    def job_id(self) -> str:
        """The job directory relative to its root (``"."`` for the root itself)."""
        return os.path.relpath(self.job_dir, self.root)

    @property
    def job_name(self) -> str:
        return self.job_dir.name


#: job folders whose ``Path`` discovery keeps for the candidates found in them
_FOLDERS_KEPT = 1024


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)


class DiscoveryScope:
    """Which paths are inputs: the rules of discovery, shared by every mode (thread-safe enough:
    it is only called from one worker thread at a time).
    """

    def __init__(self, roots: Sequence[str | os.PathLike[str]], *,
                 out_dir: str | os.PathLike[str] | None = None,
                 output_dirname: str = OUTPUT_DIRNAME,
                 nsys: str | None = AUTO_NSYS) -> None:
        self.roots: list[Path] = []
        for r in roots:
            real = Path(os.path.realpath(os.fspath(r)))
            if not real.is_dir():
                raise ConfigError(
                    f"watched root {r} is not an existing directory; create it or fix the path")
            if real not in self.roots:
                self.roots.append(real)
        self.out_dir = os.path.realpath(os.fspath(out_dir)) if out_dir else None
        self.output_dirname = output_dirname
        self.nsys = nsys_executable() if nsys == AUTO_NSYS else nsys
        self._refused: set[str] = set()
        self._waiting_reps: set[str] = set()
        #: paths refused once for a name that is not UTF-8 (logged once each)
        self._not_utf8: set[str] = set()
        #: job folders met lately: a candidate's path is made as a child of its folder's
        #: ``Path``, sharing its parts (a flood of waiting files holds one name string each,
        #: not every component of its path again)
        self._folders: dict[str, Path] = {}

    # -- rules -------------------------------------------------------------------------------
    def root_of(self, path: str) -> Path | None:
        best: Path | None = None
        for root in self.roots:
            if _under(path, str(root)) and (best is None or len(str(root)) > len(str(best))):
                best = root
        return best

    def ignored_name(self, name: str) -> bool:
        return name.startswith(".") or name.endswith(_IGNORED_SUFFIXES)

    def ignored_dir(self, real_dir: str, name: str) -> bool:
        """Hidden folders, prvstream's output folders (by name, --out, or ownership marker)."""
        if name.startswith(".") or name == self.output_dirname:
            return True
        if self.out_dir is not None and _under(real_dir, self.out_dir):
            return True
        return os.path.lexists(os.path.join(real_dir, OWNED_MARKER))

    def refuse_symlink(self, path: str, target: str, root: Path) -> None:
        if path not in self._refused:
            self._refused.add(path)
            log.warning("symlink_refused", path=path, target=target, root=str(root),
                        hint="prvstream never follows a symlink out of a watched root")

    def classify(self, path: str) -> Candidate | None:
        """The candidate ``path`` stands for, or ``None`` when it is not an input."""
        path = os.path.abspath(path)
        name = os.path.basename(path)
        kind: CandidateKind | None = _MARKERS.get(name) or _EXPORT_SUFFIXES.get(
            os.path.splitext(name)[1])
        if kind is None or self.ignored_name(name):
            return None
        root = self.root_of(path)
        if root is None:
            return None
        real = os.path.realpath(path)
        if not _utf8(real):
            if real not in self._not_utf8:
                self._not_utf8.add(real)
                log.warning("export_name_not_utf8",
                            path=os.fsencode(real).decode("utf-8", "backslashreplace"),
                            hint="rename it (or its folder) to a UTF-8 name: every report is "
                                 "recorded by name in the journal and status.json")
            return None
        if not _under(real, str(root)):
            self.refuse_symlink(path, real, root)
            return None
        # every folder between the root and the file must be an input folder
        rel_dirs = Path(os.path.relpath(os.path.dirname(real), root)).parts
        current = str(root)
        for part in rel_dirs:
            if part in (".", ""):
                continue
            current = os.path.join(current, part)
            if self.ignored_dir(current, part):
                return None
        try:
            st = os.stat(real)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        job_dir = os.path.dirname(real)
        if self.out_dir is not None and _under(real, self.out_dir):
            return None
        if os.path.lexists(os.path.join(job_dir, OWNED_MARKER)):
            return None
        if kind == "nsys-rep":
            if os.path.exists(os.path.splitext(real)[0] + ".sqlite"):
                return None
            if self.nsys is None:
                if real not in self._waiting_reps:
                    self._waiting_reps.add(real)
                    log.info("nsys_rep_waiting", path=real,
                             hint="nsys is not on PATH: waiting for its .sqlite export")
                return None
        folder = self._folder(job_dir)
        return Candidate(folder / os.path.basename(real), folder, root, kind)

    def _folder(self, job_dir: str) -> Path:
        """The ``Path`` of ``job_dir``, shared by the candidates found in it."""
        folder = self._folders.get(job_dir)
        if folder is None:
            if len(self._folders) >= _FOLDERS_KEPT:
                self._folders.clear()
            folder = self._folders[job_dir] = Path(job_dir)
        return folder

    # -- walking -----------------------------------------------------------------------------
    def walk(self, top: Path | None = None) -> Iterator[tuple[str, os.stat_result]]:
        """``(path, stat)`` of every file with an export name under ``top`` (default: all roots),
        never descending into ignored folders or symlinked folders.
        """
        tops = [top] if top is not None else list(self.roots)
        for start in tops:
            root = self.root_of(os.path.realpath(start))
            if root is None:
                continue
            stack = [os.path.realpath(start)]
            while stack:
                folder = stack.pop()
                try:
                    entries = list(os.scandir(folder))
                except OSError:
                    continue
                for entry in entries:
                    try:
                        if entry.is_symlink():
                            real = os.path.realpath(entry.path)
                            if not _under(real, str(root)):
                                self.refuse_symlink(entry.path, real, root)
                                continue
                            if os.path.isdir(real):
                                continue  # its real folder is walked on its own
                        if entry.is_dir(follow_symlinks=False):
                            if not self.ignored_dir(entry.path, entry.name):
                                stack.append(entry.path)
                            continue
                        if ((os.path.splitext(entry.name)[1] in _EXPORT_SUFFIXES
                             or entry.name in _MARKERS)
                                and not self.ignored_name(entry.name)):
                            yield entry.path, entry.stat(follow_symlinks=True)
                    except OSError:
                        continue

    def walk_paths(self, top: Path | None = None) -> list[str]:
        return [p for p, _ in self.walk(top)]

    def classify_many(self, paths: Sequence[str]) -> list[Candidate | None]:
        return [self.classify(p) for p in paths]

    def scan(self, top: Path | None = None) -> list[Candidate]:
        """Every candidate present now (sorted by path)."""
        found = {c.path: c for p, _ in self.walk(top) if (c := self.classify(p)) is not None}
        return [found[p] for p in sorted(found)]


def scan_once(roots: Sequence[str | os.PathLike[str]], *,
              out_dir: str | os.PathLike[str] | None = None,
              nsys: str | None = AUTO_NSYS) -> list[Candidate]:
    """The exports present under ``roots`` now (for ``watch --once`` and batch conversion)."""
    return DiscoveryScope(roots, out_dir=out_dir, nsys=nsys).scan()


def _utf8(path: str) -> bool:
    """Whether ``path`` is text (a name that is not UTF-8 holds surrogate escapes)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
