"""One report's pipeline: what it converts, its stream in time order, the sink fed in order."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from prvstream.daemon.stream.numbering import Numbering
from prvstream.daemon.stream.pipeline import (
    ActivityRouter,
    objects_of,
    prepare,
    report_context,
    report_stream,
    value_labels_of,
)
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from prvstream.sinks.base import ACTIVITY_DTYPE, PHASE_DTYPE
from prvstream.sinks.errors import UnsupportedSchema
from tests.conftest import make_db
from tests.daemon.stream.test_spool import Recorder

G = 7 << 24


@pytest.fixture
def export_path(tmp_path: Path) -> Path:
    return write_job(tmp_path / "job", SynthSpec(ranks=1, steps=3, seed=2))[0]


def test_prepare_chooses_kinds_and_derived_ones(export_path: Path) -> None:
    rep = prepare(export_path)
    try:
        assert {"kernel", "runtime", "nvtx", "comm"} <= set(rep.kinds)
        assert rep.kinds[-1] == "comm"  # derived kinds after the table kinds
    finally:
        rep.close()
    only = prepare(export_path, ["kernel"])
    try:
        assert only.kinds == ["kernel"]
    finally:
        only.close()


def test_a_report_without_cuda_activity_is_not_converted(tmp_path: Path) -> None:
    path = make_db(tmp_path / "osrt.sqlite", {
        "StringIds": (["id INTEGER PRIMARY KEY", "value"], [(1, "read")]),
        "OSRT_API": (["start", "end", "globalTid", "nameId"], [(10, 20, G | 1, 1)]),
    })
    with pytest.raises(UnsupportedSchema, match="no CUDA/GPU activity"):
        prepare(path)


def test_report_stream_is_time_ordered_and_feeds_the_sink_in_order(export_path: Path) -> None:
    rep = prepare(export_path)
    try:
        numbering = Numbering()
        ctx, info = report_context(rep, numbering, rep.wall_start, 0, r"^step")
        sink, counts = Recorder(), Counter[str]()
        times, marks = [], []
        for batch, watermark in report_stream(rep, ctx, info, 64, sink, counts):
            times.append(batch.keys[:, 0])
            marks.append(watermark)
        every = np.concatenate(times)
        assert np.all(np.diff(every) >= 0) and marks == sorted(marks)
        assert {k: counts[k] for k in rep.plan.counts} == rep.plan.counts
        assert sink.calls[0] == ("begin", export_path.name) and sink.calls[-1] == ("end", None)
        starts = [s for kind, got in sink.calls[1:-1] for s in got]  # type: ignore[union-attr]
        assert starts == sorted(starts)
        assert rep.source is None  # the stream took the chunk source over and freed it
    finally:
        rep.close()


def test_objects_and_labels_are_read_once(export_path: Path) -> None:
    rep = prepare(export_path)
    try:
        objects = objects_of(rep)
        assert objects_of(rep) is objects and len(objects) == len(rep.plan.processes)
        labels = value_labels_of(rep)
        assert value_labels_of(rep) is labels and labels["kernel"] and labels["api"]
    finally:
        rep.close()


def test_activity_router_releases_up_to_the_horizon() -> None:
    sink = Recorder()
    router = ActivityRouter(sink)
    activity = np.zeros(3, dtype=ACTIVITY_DTYPE)
    activity["start"] = [30, 10, 20]
    phases = np.zeros(1, dtype=PHASE_DTYPE)
    phases["start"] = 15
    router.add(activity, phases)
    router.release(25)
    assert sink.calls == [("activity", [10]), ("phases", [15]), ("activity", [20])]
    router.release(None)
    assert sink.calls[-1] == ("activity", [30])
