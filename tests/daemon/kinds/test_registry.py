"""The kinds registry: every kind complete and consistent, documented, and read by config."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prvstream.daemon.config import load_settings
from prvstream.daemon.kinds import registry
from prvstream.sinks.errors import ConfigError
from prvstream.sinks.paraver import format as pv

MAPPING = Path(__file__).resolve().parents[3] / "docs" / "mapping.md"


def test_every_kind_has_a_docs_row_with_its_rank() -> None:
    rows = re.findall(r"^\| (\w+) \| `kinds/(\w+)\.py` \|.*\| (\d+) \|[^|]*\|[^|]*\|$",
                      MAPPING.read_text(), flags=re.MULTILINE)
    assert [r[0] for r in rows] == sorted(registry.ALL_KINDS, key=lambda k: registry.get(k).rank)
    for kind, module, rank in rows:
        spec = registry.get(kind)
        assert (module, int(rank)) == (kind, spec.rank)
        assert spec.convert.__module__ == f"prvstream.daemon.kinds.{module}"


@pytest.mark.parametrize("kind", registry.TABLE_KINDS)
def test_a_table_kind_names_a_column_for_every_field(kind: str) -> None:
    spec = registry.get(kind)
    assert tuple(f for _, f in spec.columns) == spec.dtype.names
    assert spec.dtype.names is not None and spec.dtype.names[:2] == ("start", "end")
    assert spec.tables or spec.discover is not None
    assert spec.plan is not None


def test_ranks_and_value_groups_are_unique() -> None:
    specs = registry.KINDS.values()
    assert len({s.rank for s in specs}) == len(registry.KINDS)
    groups = [g.name for s in specs for g in s.value_groups.values()]
    assert len(groups) == len(set(groups))
    assert all(1 <= s.rank < 16 for s in specs)  # rank * 4 + line type fits the key's 16 bits


def test_derived_kinds_follow_their_inputs() -> None:
    assert registry.to_convert(["kernel", "runtime", "nvtx"]) == ["kernel", "runtime", "nvtx",
                                                                   "comm"]
    assert registry.to_convert(["kernel", "nvtx"]) == ["kernel", "nvtx"]
    assert registry.to_convert(["memcpy", "runtime"], ["memcpy"]) == ["memcpy"]
    assert registry.to_convert(["nvtx", "kernel"], []) == ["kernel", "nvtx"]


def test_cuda_kinds_decide_what_is_convertible() -> None:
    assert registry.has_cuda(["sync"])
    assert not registry.has_cuda(["nvtx", "osrt", "mpi"])


def test_pcf_blocks_of_an_empty_numbering_are_the_cuda_ones_in_order() -> None:
    types = [t for spec in registry.event_types({}) for t, _ in spec.types]
    assert types == [pv.EV_API, pv.EV_KERNEL, pv.EV_NCCL, pv.EV_MEMOP, pv.EV_MEMOP_BYTES,
                     pv.EV_SYNC, pv.EV_CORRELATION, *(t for t, _, _ in pv.EV_KERNEL_ATTRS)]


def test_pcf_blocks_of_optional_kinds_appear_with_their_labels() -> None:
    values = {"nvtx": ["step 1"], "nvtx_domain": ["dom"], "osrt": ["read"],
              "mpi": ["MPI_Send", "MPI_Allreduce"], "gpu_metric": ["7:SM Active"]}
    blocks = registry.event_types(values)
    types = [t for spec in blocks for t, _ in spec.types]
    assert types[-8:] == [9600, 9700, pv.EV_NVTX_STARTEND, pv.EV_NVTX_MARK, pv.EV_OSRT,
                          pv.EV_MPI_BASE + 1, pv.EV_MPI_BASE + 2, pv.EV_GPU_METRIC_BASE + 7]
    assert (pv.EV_GPU_METRIC_BASE + 7, "GPU metric: SM Active") in blocks[-1].types
    assert blocks[-4].types[0] == (9600, "NVTX pushpop ranges default domain")


def test_settings_take_the_registry_kinds() -> None:
    assert load_settings(overrides={"kinds": list(registry.ALL_KINDS)}, environ={}).kinds == \
        list(registry.ALL_KINDS)
    with pytest.raises(ConfigError, match="unknown data kind 'warp'"):
        load_settings(overrides={"kinds": ["kernel", "warp"]}, environ={})


def test_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known: kernel"):
        registry.get("warp")
