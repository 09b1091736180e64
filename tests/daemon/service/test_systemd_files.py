"""The shipped systemd units and example config stay in step with the code."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest

from prvstream.daemon.config import Settings, load_settings

SYSTEMD = Path(__file__).resolve().parents[3] / "systemd"


def test_example_config_documents_every_setting(tmp_path: Path) -> None:
    text = (SYSTEMD / "prvstream.toml.example").read_text()
    documented = set(re.findall(r"^# ([a-z_]+) = ", text, re.M))
    known = {f.name for f in msgspec.structs.fields(Settings)}
    assert documented == known
    # every commented value is valid and is the default (except paths that vary per machine)
    enabled = tmp_path / "all.toml"
    enabled.write_text(re.sub(r"^# ([a-z_]+ = )", r"\1", text, flags=re.M))
    settings = load_settings(enabled, environ={})
    defaults = Settings()
    for name in known - {"state_dir", "log_json", "log_level"}:
        assert getattr(settings, name) == getattr(defaults, name), name


@pytest.mark.parametrize("unit", ["prvstream.service", "prvstream@.service"])
def test_units_are_notify_and_sandboxed(unit: str) -> None:
    text = (SYSTEMD / unit).read_text()
    for line in ("Type=notify", "NoNewPrivileges=yes", "ProtectSystem=strict",
                 "PrivateTmp=yes", "StateDirectory=prvstream", "Restart=on-failure"):
        assert re.search(rf"^{re.escape(line)}$", text, re.M), line
    assert re.search(r"^WatchdogSec=\d+", text, re.M)
    assert re.search(r"^MemoryMax=", text, re.M)
    assert re.search(r"^ExecStart=\S*prvstream watch ", text, re.M)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze absent")
@pytest.mark.parametrize(("unit", "as_name"), [
    ("prvstream.service", "prvstream.service"),
    ("prvstream@.service", "prvstream@scratch-u-run42.service"),
])
def test_units_verify(tmp_path: Path, unit: str, as_name: str) -> None:
    text = (SYSTEMD / unit).read_text().replace("/usr/local/bin/prvstream", "/bin/true")
    (tmp_path / as_name).write_text(text)
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / as_name)],
                          capture_output=True, text=True, timeout=60, check=False)
    complaints = [ln for ln in proc.stderr.splitlines()
                  if as_name in ln and ("Unknown" in ln or "Invalid" in ln or "error" in ln)]
    assert not complaints, proc.stderr
