"""The Paraver trace writer: body behind a placeholder, header last, growth, metadata."""

from __future__ import annotations

import ast
import io
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.paraver import fastfmt
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.records import PRIO_BEGIN, RecordBatch, event_lines, make_keys
from prvstream.sinks.paraver.writer import (
    MAX_END_TIME,
    PrvWriter,
    grow_header,
    header_capacity,
    metadata,
    placeholder,
)

SINKS = Path(__file__).resolve().parents[3] / "sinks"


def _layout(tasks: int = 2) -> pv.TraceLayout:
    return pv.TraceLayout(nodes=["n1"], tasks=[pv.TaskLayout(f"t{i}", 1, ["a", "b"])
                                               for i in range(tasks)])


def _batch(times: list[int]) -> RecordBatch:
    t = np.array(times, dtype=np.int64)
    ones = np.ones(len(t), dtype=np.int64)
    lines = event_lines(ones, ones, t, (pv.EV_API, ones))
    return lines.batch(make_keys(t, PRIO_BEGIN, ones, ones, 21, 0, np.arange(len(t))))


def test_capacity_holds_any_end_time() -> None:
    layout = _layout(50)
    capacity = header_capacity(layout, 0)
    assert len(pv.header_line(layout, MAX_END_TIME, 0, capacity)) == capacity
    assert header_capacity(layout, 0, at_least=10**6) == 10**6
    assert placeholder(capacity).endswith(b"\n") and len(placeholder(capacity)) == capacity


def test_body_then_header_last(tmp_path: Path) -> None:
    layout = _layout()
    capacity = header_capacity(layout, 0)
    prv = tmp_path / "t.prv"
    with prv.open("wb") as fh:
        fh.write(placeholder(capacity))
        writer = PrvWriter(fh)
        writer.write(_batch([5, 7]))
        writer.write(RecordBatch())
        writer.write(_batch([9]))
        writer.finish(pv.header_line(layout, writer.end_time, 0, capacity))
    assert (writer.records, writer.end_time) == (3, 9)
    lines = prv.read_bytes().split(b"\n")
    assert lines[0].startswith(b"#Paraver (") and b":9_ns:" in lines[0]
    assert lines[1:] == [b"2:0:1:1:1:5:63000000:1", b"2:0:1:1:1:7:63000000:1",
                         b"2:0:1:1:1:9:63000000:1", b""]


def test_a_grown_header_keeps_the_body(tmp_path: Path) -> None:
    prv = tmp_path / "t.prv"
    body = b"2:0:1:1:1:5:63000000:1\n"
    prv.write_bytes(placeholder(64) + body)
    header = pv.header_line(_layout(), 5, 0, 4096)
    grow_header(prv, 64, header)
    assert prv.read_bytes() == header + body
    assert not list(tmp_path.glob(".*"))


def test_metadata_is_the_pcf_and_row_of_the_layout() -> None:
    specs = [pv.EventTypeSpec([(pv.EV_API, "CUDA API call")], {1: "cudaMalloc"})]
    pcf, row = metadata(specs, _layout())
    assert pcf.decode() == pv.pcf_text(specs) and row.decode() == pv.row_text(_layout())


def test_sinks_never_import_the_daemon() -> None:
    offenders = []
    for path in SINKS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            offenders += [f"{path.name}: {n}" for n in names if n.startswith("prvstream.daemon")]
    assert offenders == []


needs_c = pytest.mark.skipif(not fastfmt.WRITER.compiled(),
                             reason="the C formatter was not built: no writing thread")


def _writer_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "prv-writer"]


@pytest.mark.parametrize("behind", [False, True])
def test_a_writer_behind_writes_the_same_bytes(tmp_path: Path, behind: bool) -> None:
    """With ``behind`` the batches are formatted and written by a thread: the same bytes in
    the same order, the header last, and the thread and switch interval gone after."""
    switch = sys.getswitchinterval()
    batches = [_batch(list(range(i * 100, i * 100 + 1 + i % 7))) for i in range(200)]
    prv = tmp_path / "t.prv"
    with prv.open("wb") as fh:
        fh.write(placeholder(16))
        writer = PrvWriter(fh, behind=behind)
        # into a real file the C thread writes (no Python thread); else a Python one
        python_thread = (behind and fastfmt.WRITER.compiled()
                         and not fastfmt.THREAD.compiled())
        assert bool(_writer_threads()) == python_thread
        for b in batches:
            writer.write(b)
        writer.flush()
        body = b"".join(b.text() for b in batches)
        assert fh.tell() == 16 + len(body)  # the file object follows the thread's writes
        writer.finish(b"fifteen bytes.\n")
    assert not _writer_threads() and sys.getswitchinterval() == switch
    assert prv.read_bytes() == b"fifteen bytes.\n" + b"\n" + body
    assert writer.records == sum(len(b) for b in batches)
    assert writer.end_time == max(int(b.keys[:, 0].max()) for b in batches)


class _FailingFile(io.BytesIO):
    def __init__(self, after: int) -> None:
        super().__init__()
        self.after = after

    def write(self, data: object) -> int:
        self.after -= 1
        if self.after < 0:
            raise OSError(28, "No space left on device")
        return super().write(data)  # type: ignore[arg-type]


@needs_c
def test_a_write_error_behind_reaches_the_caller() -> None:
    writer = PrvWriter(_FailingFile(after=2), behind=True)
    with pytest.raises(OSError, match="No space"):
        for i in range(1000):
            writer.write(_batch([i]))
        writer.flush()
    writer.close()
    assert not _writer_threads()


needs_c_thread = pytest.mark.skipif(not fastfmt.THREAD.compiled(),
                                    reason="the C record writer thread was not built")


@needs_c_thread
def test_a_write_error_of_the_c_thread_reaches_the_caller() -> None:
    """/dev/full refuses every write (ENOSPC): the C thread's error is raised by a later
    write or by flush, and a closed writer leaves nothing running."""
    with open("/dev/full", "wb") as fh:
        writer = PrvWriter(fh, behind=True)
        with pytest.raises(OSError, match="No space"):
            for i in range(1000):
                writer.write(_batch([i]))
            writer.flush()
        writer.close()
        writer.close()


@needs_c_thread
@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=1, max_size=12), st.integers(0, 12))
def test_the_c_thread_writes_what_the_python_writer_writes(sizes: list[int],
                                                            flush_at: int) -> None:
    """Batches of any size (empty, one record, beyond the C buffer) through the C thread,
    flushed anywhere: the bytes the writer without a thread writes, in order."""
    batches = [_batch(list(range(1000 * i, 1000 * i + n))) for i, n in enumerate(sizes)]
    with tempfile.TemporaryFile() as fh:
        writer = PrvWriter(fh, behind=True)
        for i, b in enumerate(batches):
            if i == flush_at:
                writer.flush()
            writer.write(b)
        writer.flush()
        fh.seek(0)
        assert fh.read() == b"".join(b.text() for b in batches)


@needs_c
def test_a_closed_writer_stops_its_thread_and_drops_the_rest() -> None:
    fh = _FailingFile(after=10**9)
    writer = PrvWriter(fh, behind=True)
    for i in range(50):
        writer.write(_batch([i]))
    writer.close()
    writer.close()  # idempotent
    assert not _writer_threads()
    assert fh.getvalue() == b"".join(_batch([i]).text() for i in range(50))[: len(fh.getvalue())]
