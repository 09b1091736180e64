"""The terminal progress line: done / total, rate and time left."""

from __future__ import annotations

import io

from prvstream.daemon.progress import TerminalProgress


def test_line_shows_rate_and_time_left() -> None:
    progress = TerminalProgress("finalizing", "records", stream=io.StringIO())
    line = progress.line(250_000, 1_000_000, progress.started + 10.0)
    assert "25.0%" in line and "250,000/1,000,000 records" in line
    assert "25,000 records/s" in line
    assert "elapsed 0:10" in line and "left 0:30" in line
    assert "left 0:00" in progress.line(5, 5, progress.started + 1.0)


def test_draws_on_the_stream_and_clears_it() -> None:
    out = io.StringIO()
    progress = TerminalProgress("converting", stream=out)
    progress(1, 2)
    progress(2, 2)  # the last update is always drawn
    progress.close()
    text = out.getvalue()
    assert text.count("\r") == 3 and "2/2 rows" in text and text.endswith("\r\033[K")
