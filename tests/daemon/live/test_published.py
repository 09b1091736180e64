"""The live trace's kept-formatted header, ``.row`` and ``.pcf`` equal what the numbering
gives when formatted from scratch, however it grew between commits."""

from __future__ import annotations

import tempfile
from pathlib import Path
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.live import published as published_module
from prvstream.daemon.live.published import Published, SpillBuffer
from prvstream.daemon.stream.numbering import Numbering, cpu_key, gpu_key, state_json
from prvstream.daemon.stream.trace import trace_metadata
from prvstream.sinks.paraver import format as pv

#: one growth step: (host, pid, thread tid or -1 for a GPU stream, value group, label)
_step = st.tuples(st.sampled_from(["n1", "n2", "node\u2028three"]),
                  st.integers(1, 6), st.integers(-1, 4),
                  st.sampled_from(["kernel", "api", "nvtx_domain"]),
                  st.text(alphabet="abc\x85 ", max_size=4))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_step, max_size=6), min_size=1, max_size=6), st.booleans())
def test_published_equals_formatting_from_scratch(commits: list[list[tuple]],
                                                  spilled: bool) -> None:
    with tempfile.TemporaryDirectory() as folder, \
            mock.patch.object(published_module, "SPILL_AT", 40):
        _published_equals_formatting_from_scratch(commits, Path(folder) if spilled else None)
        assert not list(Path(folder).iterdir())  # the lines' files are never named


def _published_equals_formatting_from_scratch(commits: list[list[tuple]],
                                              folder: Path | None) -> None:
    numbering = Numbering()
    published = Published(numbering, folder)
    for commit in commits:
        for host, pid, tid, group, label in commit:
            task = numbering.task(host, pid, f"proc{pid}")
            key = cpu_key(tid) if tid >= 0 else gpu_key(0, pid)
            numbering.thread(task, key, f"t{tid}")
            numbering.value(group, label)
        pcf, row = trace_metadata(numbering)
        assert published.pcf() == pcf
        assert b"".join(published.row_pieces()) == row
        want = pv.header_line(numbering.layout(), 12345, 10**18, 4096)
        assert published.header(12345, 10**18, 4096) == want


@settings(max_examples=60, deadline=None)
@given(st.lists(_step, max_size=8), st.lists(_step, min_size=1, max_size=8))
def test_numbering_undo_forgets_exactly_what_came_after_the_mark(
        before: list[tuple], after: list[tuple]) -> None:
    import msgspec

    def add(numbering: Numbering, steps: list[tuple]) -> None:
        for host, pid, tid, group, label in steps:
            task = numbering.task(host, pid, f"proc{pid}")
            numbering.thread(task, cpu_key(tid) if tid >= 0 else gpu_key(0, pid), f"t{tid}")
            numbering.value(group, label)

    numbering = Numbering()
    add(numbering, before)
    state = numbering.state
    at_mark = state_json(state)
    mark = numbering.mark()
    add(numbering, after)
    numbering.undo(mark)
    assert numbering.state is state
    assert state_json(state) == at_mark
    fresh = Numbering(msgspec.json.decode(at_mark, type=type(state)))
    add(numbering, after)  # ids handed out again as a fresh copy would
    add(fresh, after)
    assert state_json(numbering.state) == state_json(fresh.state)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 24), st.lists(st.tuples(st.integers(0, 1000), st.binary(max_size=9)),
                                    max_size=12))
def test_a_spill_buffer_holds_what_a_bytearray_does(spill_at: int,
                                                    inserts: list[tuple[int, bytes]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        buffer, plain = SpillBuffer(Path(folder), spill_at), bytearray()
        for at, data in inserts:
            at = at % (len(plain) + 1)
            buffer.insert(at, data)
            plain[at:at] = data
            assert len(buffer) == len(plain)
            assert b"".join(buffer.pieces()) == plain
        buffer.close()
        assert len(buffer) == 0
