"""What a synthetic job is (``SynthSpec``), how its ranks are laid out (processes, threads,
devices, clocks) and what its exports are called.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec
import numpy as np

from prvstream.sinks.errors import ConfigError
from prvstream.sinks.logger import get_logger

__all__ = [
    "EVT_THREAD",
    "LEAD_NS",
    "LOADER_THREAD",
    "MAIN_THREAD",
    "NSYS_VERSIONS",
    "OSRT_CALLS",
    "VM_BITS",
    "NsysVersion",
    "RankLayout",
    "SynthSpec",
    "export_name",
    "rank_layout",
]

log = get_logger(__name__)

NsysVersion = Literal["2022.2", "2024.5", "2026.2"]
#: product version, schema version, schema checksum (as the metadata table records them)
NSYS_VERSIONS: dict[str, tuple[str, str, str]] = {
    "2022.2": ("2022.2.1.31", "2.9.1", "3609505966 99921"),
    "2024.5": ("2024.5.1.113", "3.13.2", "1271772049 158887"),
    "2026.2": ("2026.2.1.210", "3.25.0", "306658267 182758"),
}
VM_BITS = 1 << 48                 # the VM/host-instance bits real globalPid values carry
_EPOCH0 = 1_735_689_600 * 10**9   # 2025-01-01T00:00:00Z
LEAD_NS = 150_000_000        # session start precedes the first step by at most this
_MAX_SKEW_NS = 40_000_000     # ranks start their sessions within this of each other
_NOISE = 0.03                 # per-rank relative noise on durations (bounded)
OSRT_CALLS = ("read", "ioctl", "pthread_mutex_lock", "pthread_cond_wait")
MAIN_THREAD, LOADER_THREAD, EVT_THREAD = "python3", "pt_data_worker", "cuda-EvtHandlr"


class SynthSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """What to generate. Every field has a default; the CLI fills the first ones."""

    ranks: int = 2
    #: hosts the ranks are spread over (None: one host per rank)
    hosts: int | None = None
    gpus_per_rank: int = 1
    #: captured training steps per export
    steps: int = 10
    #: capture ranges per rank (one export each), separated by as many uncaptured steps
    slices: int = 1
    nsys_version: NsysVersion = "2026.2"
    seed: int = 0
    #: compute-time factor of the slow rank
    imbalance: float = 1.25
    #: which rank is slow (None: the last one)
    slow_rank: int | None = None
    #: transformer layers per step (= gradient buckets, one NCCL all-reduce each)
    layers: int = 12
    steps_per_epoch: int = 100
    #: write TARGET_INFO_GPU (None: as real exports of that version do; 2026.2 omits it)
    target_info_gpu: bool | None = None
    #: write MPI_RANKS (globalTid -> rank), as nsys does when MPI is traced
    mpi_ranks_table: bool = True
    #: steps generated and inserted at once (memory is O(batch_steps))
    batch_steps: int = 64

    def check(self) -> None:
        """Raise ConfigError naming the bad field."""
        for name in ("ranks", "gpus_per_rank", "steps", "slices", "layers", "steps_per_epoch",
                     "batch_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"synth: {name} must be at least 1, got {getattr(self, name)}")
        if self.hosts is not None and not 1 <= self.hosts <= self.ranks:
            raise ConfigError(f"synth: hosts must be between 1 and ranks ({self.ranks}), "
                              f"got {self.hosts}")
        if self.imbalance < 1.0:
            raise ConfigError(f"synth: imbalance is a slowdown factor >= 1, got {self.imbalance}")
        if self.slow_rank is not None and not 0 <= self.slow_rank < self.ranks:
            raise ConfigError(f"synth: slow_rank must name a rank below {self.ranks}")
        if self.nsys_version not in NSYS_VERSIONS:
            raise ConfigError(f"synth: nsys_version must be one of {sorted(NSYS_VERSIONS)}")

    @property
    def slow(self) -> int:
        return self.ranks - 1 if self.slow_rank is None else self.slow_rank

    @property
    def has_gpu_table(self) -> bool:
        if self.target_info_gpu is None:
            return self.nsys_version != "2026.2"
        return self.target_info_gpu


class RankLayout(msgspec.Struct, frozen=True):
    """Where a rank runs: host name, pid, local GPU ids, clock."""

    rank: int
    host: str
    host_index: int
    pid: int
    devices: tuple[int, ...]
    skew_ns: int          # session start after the job's reference instant
    clock_base: int       # session-clock value at the job's reference instant


def rank_layout(spec: SynthSpec, rank: int) -> RankLayout:
    """Host, pid, GPUs and clock of ``rank`` (ranks fill hosts in order)."""
    hosts = spec.hosts or spec.ranks
    per_host = math.ceil(spec.ranks / hosts)
    host_index, local = divmod(rank, per_host)
    rng = np.random.default_rng([spec.seed, 7, rank])
    host_rng = np.random.default_rng([spec.seed, 11, host_index])
    pid = 20_000 + int(host_rng.integers(0, 40_000)) + 97 * local
    skew = int(rng.integers(0, _MAX_SKEW_NS))
    if spec.nsys_version == "2026.2":
        base = int(host_rng.integers(10, 5_000)) * 10**9 + int(host_rng.integers(0, 10**9))
    else:   # the session clock starts near zero: the earliest event is at a few tens of ms
        base = int(rng.integers(20_000_000, 80_000_000)) - skew
    g = spec.gpus_per_rank
    return RankLayout(rank=rank, host=f"node{host_index:02d}", host_index=host_index, pid=pid,
                      devices=tuple(range(local * g, local * g + g)), skew_ns=skew,
                      clock_base=base)


def export_name(spec: SynthSpec, rank: int, slice_: int = 0) -> str:
    """``rank0003.sqlite``, or ``rank0003.slice02.sqlite`` when there are several slices."""
    if spec.slices == 1:
        return f"rank{rank:04d}.sqlite"
    return f"rank{rank:04d}.slice{slice_:02d}.sqlite"


