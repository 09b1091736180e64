"""The command line: every subcommand has help, bad usage is one line and exit status 2."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from prvstream.daemon.cli.main import build_parser, cli

SUBCOMMANDS = ["convert", "watch", "finalize", "summary", "report", "synth", "demo", "bench",
               "doctor",
               "completion"]


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


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_option_of_every_subcommand_has_help_and_its_default() -> None:
    subs = _subparsers(build_parser())
    assert sorted(subs) == sorted(SUBCOMMANDS)
    for name, sub in subs.items():
        text = sub.format_help()
        for action in sub._actions:
            label = "/".join(action.option_strings) or str(action.metavar or action.dest)
            assert action.help and len(action.help) > 8, f"{name} {label} has no help"
            shows_default = action.default not in (None, False, argparse.SUPPRESS)
            if action.option_strings and shows_default:
                assert f"(default: {action.default}" in " ".join(text.split()), \
                    f"{name} {label} does not show its default"


def test_settings_flags_show_the_built_in_default_and_where_else_to_set_it() -> None:
    text = " ".join(_subparsers(build_parser())["convert"].format_help().split())
    assert "(default: 2048; or chunk_rows in --config, PRVSTREAM_CHUNK_ROWS)" in text


def test_top_level_help_is_a_tour_with_an_example_per_command() -> None:
    text = build_parser().format_help()
    tour = [ln for ln in text.splitlines() if ln.startswith("  ") and "prvstream " in ln]
    assert sorted(ln.split()[0] for ln in tour) == sorted(SUBCOMMANDS)
    for line in tour:
        assert f"prvstream {line.split()[0]}" in line
    assert len(text.splitlines()) <= 20


def test_no_arguments_shows_the_tour() -> None:
    proc = subprocess.run([sys.executable, "-m", "prvstream.daemon"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "prvstream convert" in proc.stderr


def _shell_and_script(shell: str, tmp_path: Path) -> tuple[str, Path]:
    """The shell's executable (skip, saying why, without it) and the script prvstream
    prints for it, written to a file."""
    found = shutil.which(shell)
    if found is None:
        pytest.skip(f"{shell} is not installed, so its completion script cannot be checked")
    proc = subprocess.run([sys.executable, "-m", "prvstream.daemon", "completion", shell],
                          capture_output=True, text=True, timeout=60, check=True)
    script = tmp_path / f"prvstream.{shell}"
    script.write_text(proc.stdout)
    return found, script


def test_bash_completion_is_generated_from_the_parser(tmp_path: Path) -> None:
    bash, script = _shell_and_script("bash", tmp_path)
    text = script.read_text()
    for name, sub in _subparsers(build_parser()).items():
        for action in sub._actions:
            for flag in action.option_strings:
                assert flag in text, f"{name} {flag} missing from the completion"

    def complete(*words: str) -> list[str]:
        line = " ".join(f'"{w}"' for w in words)
        out = subprocess.run(
            [bash, "-c", f'source "{script}"; COMP_WORDS=({line}); '
             f'COMP_CWORD={len(words) - 1}; _prvstream; printf "%s\\n" "${{COMPREPLY[@]}}"'],
            capture_output=True, text=True, timeout=60, check=True, cwd=tmp_path)
        return out.stdout.split()

    assert complete("prvstream", "con") == ["convert"]
    assert complete("prvstream", "convert", "--trace", "ke") == ["kernel"]
    assert complete("prvstream", "summary", "--view", "") == [
        "cumulative", "window", "phase", "kernels", "nccl", "memcpy", "nvtx"]
    assert "--poll" in complete("prvstream", "watch", "--po")


def test_zsh_completion_is_valid_zsh(tmp_path: Path) -> None:
    zsh, script = _shell_and_script("zsh", tmp_path)
    subprocess.run([zsh, "-n", str(script)], check=True, timeout=60)
    text = script.read_text()
    assert text.startswith("#compdef prvstream\n")
    for name in SUBCOMMANDS:
        assert f"            {name})\n" in text, f"{name} missing from the zsh completion"
