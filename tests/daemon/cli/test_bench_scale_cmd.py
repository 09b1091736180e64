"""``prvstream bench --scale MODE``: the scale-out benchmarks run from the command line, print
their numbers as JSON and check their outputs against one process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prvstream.daemon.cli.main import cli


def test_bench_scale_many_small_against_one(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "r.json"
    assert cli("bench", "--scale", "many", "--reports", "3", "--reps", "1", "--out",
               str(tmp_path / "w"), "--json", str(report)) == 0
    got = json.loads(capsys.readouterr().out)
    assert got == json.loads(report.read_text())
    assert got["reports"] == 3 and got["records_many"] > 0 and got["records_one"] > 0
    assert got["ratio"] > 0
    # the same number of smaller reports, and one of them alone, for the cost split
    assert 0 < got["records_lean"] < got["records_many"]
    assert got["seconds_single"] > 0 and got["seconds_lean"] > 0
    assert set(got["fit"]) == {"startup_s", "fixed_ms_per_report", "us_per_record_many",
                               "us_per_record_one", "fixed_ms_allowed_at_2x"}


@pytest.mark.slow
def test_bench_scale_dask_convert_appends_and_finalize(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    assert cli("bench", "--scale", "dask", "--ranks", "2", "--rows", "6000", "--dask",
               "inproc:2", "--out", str(tmp_path / "w")) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["convert_byte_identical"] and got["finalize_byte_identical"]
    assert got["appends"] == 2 and got["append_mb_per_s"] > 0
    assert got["finalize_dask_ranges"] >= 1 and got["ranges_written_mb_per_s"] > 0
