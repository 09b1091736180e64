"""docs/api.md's examples run as written (a doctest of the page)."""

from __future__ import annotations

import doctest
from pathlib import Path

from structlog.testing import capture_logs

API_PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def test_api_page_examples_run() -> None:
    with capture_logs():  # log events are not part of the examples' output
        failures, tried = doctest.testfile(str(API_PAGE), module_relative=False,
                                           optionflags=doctest.ELLIPSIS, verbose=False)
    assert tried >= 15
    assert failures == 0
