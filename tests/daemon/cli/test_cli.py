"""The command line: every subcommand has help, bad usage is one line and exit status 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from prvstream.daemon.cli.main import build_parser, cli

SUBCOMMANDS = ["convert", "watch", "finalize", "summary", "synth", "demo", "bench"]


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_subcommand_has_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli(name, "--help")
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert f"prvstream {name}" in out
    assert len(out.splitlines()) > 3


def test_parser_lists_every_subcommand() -> None:
    text = build_parser().format_help()
    for name in SUBCOMMANDS:
        assert name in text


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["convert"], id="convert-missing-input"),
        pytest.param(["convert", "x.sqlite", "-o", "out", "--bogus"], id="unknown-flag"),
        pytest.param(["frobnicate"], id="unknown-command"),
    ],
)
def test_usage_errors_are_one_line_exit_2(argv: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "prvstream.daemon", *argv], capture_output=True, text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_bad_config_names_the_key(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("chunk_rows = 0\n")
    status = cli("summary", str(tmp_path), "--config", str(cfg))
    assert status == 2
    assert "chunk_rows" in capsys.readouterr().err
