"""Ranks from file names (the default ``rank_pattern`` and a custom one), (host, pid) order
for the rest, and the missing ones."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prvstream.daemon.config import load_settings
from prvstream.daemon.stream.ranks import (
    DEFAULT_RANK_PATTERN,
    RankedTask,
    assign_ranks,
    missing_ranks,
    rank_from_name,
)
from prvstream.sinks.errors import ConfigError


@pytest.mark.parametrize(("name", "rank"), [
    ("rank0007.sqlite", 7),            # prvstream synth, rank%04d
    ("rank_7.sqlite", 7),
    ("rank-7.sqlite", 7),
    ("RANK12.nsys-rep", 12),
    ("job_rank3_a100.sqlite", 3),
    ("rank0003.slice02.sqlite", 3),    # the rank, not the slice
    ("report.7.sqlite", 7),            # nsys -o report.%q{SLURM_PROCID} / %q{RANK} / ...
    ("profile.15.nsys-rep", 15),       # ... %q{OMPI_COMM_WORLD_RANK}
    ("nsys2022.2_saxpy_mpi_rank0_a100.sqlite", 0),
    ("nsys2026.2_torchrun2gpu_nccl_nvtx_h100.sqlite", None),
    ("nsys2022.2cap_2024.5exp_cloverleaf_a100.sqlite", None),
    ("myrank3.sqlite", None),          # "rank" inside a word is not a rank
    ("report.sqlite", None),
    ("a.b.7.sqlite", None),            # only two parts before the extension
    ("report.7x.sqlite", None),
])
def test_default_pattern(name: str, rank: int | None) -> None:
    assert rank_from_name(name, DEFAULT_RANK_PATTERN) == rank
    assert rank_from_name(f"/some/dir/{name}", DEFAULT_RANK_PATTERN) == rank


@pytest.mark.parametrize(("pattern", "name", "rank"), [
    (r"node\d+_gpu(\d+)", "node03_gpu5.sqlite", 5),
    (r"^p(\d+)\.|^q(\d+)\.", "q9.sqlite", 9),   # the first group that matched
    (r"node\d+_gpu(\d+)", "rank0001.sqlite", None),
    ("", "rank0001.sqlite", None),              # "" never reads names
])
def test_custom_pattern(pattern: str, name: str, rank: int | None) -> None:
    assert rank_from_name(name, pattern) == rank


def test_pattern_setting_is_checked() -> None:
    assert load_settings(environ={"PRVSTREAM_RANK_PATTERN": r"gpu(\d+)"}).rank_pattern \
        == r"gpu(\d+)"
    with pytest.raises(ConfigError, match=r"PRVSTREAM_RANK_PATTERN.*regular expression"):
        load_settings(environ={"PRVSTREAM_RANK_PATTERN": "rank["})
    with pytest.raises(ConfigError, match="group"):
        load_settings(environ={"PRVSTREAM_RANK_PATTERN": r"rank\d+"})
    assert load_settings(environ={"PRVSTREAM_EXPECT_RANKS": "64"}).expect_ranks == 64
    with pytest.raises(ConfigError, match="PRVSTREAM_EXPECT_RANKS"):
        load_settings(environ={"PRVSTREAM_EXPECT_RANKS": "-1"})


def test_unknown_ranks_take_free_numbers_in_host_pid_order() -> None:
    tasks = [RankedTask("b", 5, None), RankedTask("a", 9, None), RankedTask("a", 2, 1),
             RankedTask("a", 9, None)]   # a capture slice of the same process
    assert assign_ranks(tasks) == {("a", 2): 1, ("a", 9): 0, ("b", 5): 2}
    # a later sighting with a rank wins over an unranked one
    assert assign_ranks([RankedTask("h", 1, None), RankedTask("h", 1, 4)]) == {("h", 1): 4}


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 20),
                          st.none() | st.integers(0, 40)), max_size=30))
def test_assigned_ranks_are_distinct_unless_given(raw: list[tuple[str, int, int | None]]
                                                  ) -> None:
    tasks = [RankedTask(h, p, r) for h, p, r in raw]
    got = assign_ranks(tasks)
    assert set(got) == {(t.host, t.pid) for t in tasks}
    given_ranks = {(t.host, t.pid) for t in tasks if t.rank is not None}
    filled = [r for k, r in got.items() if k not in given_ranks]
    assert len(set(filled)) == len(filled)
    assert not set(filled) & {got[k] for k in given_ranks}


def test_missing_ranks() -> None:
    assert missing_ranks(4, [0, 1, 3]) == [2]
    assert missing_ranks(4, [0, 1, 2, 3, 7]) == []
    assert missing_ranks(3, []) == [0, 1, 2]
