"""Summary records written a slice of rows at a time (issue 11, flat in the number of reports):
the bytes do not depend on the slice, are the encoding of the record they decode to, and
making them holds memory that does not grow with the devices listed."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.base import HOST_DTYPE, feed_interleaved
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.summary import encoded
from prvstream.sinks.summary.records import encode_record
from tests.sinks.test_efficiency import C, M, acts, phases, report
from tests.traced import collector_paused

#: what making one update's records (cumulative, phase total, window, phase instance, each
#: listing every device, rank and host process) may hold a device, at its peak: columns
#: (totals, captured time, group codes: ~200 B) and the rank names (~100 B). Building them
#: as objects held ~4 KB a device (~1 KB a device per record, four of them at once).
PEAK_PER_DEVICE = 640


def _model(ranks: list[tuple[int, int | None, int, int]], *, group: int = 0) -> EfficiencyModel:
    """One report per (host, rank, gpus, phase occurrences) entry: a process with host
    threads, GPU activity and ``step`` phases; reports in groups of ``group`` (0: alone)."""
    model = EfficiencyModel("j", window_ns=400_000)
    for r, (host, rank, gpus, occ) in enumerate(ranks):
        if group and r % group == 0:
            model.hold_updates()
        t0 = 1_000_000 * (r % 3)
        model.begin_report(report(f"r{r:05}", f"h{host}", 1000 + r, rank, list(range(gpus)),
                                  t0, t0 + 900_000, phase_names=["step"]))
        model.add_host(np.array([(t0 + 10, t0 + 500 + r, 0, 0, 1),
                                 (t0 + 20, t0 + 600, 0, 0, 2)], dtype=HOST_DTYPE))
        rows = [(t0 + 100 + 7 * g, t0 + 400 + r, g, 0, C) for g in range(gpus)]
        rows += [(t0 + 200, t0 + 300 + 11 * r, 0, 1, M)]
        rows.sort()
        feed_interleaved(model, acts(rows),
                         phases([(t0 + 50 + 200 * k, t0 + 150 + 200 * k, 0, 0)
                                 for k in range(occ)]), 4)
        model.end_report()
        if group and r % group == group - 1:
            model.release_updates()
    model.release_updates()
    return model


def _bytes(model: EfficiencyModel) -> tuple[list[bytes], bytes, bytes]:
    records = [r.data for r in model.iter_encoded()]
    return records, b"".join(model.state_pieces()), model.state_json()


_RANKS = st.lists(st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(0, 5)),
                            st.integers(1, 3), st.integers(0, 3)), min_size=1, max_size=12)


@settings(max_examples=25, deadline=None)
@given(ranks=_RANKS, group=st.integers(0, 4), at_once=st.sampled_from([1, 2, 5]))
def test_records_do_not_depend_on_the_slice_and_decode_to_what_they_encode(
        ranks: list[tuple[int, int | None, int, int]], group: int, at_once: int) -> None:
    whole = _bytes(_model(ranks, group=group))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(encoded, "ROWS_AT_ONCE", at_once)
        sliced = _bytes(_model(ranks, group=group))
    assert sliced == whole
    records, pieces, state_json = whole
    assert pieces == state_json
    for data in records:
        assert encode_record(encoded.EncodedRecord.of_bytes(
            _key(), data).record())[:-1] == data


def _key() -> encoded.EncodedRecord:
    return encoded.EncodedRecord("", "", 0, 0, lambda: iter(()))


def test_updates_are_the_objects_of_their_bytes() -> None:
    ranks = [(k % 3, k if k % 4 else None, 1 + k % 2, 2) for k in range(9)]
    lines = b"".join(_model(ranks, group=4).iter_update_bytes())
    objects = b"".join(encode_record(r) for r in _model(ranks, group=4).iter_updates())
    assert lines == objects
    assert lines.count(b"\n") > 4


def _update_peak(devices: int) -> int:
    """Traced peak above what the model holds while one update's records are made and
    written (as a live commit does: the state kept, then the lines and ``summary.json``)."""
    model = _model([(r // 8, r, 1, 1) for r in range(devices)], group=devices)
    for _ in model.iter_update_bytes():
        pass
    model.hold_updates()
    for r in range(devices, devices + 2):  # the next update lists every device again
        t0 = 1_000_000 * (r % 3)
        model.begin_report(report(f"r{r:05}", f"h{r // 8}", 1000 + r, r, [0], t0,
                                  t0 + 900_000, phase_names=["step"]))
        feed_interleaved(model, acts([(t0 + 100, t0 + 400, 0, 0, C)]),
                         phases([(t0 + 50, t0 + 150, 0, 0)]), 4)
        model.end_report()
    gc.collect()
    tracemalloc.start(1)
    try:
        held = tracemalloc.get_traced_memory()[0]
        with collector_paused():
            model.release_updates()
            for _ in model.iter_update_bytes():
                pass
            for _ in model.state_pieces():
                pass
        return tracemalloc.get_traced_memory()[1] - held
    finally:
        tracemalloc.stop()


def test_an_update_of_every_device_holds_memory_that_does_not_grow_a_record_per_device(
) -> None:
    small, big = 300, 1200
    grown = _update_peak(big) - _update_peak(small)
    assert grown < PEAK_PER_DEVICE * (big - small), grown / (big - small)
