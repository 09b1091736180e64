"""A batch conversion feeds the efficiency model each report as soon as it and every report
before it have streamed (``spool.InOrderReplay``): the summaries are byte for byte those of
spooling every report to a file and replaying them all after the trace is written."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prvstream.daemon.config import Settings, load_settings
from prvstream.daemon.stream.batch import SummaryHistory, convert
from prvstream.daemon.stream.pipeline import PreparedReport, prepare
from prvstream.daemon.stream.spool import ReportSpool
from prvstream.daemon.stream.trace import write_trace
from prvstream.daemon.synthetic.spec import SynthSpec
from prvstream.daemon.synthetic.synth import write_export
from prvstream.sinks.base import Sink
from prvstream.sinks.efficiency import EfficiencyModel


def _model() -> EfficiencyModel:
    return EfficiencyModel("job", window_ns=2_000_000, flush_rows=8192)


def _spooled_then_replayed(paths: list[Path], out: Path, conf: Settings) -> bytes:
    """The summaries as batch conversion made them before: every report spooled to a file
    while the trace is written, then all replayed in canonical order."""
    reports = [prepare(p, None) for p in paths]
    spools: dict[Path, ReportSpool] = {}

    def spool_for(rep: PreparedReport) -> Sink:
        spools[rep.path] = ReportSpool()
        return spools[rep.path]

    model = _model()
    history = SummaryHistory(out.with_name("ref.summary.jsonl"))
    try:
        write_trace(reports, out, conf, sink_for=spool_for)
        model.hold_updates()
        for rep in sorted(reports, key=lambda r: r.sort_key):
            spools[rep.path].replay(model)
        model.release_updates()
        history.publish_updates(model)
        history.commit()
    finally:
        for rep in reports:
            rep.close()
        for spool in spools.values():
            spool.discard()
    return out.with_name("ref.summary.jsonl").read_bytes()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ranks=st.integers(2, 6), steps=st.integers(1, 3), layers=st.integers(1, 3),
       slices=st.integers(1, 2), seed=st.integers(0, 3), fan_in=st.sampled_from([2, 3, 16]),
       chunk_rows=st.sampled_from([97, 2048]), data=st.data())
def test_in_order_replay_gives_the_summaries_of_replaying_after(
        ranks: int, steps: int, layers: int, slices: int, seed: int, fan_in: int,
        chunk_rows: int, data: st.DataObject) -> None:
    spec = SynthSpec(ranks=ranks, hosts=max(1, ranks // 2), steps=steps, layers=layers,
                     slices=slices, seed=seed)
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        paths = [write_export(tmp / f"r{r}s{s}.sqlite", spec, r, s)
                 for r in range(ranks) for s in range(slices)]
        group = data.draw(st.lists(st.sampled_from(paths), min_size=2, unique=True),
                          label="group")
        conf = load_settings(None, {"fan_in": fan_in, "chunk_rows": chunk_rows}, environ={})
        model = _model()
        convert([str(p) for p in group], tmp / "new", conf, model=model,
                summary_jsonl=tmp / "new.summary.jsonl")
        expected = _spooled_then_replayed(group, tmp / "ref", conf)
        assert (tmp / "new.summary.jsonl").read_bytes() == expected
        assert (tmp / "new.prv").read_bytes() == (tmp / "ref.prv").read_bytes()
