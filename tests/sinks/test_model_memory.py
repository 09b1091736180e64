"""The efficiency model's memory per report stays bounded (issue 11: 10x the reports for < 1.3x
the memory): what a committed report leaves behind is a few fixed-size records, not Python
objects that grow with it, and a commit's checkpoint never holds the whole state."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np

from prvstream.sinks.base import HOST_DTYPE, feed_interleaved
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.efficiency.partial import encode_partial, encode_state_chunks
from tests.sinks.test_efficiency import C, M, acts, phases, report
from tests.traced import collector_paused

#: what one tiny report (one process, one GPU, one phase occurrence, two host threads) may
#: leave in the model, by design: a device's columns (~0.1 KB) and a HostProcess with slots, their
#: totals and packed rows (a few int64 arrays, ~0.1 KB of header each, ~1.2 KB), the phase
#: instance's occurrence span and index (~0.5 KB), the device and process keys in the
#: lookups (~0.6 KB) and the host windows (~0.5 KB): about 3.5 KB. Measured at 4.0 KB
#: (5.6 KB before this bound: the stream spans and thread spans as dicts of lists of
#: tuples, objects without slots).
RETAINED_PER_REPORT = 4608
#: a group commit's checkpoint, encoded a device at a time, holds one device's state and a
#: few references per device and process for their order (measured ~300 B a device), not
#: the job's state as objects (~4.6 KB a device before ``encode_state_chunks``)
CHECKPOINT_PER_DEVICE = 512


def _feed(model: EfficiencyModel, r: int) -> None:
    t0 = 1_000_000 * r
    model.begin_report(report(f"r{r:05}", f"h{r // 8}", 1000 + r, r, [r % 8], t0,
                              t0 + 900_000, phase_names=["step"]))
    model.add_host(np.array([(t0 + 10, t0 + 500, 0, 0, 1), (t0 + 20, t0 + 600, 0, 0, 2)],
                            dtype=HOST_DTYPE))
    feed_interleaved(model, acts([(t0 + 100, t0 + 400, 0, 0, C), (t0 + 200, t0 + 300, 0, 1, M)]),
                     phases([(t0 + 50, t0 + 800, 0, 0)]), 4)
    model.end_report()


def _commit(model: EfficiencyModel) -> None:
    model.release_updates()
    for _ in model.iter_updates():
        pass
    model.state_json()


def test_a_report_leaves_a_bounded_number_of_bytes_in_the_model() -> None:
    model = EfficiencyModel("j")
    first, last, group = 100, 400, 50
    tracemalloc.start(1)
    try:
        traced: dict[int, int] = {}
        for r in range(last):
            if r % group == 0:
                model.hold_updates()
            _feed(model, r)
            if r % group == group - 1:
                _commit(model)
            if r + 1 in (first, last):
                gc.collect()
                traced[r + 1] = tracemalloc.get_traced_memory()[0]
        # the checkpoint in pieces: its peak above what is held
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        with collector_paused():
            size = sum(len(chunk) for chunk in encode_state_chunks(model))
        chunked_peak = tracemalloc.get_traced_memory()[1] - held
    finally:
        tracemalloc.stop()
    per_report = (traced[last] - traced[first]) / (last - first)
    assert 0 < per_report < RETAINED_PER_REPORT, per_report
    assert size == len(encode_partial(model.partial()))
    assert chunked_peak < CHECKPOINT_PER_DEVICE * last, chunked_peak


def _records_peak(occurrences: int) -> tuple[int, int]:
    """Records of one report with ``occurrences`` phase occurrences: how many, and the traced
    peak above what the model holds while they are consumed one at a time."""
    model = EfficiencyModel("j")
    step = 1_000
    model.begin_report(report("r", "h", 1, 0, [0], 0, occurrences * step + step,
                              phase_names=["step"]))
    feed_interleaved(model, acts([(10, occurrences * step, 0, 0, C)]),
                     phases([(k * step, k * step + step // 2, 0, 0)
                             for k in range(occurrences)]), 4096)
    model.end_report()
    gc.collect()
    tracemalloc.start(1)
    try:
        held = tracemalloc.get_traced_memory()[0]
        with collector_paused():
            count = sum(1 for _ in model.iter_updates())
        return count, tracemalloc.get_traced_memory()[1] - held
    finally:
        tracemalloc.stop()


def test_a_reports_records_are_built_in_memory_that_does_not_grow_with_its_phases() -> None:
    # one record per phase occurrence: building them held every instance id as a Python int
    # at once (~40 B an occurrence, the end of a 10M-row conversion's peak)
    small, big = 2_500, 7_500
    n_small, peak_small = _records_peak(small)
    n_big, peak_big = _records_peak(big)
    assert n_big - n_small == big - small
    assert peak_big - peak_small < 8 * (big - small), (peak_small, peak_big)
