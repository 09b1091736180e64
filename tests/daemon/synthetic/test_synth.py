"""synth: exports with the real schema of each nsys version, causal timing, determinism, CLI."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prvstream.daemon.cli.main import cli
from prvstream.daemon.synthetic.synth import (
    SynthSpec,
    export_name,
    iter_job,
    rows_per_step,
    static_rows,
    steps_for_rows,
    write_export,
    write_job,
)
from prvstream.sinks.errors import ConfigError

VERSIONS = ["2022.2", "2024.5", "2026.2"]
#: the real export each version's schema is checked against
REAL_FILE = {
    "2022.2": "nsys2022.2_saxpy_mpi_rank0_a100.sqlite",
    "2024.5": "nsys2022.2cap_2024.5exp_cloverleaf_a100.sqlite",
    "2026.2": "nsys2026.2_torchrun2gpu_nccl_nvtx_h100.sqlite",
}
#: columns a user added to the 2022.2 sample after export (not nsys's)
USER_ADDED = {("2022.2", "CUPTI_ACTIVITY_KIND_MEMCPY", "name"),
              ("2022.2", "CUPTI_ACTIVITY_KIND_RUNTIME", "name")}
GPU_TABLES = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_MEMSET"]
ACTIVITY = [*GPU_TABLES, "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
            "NVTX_EVENTS", "OSRT_API"]


@contextmanager
def ro(path: Path) -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        yield conn


def tables(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]


def columns(conn: sqlite3.Connection, table: str) -> list[tuple[str, str, int, int]]:
    return [(r[1], r[2], r[3], r[5]) for r in conn.execute(f"PRAGMA table_info({table})")]


def scalar(conn: sqlite3.Connection, sql: str) -> int:
    return int(conn.execute(sql).fetchone()[0])


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """One small 3-rank job (two hosts) per version."""
    out = {}
    for v in VERSIONS:
        spec = SynthSpec(ranks=3, hosts=2, steps=6, layers=3, nsys_version=v,  # type: ignore[arg-type]
                         steps_per_epoch=4, batch_steps=4)
        out[v] = write_job(tmp_path_factory.mktemp(f"job{v}"), spec)
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_schema_matches_real_export(version: str, jobs: dict[str, list[Path]],
                                    real_data_dir: Path) -> None:
    real = real_data_dir / REAL_FILE[version]
    if not real.exists():
        pytest.skip(f"{real.name} not among the real exports")
    compared = 0
    with ro(jobs[version][0]) as mine, ro(real) as theirs:
        real_tables = set(tables(theirs))
        for table in tables(mine):
            if table not in real_tables:
                continue
            want = [c for c in columns(theirs, table) if (version, table, c[0]) not in USER_ADDED]
            assert columns(mine, table) == want, table
            compared += 1
    assert compared >= 12


@pytest.mark.parametrize("version", VERSIONS)
def test_export_opens_read_only_and_is_complete(version: str,
                                                jobs: dict[str, list[Path]]) -> None:
    meta = "EXPORT_META_DATA" if version == "2022.2" else "META_DATA_EXPORT"
    for path in jobs[version]:
        with ro(path) as conn:
            assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
            names = set(tables(conn))
            assert scalar(conn, "SELECT count(*) FROM sqlite_master WHERE type='index'") == 0
            assert meta in names
            assert scalar(conn, f"SELECT count(*) FROM {meta} WHERE name='EXPORT_TIME'") == 1
            if version != "2022.2":   # the EXPORT_TIME row is the last one written
                last = conn.execute(f"SELECT name FROM {meta} ORDER BY rowid DESC").fetchone()
                assert last[0] == "EXPORT_TIME"
            assert any(n.startswith("ENUM_") for n in names) == (version != "2022.2")
            assert ("TARGET_INFO_GPU" in names) == (version != "2026.2")
            cols = [c[0] for c in columns(conn, "TARGET_INFO_SESSION_START_TIME")]
            assert ("systemClockNs" in cols) == (version == "2026.2")
            for table in ACTIVITY:
                assert scalar(conn, f"SELECT count(*) FROM {table}") > 0, table
        assert not list(path.parent.glob(".*"))


@pytest.mark.parametrize("version", VERSIONS)
def test_gpu_work_follows_its_launch(version: str, jobs: dict[str, list[Path]]) -> None:
    with ro(jobs[version][0]) as conn:
        for table in [*GPU_TABLES, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"]:
            orphans = scalar(conn, f"SELECT count(*) FROM {table} g LEFT JOIN "
                                   f"CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId) "
                                   f"WHERE r.start IS NULL")
            assert orphans == 0, table
        early = scalar(conn, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN "
                             "CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId) "
                             "WHERE k.start <= r.start")
        assert early == 0
        for table in ACTIVITY:
            bad = scalar(conn, f"SELECT count(*) FROM {table} WHERE end < start")
            assert bad == 0, table
        # per stream, kernels do not overlap
        rows = conn.execute("SELECT deviceId, streamId, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL "
                            "ORDER BY deviceId, streamId, start").fetchall()
        for a, b in pairwise(rows):
            if a[:2] == b[:2]:
                assert b[2] >= a[3]
        # nccl kernels exist and run on their own stream
        nccl = conn.execute("SELECT DISTINCT k.streamId FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                            "JOIN StringIds s ON s.id = k.shortName "
                            "WHERE s.value LIKE 'nccl%'").fetchall()
        assert len(nccl) == 1
        kinds = {r[0] for r in conn.execute("SELECT copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY")}
        assert kinds == {1, 2, 8}


def test_rows_are_not_stored_in_time_order(jobs: dict[str, list[Path]]) -> None:
    with ro(jobs["2026.2"][0]) as conn:
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
            starts = [r[0] for r in conn.execute(f"SELECT start FROM {table} ORDER BY rowid")]
            assert starts != sorted(starts), table


@pytest.mark.parametrize("version", VERSIONS)
def test_nvtx_ranges_nest(version: str, jobs: dict[str, list[Path]]) -> None:
    with ro(jobs[version][1]) as conn:
        rows = conn.execute("SELECT start, end, domainId, text FROM NVTX_EVENTS "
                            "WHERE eventType = 59 ORDER BY start").fetchall()
        types = dict(conn.execute("SELECT eventType, count(*) FROM NVTX_EVENTS GROUP BY 1"))
    assert types[75] == 1 and types[34] >= 2 and types[60] >= 2
    for domain in (0, 1):
        stack: list[int] = []
        for start, end, dom, _ in rows:
            if dom != domain:
                continue
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], "ranges overlap without nesting"
            stack.append(end)
    steps = [r for r in rows if r[3] == "train_step"]
    assert len(steps) == 6
    inner = [r for r in rows if r[3] in ("forward", "backward", "optimizer")]
    for start, end, *_ in inner:
        assert any(s <= start and end <= e for s, e, *_ in steps)


def _step_walls(path: Path) -> tuple[int, list[int]]:
    """Session start (wall) and the wall time of each train_step, anchored as the daemon does."""
    with ro(path) as conn:
        cols = [c[0] for c in columns(conn, "TARGET_INFO_SESSION_START_TIME")]
        utc = scalar(conn, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
        if "systemClockNs" in cols:
            origin = scalar(conn, "SELECT systemClockNs FROM TARGET_INFO_SESSION_START_TIME")
        else:
            origin = min(scalar(conn, f"SELECT min(start) FROM {t}") for t in ACTIVITY)
        steps = [utc + r[0] - origin for r in conn.execute(
            "SELECT start FROM NVTX_EVENTS WHERE text = 'train_step' ORDER BY start")]
    return utc, steps


@pytest.mark.parametrize("version", VERSIONS)
def test_sessions_are_skewed_but_steps_align_in_wall_time(version: str,
                                                          jobs: dict[str, list[Path]]) -> None:
    found = [_step_walls(p) for p in jobs[version]]
    sessions = [s for s, _ in found]
    assert len(set(sessions)) == len(sessions)
    assert max(sessions) - min(sessions) < 40_000_000
    for _, steps in found[1:]:   # every rank starts each step within a microsecond
        assert all(abs(a - b) < 1_000 for a, b in zip(steps, found[0][1], strict=True))
    for session, steps in found:
        assert 0 < steps[0] - session < 200_000_000


def test_slow_rank_is_slower(tmp_path: Path) -> None:
    spec = SynthSpec(ranks=3, steps=4, layers=2, imbalance=1.5, slow_rank=1)
    paths = write_job(tmp_path, spec)
    compute, comm = [], []
    for path in paths:
        with ro(path) as conn:
            rows = dict(conn.execute(
                "SELECT s.value LIKE 'nccl%', sum(k.end - k.start) "
                "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
                "GROUP BY 1").fetchall())
        compute.append(rows[0])
        comm.append(rows[1])
    fast = (compute[0] + compute[2]) / 2
    assert 1.4 < compute[1] / fast < 1.6
    assert comm[1] < min(comm[0], comm[2])   # the others wait in NCCL for the slow rank


def test_ranks_share_hosts_with_distinct_pids_and_gpus(tmp_path: Path) -> None:
    spec = SynthSpec(ranks=4, hosts=2, gpus_per_rank=2, steps=2, layers=1,
                     nsys_version="2024.5")
    seen = []
    for path in write_job(tmp_path, spec):
        with ro(path) as conn:
            host = conn.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV "
                                "WHERE name = 'Hostname' AND nameEnum = 619").fetchone()[0]
            gpid, pid = conn.execute("SELECT globalPid, pid FROM PROCESSES").fetchone()
            devices = {r[0] for r in conn.execute(
                "SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL")}
            rank = conn.execute("SELECT rank, globalTid FROM MPI_RANKS").fetchone()
            gpus = scalar(conn, "SELECT count(*) FROM TARGET_INFO_GPU")
            tids = {r[0] >> 24 for r in conn.execute(
                "SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME UNION "
                "SELECT globalTid FROM OSRT_API")}
        assert gpid == (1 << 48) | (pid << 24)
        assert tids == {gpid >> 24}
        assert gpus == 4
        seen.append((host, pid, frozenset(devices), rank[0]))
    assert [s[0] for s in seen] == ["node00", "node00", "node01", "node01"]
    assert [s[3] for s in seen] == [0, 1, 2, 3]
    assert seen[0][1] != seen[1][1]
    assert seen[0][2] == {0, 1} and seen[1][2] == {2, 3} and seen[2][2] == {0, 1}


def test_slices_continue_the_process(tmp_path: Path) -> None:
    spec = SynthSpec(ranks=1, steps=3, slices=3, layers=1)
    paths = write_job(tmp_path, spec)
    assert [p.name for p in paths] == [export_name(spec, 0, s) for s in range(3)]
    assert paths[1].name == "rank0000.slice01.sqlite"
    spans = []
    for path in paths:
        with ro(path) as conn:
            spans.append(conn.execute("SELECT min(start), max(end), min(correlationId), "
                                      "max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME"
                                      ).fetchone())
    for a, b in pairwise(spans):
        assert b[0] > a[1] and b[2] > a[3]


def test_same_spec_gives_identical_bytes(tmp_path: Path) -> None:
    spec = SynthSpec(ranks=2, steps=5, layers=2, seed=7, nsys_version="2022.2")
    first = write_job(tmp_path / "a", spec)
    second = write_job(tmp_path / "b", spec)
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes()
    other = write_job(tmp_path / "c", SynthSpec(ranks=2, steps=5, layers=2, seed=8,
                                                nsys_version="2022.2"))
    assert other[0].read_bytes() != first[0].read_bytes()


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ranks=st.integers(1, 3), gpus=st.integers(1, 2), steps=st.integers(1, 5),
       layers=st.integers(1, 3), version=st.sampled_from(VERSIONS), seed=st.integers(0, 99),
       per_epoch=st.integers(1, 4))
def test_row_counts_match_the_formula(tmp_path: Path, ranks: int, gpus: int, steps: int,
                                      layers: int, version: str, seed: int,
                                      per_epoch: int) -> None:
    spec = SynthSpec(ranks=ranks, gpus_per_rank=gpus, steps=steps, layers=layers, seed=seed,
                     nsys_version=version, steps_per_epoch=per_epoch,  # type: ignore[arg-type]
                     batch_steps=2)
    path = write_export(tmp_path / f"r{seed}.sqlite", spec, ranks - 1)
    with ro(path) as conn:
        total = sum(scalar(conn, f"SELECT count(*) FROM {t}") for t in tables(conn))
        kernels = scalar(conn, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
        epochs = scalar(conn, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 60")
    assert epochs == -(-steps // per_epoch)
    assert kernels == steps * gpus * (layers * (5 + 7 + 1) + 2 + 2 + 4)
    assert total == static_rows(spec) + steps * rows_per_step(spec)


def test_steps_for_rows_hits_the_target() -> None:
    spec = SynthSpec()
    for rows in (10_000, 1_000_000, 10_000_000):
        steps = steps_for_rows(rows, spec)
        got = static_rows(spec) + steps * rows_per_step(spec)
        assert abs(got - rows) <= rows_per_step(spec)


def test_bad_specs_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="hosts"):
        write_job(tmp_path, SynthSpec(ranks=2, hosts=3))
    with pytest.raises(ConfigError, match="imbalance"):
        write_job(tmp_path, SynthSpec(imbalance=0.5))


def test_cli_writes_the_job(tmp_path: Path) -> None:
    status = cli("synth", str(tmp_path), "--ranks", "3", "--hosts", "1", "--steps", "2",
                 "--slices", "2", "--nsys-version", "2024.5", "--seed", "3")
    assert status == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"rank{r:04d}.slice{s:02d}.sqlite" for r in range(3) for s in range(2)]
    with ro(tmp_path / names[0]) as conn:
        assert conn.execute("SELECT value FROM META_DATA_EXPORT WHERE name = "
                            "'EXPORT_PRODUCT_VERSION'").fetchone()[0].startswith("2024.5")
    assert cli("synth", str(tmp_path), "--hosts", "5") == 2


def test_interval_writes_over_time_with_renames(tmp_path: Path) -> None:
    spec = SynthSpec(ranks=3, steps=1, layers=1)
    seen: list[tuple[float, list[str]]] = []
    began = time.monotonic()
    for path in iter_job(tmp_path, spec, interval=0.1):
        assert path.exists()
        seen.append((time.monotonic() - began, sorted(p.name for p in tmp_path.iterdir())))
    assert [len(names) for _, names in seen] == [1, 2, 3]
    assert all(not n.startswith(".") for _, names in seen for n in names)
    assert seen[-1][0] >= 0.2
    assert cli("synth", str(tmp_path / "cli"), "--ranks", "2", "--steps", "1",
               "--interval", "0.05") == 0
    assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == [
        "rank0000.sqlite", "rank0001.sqlite"]
