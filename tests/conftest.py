"""Shared fixtures: where the real Nsight Systems exports are, and clean logging per test."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import structlog

from prvstream.daemon.synthetic.synth import SynthSpec, export_name, write_export
from prvstream.sinks import logger
from tests.daemon.daemon_proc import DaemonProcess

#: the real exports live beside the project unless PRVSTREAM_TEST_DATA says otherwise
REAL_DATA = Path(
    os.environ.get(
        "PRVSTREAM_TEST_DATA",
        str(Path(__file__).resolve().parents[1].parent / "shared" / "data" / "nsys"),
    )
)


def real_exports() -> list[Path]:
    """Every real export available, sorted by name (empty when the folder is absent)."""
    if not REAL_DATA.is_dir():
        return []
    return sorted(REAL_DATA.glob("*.sqlite"))


def real_export_params() -> list[object]:
    """Parametrize over the real exports, or one skipped case saying why."""
    found = real_exports()
    if not found:
        return [pytest.param(None, marks=pytest.mark.skip(
            reason=f"real exports not found at {REAL_DATA} (set PRVSTREAM_TEST_DATA)"),
            id="no-real-data")]
    return [pytest.param(p, id=p.stem) for p in found]


def make_db(path: Path, spec: dict[str, tuple[Sequence[str], Sequence[tuple[object, ...]]]]
            ) -> Path:
    """Write an SQLite file with the given tables (columns untyped, like a quick probe)."""
    con = sqlite3.connect(path)
    for table, (cols, rows) in spec.items():
        con.execute(f'CREATE TABLE "{table}" ({", ".join(cols)})')
        if rows:
            marks = ",".join("?" * len(cols))
            con.executemany(f'INSERT INTO "{table}" VALUES ({marks})', rows)
    con.commit()
    con.close()
    return path


def osrt_export_with_wrecked_pages(path: Path) -> Path:
    """An OSRT table of 60,000 rows whose data pages are overwritten after planning could read
    the schema: SQLite notices only while it reads the rows."""
    g = 7 << 24
    rows = [(i * 7 % 100003, i * 7 % 100003 + 5, g | 1, i % 50) for i in range(60000)]
    make_db(path, {
        "StringIds": (["id INTEGER PRIMARY KEY", "value"], [(i, f"f{i}") for i in range(50)]),
        "OSRT_API": (["start", "end", "globalTid", "nameId"], rows),
    })
    size = path.stat().st_size
    with path.open("r+b") as fh:  # wreck the data pages, keep the schema page
        for page in range(size // 4096 // 2, size // 4096 - 1):
            fh.seek(page * 4096)
            fh.write(b"\x0d\xff\xff\xff" * 1024)
    return path


@pytest.fixture
def real_data_dir() -> Path:
    if not REAL_DATA.is_dir():
        pytest.skip(f"real exports not found at {REAL_DATA} (set PRVSTREAM_TEST_DATA)")
    return REAL_DATA


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    """Each test starts with structlog's defaults, so that no configuration leaks."""
    structlog.reset_defaults()
    logger.reset()
    yield
    structlog.reset_defaults()
    logger.reset()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# ------------------------------------------------- daemon processes (service and fault tests)


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[Callable[..., DaemonProcess]]:
    """Factory: ``start_daemon(root, extra=(...))``; every daemon is killed at teardown."""
    made: list[DaemonProcess] = []

    def start(*roots: Path, extra: tuple[str, ...] = (), settle: float = 0.2,
              state: Path | None = None, begin: bool = True) -> DaemonProcess:
        n = len(made)
        daemon = DaemonProcess(list(roots), state or tmp_path / "state",
                               tmp_path / f"logs{n}", settle=settle, extra=extra)
        made.append(daemon)
        return daemon.start() if begin else daemon

    yield start
    for daemon in made:
        daemon.close()


@pytest.fixture
def job(tmp_path: Path) -> Path:
    job = tmp_path / "root" / "job"
    job.mkdir(parents=True)
    return job


@pytest.fixture(scope="module")
def synth_sources(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Four small synthetic ranks (4 ranks x 3 steps), written once per module."""
    src = tmp_path_factory.mktemp("synth_sources")
    spec = SynthSpec(ranks=4, steps=3, seed=11)
    return [write_export(src / export_name(spec, r), spec, r) for r in range(spec.ranks)]
