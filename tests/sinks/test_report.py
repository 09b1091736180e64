"""The HTML report: self-contained, and a real browser shows the numbers."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from prvstream.daemon.cli.main import cli
from prvstream.daemon.cli.report import auto_window_ns
from prvstream.sinks.report import render_html
from prvstream.sinks.summary import SummaryState, SummaryWriter, load_summary
from tests.sinks.test_verdict import _job

_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync")


def _straggler() -> SummaryState:
    # rank 3 computes 90 of 100, the others 45: LB = 56.25 / 90
    return _job({r: [(0, 90 if r == 3 else 45, 0)] for r in range(4)})


def _browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no chromium on PATH (Debian: apt-get install chromium) to render the report")


def _dom(html: Path, tmp: Path) -> str:
    run = subprocess.run([_browser(), *_FLAGS, f"--user-data-dir={tmp / 'profile'}",
                          "--dump-dom", html.as_uri()],
                         capture_output=True, text=True, timeout=120, check=True)
    return run.stdout


def _text(dom: str, element_id: str) -> str:
    m = re.search(rf'id="{element_id}"[^>]*>(.*?)</', dom, re.S)
    assert m, f"no element {element_id} in the rendered page"
    return m.group(1)


def test_page_is_self_contained() -> None:
    html = render_html(_straggler())
    assert "<svg" in html and "<script" not in html
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "@import" not in html and "url(" not in html


def test_chromium_shows_the_numbers_verdict_and_culprit(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        ) -> None:
    state = _straggler()
    SummaryWriter.write_state(state, tmp_path / "summary.json")
    out = tmp_path / "report.html"
    assert cli("report", str(tmp_path), "-o", str(out)) == 0
    assert f"report written to {out.resolve()}" in capsys.readouterr().err
    dom = _dom(out, tmp_path)
    m = state.metrics
    assert _text(dom, "pe") == f"{100 * m.parallel_efficiency:.1f}%"
    assert _text(dom, "lb") == "62.5%"  # 56.25 / 90
    assert _text(dom, "ce") == "100.0%" and _text(dom, "oe") == "90.0%"
    verdict = _text(dom, "verdict")
    assert verdict.startswith("load imbalance: rank 3 (n1 GPU 1) computes 60.0% longer than "
                              "the mean (LB 62.5%)")
    assert "n1 GPU 1 (rank 3)" in dom  # the device bars


def test_report_of_exports_sizes_its_window_to_the_span(tmp_path: Path) -> None:
    from prvstream.daemon.synthetic.synth import SynthSpec, write_job

    write_job(tmp_path / "job", SynthSpec(ranks=2, steps=6, layers=2))
    out = tmp_path / "job.html"
    assert cli("report", str(tmp_path / "job"), "-o", str(out)) == 0
    html = out.read_text()
    # ~0.1 s of steps: 1-2-5 windows of a few ms, many of them, not one 10 s window
    m = re.search(r"since start \(windows of ([0-9.e-]+) s\)", html)
    assert m and float(m.group(1)) < 0.01, html[-3000:]
    assert auto_window_ns(10**9) == 50_000_000 and auto_window_ns(10) == 1_000
    state, _ = load_summary(tmp_path / "job" / "prvstream" / "summary.json") if (
        tmp_path / "job" / "prvstream" / "summary.json").exists() else (None, [])
    assert state is None  # the report converted in a scratch directory, wrote nothing there


@pytest.mark.parametrize("report_html", [True, False], ids=["every-commit", "finalize-only"])
def test_daemon_writes_the_report_beside_the_summaries(tmp_path: Path, report_html: bool) -> None:
    from prvstream.daemon.synthetic.synth import SynthSpec, write_job
    from tests.daemon.live.test_livetrace import _append
    from tests.daemon.live.test_livetrace import _job as live_job

    sources = write_job(tmp_path / "src", SynthSpec(ranks=2, steps=3, layers=2))
    job, trace = live_job(tmp_path, report_html=report_html)
    page = job / "prvstream" / "report.html"
    _append(trace, job, sources[0])
    assert page.exists() == report_html
    _append(trace, job, sources[1])
    trace.finalize()
    html = page.read_text()
    state = trace.model.state()
    assert f'id="pe">{100 * state.metrics.parallel_efficiency:.1f}%<' in html
    assert "2 report(s), 2 device(s)" in html
