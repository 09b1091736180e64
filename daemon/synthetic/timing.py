"""Durations and timing of a synthetic job's steps: per batch of steps, per rank and slice,
bounded noise around the model's template (deterministic for a spec and seed).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from prvstream.daemon.synthetic.model import (
    KERNELS,
    Template,
    schedule,
    template,
)
from prvstream.daemon.synthetic.spec import _EPOCH0, _NOISE, LEAD_NS, SynthSpec
from prvstream.sinks.logger import get_logger

__all__ = ["durations", "slice_timing", "step_batches"]

log = get_logger(__name__)


# --------------------------------------------------------------------------- durations


def step_batches(spec: SynthSpec) -> list[tuple[int, int]]:
    return [(b, min(spec.batch_steps, spec.steps - b * spec.batch_steps))
            for b in range(math.ceil(spec.steps / spec.batch_steps))]


def _base(spec: SynthSpec, t: Template, slice_: int, batch: int, n: int) -> tuple[np.ndarray, ...]:
    """Job-wide durations of a batch (every rank draws the same): cpu, cpu gaps, gpu, gpu gaps."""
    rng = np.random.default_rng([spec.seed, 1, slice_, batch])
    cpu = (t.slot_ns * rng.lognormal(0.0, 0.15, (n, len(t.slot_ns)))).astype(np.int64)
    gap = rng.integers(300, 2_500, (n, len(t.slot_ns)), dtype=np.int64)
    gpu = (t.op_ns * rng.lognormal(0.0, 0.05, (n, len(t.op_ns)))).astype(np.int64)
    ggap = rng.integers(800, 2_500, (n, len(t.op_ns)), dtype=np.int64)
    loader = rng.integers(200_000, 900_000, n, dtype=np.int64)   # between steps
    return cpu, gap, gpu, ggap, loader


def _factor(spec: SynthSpec, rank: int | None) -> float:
    if rank is None:   # the bound: the slowest compute factor
        return spec.imbalance if spec.ranks > 1 or spec.slow == 0 else 1.0
    return spec.imbalance if rank == spec.slow else 1.0


def durations(spec: SynthSpec, t: Template, slice_: int, batch: int, n: int,
               rank: int | None) -> tuple[np.ndarray, ...]:
    """Durations for ``rank``, or (rank None) their upper bound over all ranks."""
    cpu, gap, gpu, ggap, loader = _base(spec, t, slice_, batch, n)
    scale = np.where(t.op_scaled == 1, _factor(spec, rank), 1.0)
    noisy = t.op_kernel != len(KERNELS) - 1     # NCCL transfer time is common to all ranks
    if rank is None:
        up = 1.0 + _NOISE
        return ((cpu * up).astype(np.int64), (gap * up).astype(np.int64),
                (gpu * scale * np.where(noisy, up, 1.0)).astype(np.int64),
                (ggap * up).astype(np.int64), loader)
    rng = np.random.default_rng([spec.seed, 2, slice_, batch, rank])
    def jitter(shape: tuple[int, ...]) -> np.ndarray:
        return 1.0 + rng.uniform(0.0, _NOISE, shape)
    g = gpu * scale * np.where(noisy, jitter(gpu.shape), 1.0)
    return ((cpu * jitter(cpu.shape)).astype(np.int64), (gap * jitter(gap.shape)).astype(np.int64),
            g.astype(np.int64), (ggap * jitter(ggap.shape)).astype(np.int64), loader)


@lru_cache(maxsize=64)
def slice_timing(spec: SynthSpec, slice_: int) -> tuple[int, tuple[int, ...], tuple[Any, ...]]:
    """Wall-clock start of the slice's first step, its batches' start offsets, and per-batch
    (step starts relative to the slice start, NCCL global-ready times)."""
    t = template(spec.layers, spec.gpus_per_rank)
    if slice_ == 0:
        start = _EPOCH0 + (spec.seed % 100_000) * 3_600 * 10**9 + LEAD_NS
    else:
        prev_start, _, prev = slice_timing(spec, slice_ - 1)
        starts = prev[-1][0]
        end = prev_start + int(starts[-1]) + int(prev[-1][2])
        start = end + (end - prev_start)          # as many uncaptured steps as captured ones
    offsets: list[int] = []
    per_batch: list[Any] = []
    offset = 0
    for b, n in step_batches(spec):
        cpu, gap, gpu, ggap, loader = durations(spec, t, slice_, b, n, None)
        s = schedule(t, cpu, gap, gpu, ggap, None)
        length = s.cpu_end + loader
        rel = offset + np.concatenate([[0], np.cumsum(length)[:-1]])
        offsets.append(offset)
        per_batch.append((rel, s.bucket_ready, int(length[-1])))
        offset += int(length.sum())
    return start, tuple(offsets), tuple(per_batch)


