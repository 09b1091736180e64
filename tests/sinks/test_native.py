"""The optional C extensions' switch: a missing module is reported, not fatal; the one
preference sends every caller to its fallback; doctor lists each extension."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from prvstream.daemon import runtime
from prvstream.daemon.cli.doctor import check_extensions
from prvstream.daemon.config import load_settings
from prvstream.sinks import native
from prvstream.sinks.native import OptionalExtension


@pytest.fixture(autouse=True)
def own_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Extensions declared here do not stay registered for other tests (the real ones are
    imported first, so that they register in the kept list)."""
    runtime.extensions()
    monkeypatch.setattr(native, "_REGISTERED", list(native._REGISTERED))
    yield
    native.prefer_python(False)


def test_a_missing_module_gives_the_fallback_and_says_why() -> None:
    ext = OptionalExtension("prvstream.sinks._no_such_extension", "f", "nothing at all")
    assert not ext.built() and not ext.compiled() and ext.use() is None
    assert ext.file is None and ext.error is not None and "_no_such_extension" in ext.error
    assert native.registered()[-1] is ext


def test_a_build_older_than_its_sources_gives_the_fallback_and_says_rebuild() -> None:
    ext = OptionalExtension("prvstream.sinks.paraver._fastfmt", "no_such_function", "stale")
    if ext.error is not None and "no_such_function" not in ext.error:
        pytest.skip(f"the formatter extension was not built: {ext.error}")
    assert not ext.built() and ext.use() is None and ext.file is None
    assert ext.error is not None and "no_such_function()" in ext.error and "rebuild" in ext.error


def test_this_install_has_no_stale_extension() -> None:
    """A function name the C module does not export (a typo, or a build older than the
    sources) would otherwise pass silently as a fallback."""
    stale = [ext.error for ext in runtime.extensions()
             if ext.error is not None and "older sources" in ext.error]
    assert stale == []


def test_prefer_python_switches_every_built_extension() -> None:
    found = [ext for ext in runtime.extensions() if ext.built()]
    if not found:
        pytest.skip("no C extension was built (no C compiler at install time)")
    for ext in found:
        assert ext.compiled() and ext.use() is ext.function and ext.use(pure=True) is None
        assert ext.file is not None and ext.error is None
    native.prefer_python(True)
    assert not any(ext.compiled() or ext.use() for ext in found)


def test_doctor_reports_each_extension_with_its_state() -> None:
    missing = OptionalExtension("prvstream.sinks._no_such_extension", "f", "made-up helper")
    checks = list(check_extensions(load_settings(None, {}, environ={})))
    assert {c.name for c in checks} == {"C extension"}
    by_what = {ext.what: c for ext, c in zip(runtime.extensions(), checks, strict=True)}
    assert {"record formatter", "record writer", "row filler", "phase overlaps",
            "made-up helper"} <= set(by_what)
    assert by_what["made-up helper"].status == "warn"
    assert missing.error is not None and missing.error in by_what["made-up helper"].detail
    for ext in runtime.extensions():
        assert (by_what[ext.what].status == "ok") == ext.built()
