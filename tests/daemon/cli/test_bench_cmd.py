"""``prvstream bench``: a small run prints every figure, in a directory it leaves behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prvstream.daemon.cli.main import cli


def test_bench_prints_rates_memory_and_lag(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "bench"
    assert cli("bench", "--rows", "20000", "--ranks", "2", "--out", str(work)) == 0
    out = capsys.readouterr().out
    assert re.search(r"2 report\(s\), [\d,]+ rows", out)
    assert re.search(r"synth: .* rows/s .*peak RSS [\d.]+ MiB", out)
    convert = re.search(r"convert: .* ([\d,]+) records/s .* ([\d.]+) MB/s written .*peak RSS "
                        r"([\d.]+) MiB", out)
    assert convert is not None
    assert float(convert.group(3)) > 1
    assert re.search(r"live: .*lag per report min [\d.]+ s, median [\d.]+ s, max [\d.]+ s", out)
    assert "finalize" in out
    # the outputs stay in --out for a look
    assert (work / "convert" / "trace.prv").stat().st_size > 0
    assert len(list((work / "job").glob("*.sqlite"))) == 2
    assert (work / "live" / "bench.prv").exists()
    # the live trace, once finalized, equals the batch conversion of the same reports
    assert (work / "live" / "bench.prv").read_bytes() == (
        work / "convert" / "trace.prv").read_bytes()


def test_bench_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "something").write_text("x")
    assert cli("bench", "--rows", "1000", "--out", str(tmp_path)) != 0
