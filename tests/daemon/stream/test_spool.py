"""The report spool: a sink feed recorded to a temporary file and replayed exactly."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.stream.spool import InOrderReplay, ReportSpool
from prvstream.sinks.base import ACTIVITY_DTYPE, PHASE_DTYPE, ReportInfo


class Recorder:
    """A sink that remembers every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def begin_report(self, info: ReportInfo) -> None:
        self.calls.append(("begin", info.report_id))

    def add_activity(self, batch: np.ndarray) -> None:
        self.calls.append(("activity", batch["start"].tolist()))

    def add_phases(self, batch: np.ndarray) -> None:
        self.calls.append(("phases", batch["start"].tolist()))

    def end_report(self) -> None:
        self.calls.append(("end", None))


def _info() -> ReportInfo:
    return ReportInfo(report_id="r.sqlite", processes=[], devices=[], origin_wall_ns=0,
                      start_ns=0, end_ns=100, phase_names=[])


def _rows(dtype: np.dtype, starts: list[int]) -> np.ndarray:
    out = np.zeros(len(starts), dtype=dtype)
    out["start"] = starts
    return out


def _feed(sink: ReportSpool | Recorder) -> None:
    sink.begin_report(_info())
    sink.add_activity(_rows(ACTIVITY_DTYPE, [1, 2]))
    sink.add_phases(_rows(PHASE_DTYPE, [3]))
    sink.add_activity(_rows(ACTIVITY_DTYPE, [4]))
    sink.end_report()


def test_replay_gives_the_feed_in_order(tmp_path: Path) -> None:
    spool = ReportSpool(tmp_path)
    _feed(spool)
    direct, replayed = Recorder(), Recorder()
    _feed(direct)
    spool.replay(replayed)
    assert replayed.calls == direct.calls
    again = Recorder()
    spool.replay(again)  # a spool replays as often as asked
    assert again.calls == direct.calls
    spool.discard()
    assert list(tmp_path.iterdir()) == []


def test_an_unfinished_report_cannot_be_replayed(tmp_path: Path) -> None:
    spool = ReportSpool(tmp_path)
    spool.begin_report(_info())
    with pytest.raises(RuntimeError, match="did not finish"):
        spool.replay(Recorder())
    spool.discard()


def test_detached_spool_is_replayed_by_another_owner(tmp_path: Path) -> None:
    spool = ReportSpool(tmp_path)
    _feed(spool)
    path, info = spool.detach()
    attached = ReportSpool.attach(path, info)
    got, direct = Recorder(), Recorder()
    attached.replay(got)
    _feed(direct)
    assert got.calls == direct.calls
    attached.discard()
    assert not Path(path).exists()


def test_a_spool_without_a_directory_leaves_no_file_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    spool = ReportSpool()
    spool.begin_report(_info())
    spool.add_activity(_rows(ACTIVITY_DTYPE, [1]))
    assert list(tmp_path.iterdir()) == []  # unlinked at once: a kill -9 leaks nothing
    spool.end_report()
    with pytest.raises(RuntimeError, match="anonymous"):
        spool.detach()
    spool.discard()


def _frames(spool: ReportSpool) -> int:
    import pickle

    spool._fh.flush()
    spool._fh.seek(0)
    count = 0
    while True:
        try:
            pickle.load(spool._fh)
        except EOFError:
            return count
        count += 1


@pytest.mark.parametrize("parts", [1, 5, 63, 64, 65, 300])
def test_parts_are_written_in_frames_and_replayed_in_order(tmp_path: Path, parts: int) -> None:
    """A small report's parts are one frame; many parts or many rows make more frames, held
    in memory up to a bound; the replay is the feed in order either way."""
    spool, direct, replayed = ReportSpool(tmp_path), Recorder(), Recorder()
    big = np.arange(5000)
    for sink in (spool, direct):
        sink.begin_report(_info())
        for i in range(parts):
            if i % 2:
                sink.add_phases(_rows(PHASE_DTYPE, [i]))
            else:
                sink.add_activity(_rows(ACTIVITY_DTYPE, (big + i).tolist() if i % 10 == 4
                                        else [i, i + 1]))
        sink.end_report()
    spool.replay(replayed)
    assert replayed.calls == direct.calls
    assert 1 <= _frames(spool) <= 1 + parts // 64 + parts // 20
    if parts <= 5:
        assert _frames(spool) == 1
    spool.discard()


def _report_feed(sink: ReportSpool | Recorder, key: int, parts: list[int]) -> None:
    """Report ``key``'s feed: one activity part per entry of ``parts`` (that many rows)."""
    sink.begin_report(ReportInfo(report_id=f"r{key}", processes=[], devices=[],
                                 origin_wall_ns=0, start_ns=0, end_ns=100, phase_names=[]))
    for i, n in enumerate(parts):
        sink.add_activity(_rows(ACTIVITY_DTYPE, [1000 * key + i] * n))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), hold=st.integers(1, 4))
def test_in_order_replay_feeds_reports_in_key_order_with_few_held(data: st.DataObject,
                                                                   hold: int) -> None:
    """Reports streamed in any interleaving (begun in one order, ended in another) reach the
    sink in key order, each exactly as its own feed; at most ``hold`` ended reports wait in
    memory (the rest were written to their files); nothing is left once all are replayed."""
    n = data.draw(st.integers(1, 9), label="reports")
    feeds = data.draw(st.lists(st.lists(st.sampled_from([1, 3, 5000]), max_size=4),
                               min_size=n, max_size=n), label="parts")
    begun = data.draw(st.permutations(range(n)), label="begin order")
    ended = data.draw(st.permutations(range(n)), label="end order")
    sink = Recorder()
    replay = InOrderReplay(sink, list(range(n)), hold)  # type: ignore[arg-type]
    spools = {}
    for key in begun:
        spools[key] = replay.spool(key)
        _report_feed(spools[key], key, feeds[key])
    for key in ended:
        spools[key].end_report()
        in_memory = [s for _, s in replay._waiting if s.holding]
        assert len(in_memory) <= hold
    replay.finish()
    expected = Recorder()
    for key in range(n):
        _report_feed(expected, key, feeds[key])
        expected.end_report()
    assert sink.calls == expected.calls
    assert replay._spools == {} and replay._waiting == []
    assert all(s._fh is None or s._fh.closed for s in spools.values())


def test_in_order_replay_refuses_a_report_that_never_ended() -> None:
    replay = InOrderReplay(Recorder(), ["a", "b"], 2)  # type: ignore[arg-type]
    for key in ("a", "b"):
        _report_feed(replay.spool(key), 0, [1])
    replay._spools["a"].end_report()
    with pytest.raises(RuntimeError, match="never ended"):
        replay.finish()
    replay.discard()
