"""A small report read whole and sorted once gives the trace and summaries that merging its
kinds chunk by chunk gives (``pipeline.report_stream(whole_rows=...)``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prvstream.daemon.config import Settings, load_settings
from prvstream.daemon.stream import pipeline, trace
from prvstream.daemon.stream.batch import convert
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.summary import encode_record
from tests.conftest import real_exports


def _converted(inputs: list[str], out: Path, settings: Settings) -> bytes:
    out.parent.mkdir()
    model = EfficiencyModel(out.name, window_ns=int(settings.window * 1e9), flush_rows=64)
    history = out.with_name(out.name + ".summary.jsonl")
    convert(inputs, out, settings, model=model, summary_jsonl=history)
    return b"".join([*(out.with_name(out.name + ext).read_bytes()
                       for ext in (".prv", ".pcf", ".row", ".summary.jsonl")),
                     encode_record(model.state())])


@pytest.mark.parametrize(("chunk_rows", "whole_rows"), [(2048, None), (97, 10**7)])
def test_whole_small_reports_convert_as_merged_ones(tmp_path: Path, chunk_rows: int,
                                                    whole_rows: int | None,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Real exports and synthetic ranks: the default (reports up to ``chunk_rows`` rows
    whole), and every report whole, read in many chunks."""
    inputs = [str(p) for p in write_job(tmp_path / "src", SynthSpec(ranks=3, steps=2, seed=7))]
    inputs += [str(p) for p in real_exports()]
    settings = load_settings(None, {"chunk_rows": chunk_rows, "log_level": "error"},
                             environ={})
    wholes: list[int] = []
    real_whole = pipeline.merge_whole

    def counted(streams: list[pipeline.Stream]) -> pipeline.Stream:
        wholes.append(len(streams))
        return real_whole(streams)

    monkeypatch.setattr(pipeline, "merge_whole", counted)
    real_stream = trace.report_stream
    if whole_rows is not None:
        monkeypatch.setattr(trace, "report_stream",
                            lambda *a, **k: real_stream(*a, **{**k, "whole_rows": whole_rows}))
    whole = _converted(inputs, tmp_path / "whole" / "out", settings)
    assert wholes  # some report was small enough
    monkeypatch.setattr(trace, "report_stream",
                        lambda *a, **k: real_stream(*a, **{**k, "whole_rows": 0}))
    wholes.clear()
    merged = _converted(inputs, tmp_path / "merged" / "out", settings)
    assert not wholes
    assert whole == merged


def test_the_routers_release_cadence_changes_no_output(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The activity router is released every ``RELEASE_RECORDS`` merged records: released at
    every batch, or only at the end of each report, the sink gets the same rows in the same
    order, so the trace and the summaries are the same bytes."""
    inputs = [str(p) for p in write_job(tmp_path / "src", SynthSpec(ranks=2, steps=3, seed=3))]
    settings = load_settings(None, {"chunk_rows": 97, "log_level": "error"}, environ={})
    real_stream = trace.report_stream
    monkeypatch.setattr(trace, "report_stream",
                        lambda *a, **k: real_stream(*a, **{**k, "whole_rows": 0}))
    releases: list[int | None] = []
    real_release = pipeline.ActivityRouter.release

    def counted(self: pipeline.ActivityRouter, horizon: int | None) -> None:
        releases.append(horizon)
        real_release(self, horizon)

    monkeypatch.setattr(pipeline.ActivityRouter, "release", counted)
    outputs = []
    for every in (1, 10**9):
        monkeypatch.setattr(pipeline, "RELEASE_RECORDS", every)
        releases.clear()
        outputs.append(_converted(inputs, tmp_path / str(every) / "out", settings))
        assert (len(releases) > 10) if every == 1 else all(h is None for h in releases)
    assert outputs[0] == outputs[1]
