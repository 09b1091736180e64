"""The install paths the docs give work from a checkout: no unpublished package name, and the
Containerfile the Kubernetes example relies on builds the image from the checkout."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: text a person reads: the docs, the units, and every message in the code
_READ = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "daemon").rglob("*.py")), *sorted((ROOT / "sinks").rglob("*.py"))]


def test_nothing_installs_an_unpublished_name() -> None:
    bad = re.compile(r"pip install (-U )?(--upgrade )?['\"]?prvstream\b")
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in _READ
             for m in bad.finditer(p.read_text())]
    assert not found, found


def test_the_containerfile_builds_from_the_checkout() -> None:
    text = (ROOT / "Containerfile").read_text()
    assert re.search(r"^COPY \. \.$", text, re.M)
    assert re.search(r"^RUN pip wheel .*\s\.$", text, re.M)
    assert re.search(r'^ENTRYPOINT \["prvstream"\]$', text, re.M)
    assert re.search(r"^USER \d+$", text, re.M)  # never root in the pod
    for ignore in (".containerignore", ".dockerignore"):
        assert ".venv" in (ROOT / ignore).read_text().split()


def test_the_kubernetes_example_uses_the_image_the_docs_build() -> None:
    ops = (ROOT / "docs" / "operations.md").read_text()
    (tag,) = set(re.findall(r"build -t (\S+) -f Containerfile \.", ops))
    images = re.findall(r"^\s+image: (\S+)", ops, re.M)
    assert tag in images
    assert "not built in this project's CI" in ops
