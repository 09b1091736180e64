"""A person's log lines: written without structlog, the same lines structlog's chain makes."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import structlog

from prvstream.daemon.logs import PersonsLines, configure_logging, human_line
from prvstream.sinks import logger


def _through_structlog(call: Callable[[Any], None]) -> str:
    """What structlog's chain with ``human_line`` writes for ``call(log)``."""
    out = io.StringIO()
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars,
                    structlog.processors.add_log_level,
                    structlog.processors.format_exc_info, human_line],
        wrapper_class=structlog.make_filtering_bound_logger(0),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    call(structlog.get_logger("x"))
    return out.getvalue()


def _through_persons_lines(call: Callable[[Any], None]) -> str:
    out = io.StringIO()
    logger.set_threshold(0, writer=PersonsLines(out))
    call(logger.get_logger("x"))
    return out.getvalue()


def _raise_and_log(log: Any, method: str, **kw: Any) -> None:
    try:
        raise ValueError("the export ends early")
    except ValueError as exc:
        if method == "exception":
            log.exception("read_failed", path="a.sqlite")
        else:
            log.error("read_failed", path="a.sqlite", exc_info=exc if kw else True)


CASES = [
    pytest.param(lambda log: log.warning("kind_absent", kind="memset", n=3), id="keys"),
    pytest.param(lambda log: log.info("converted"), id="bare"),
    pytest.param(lambda log: log.warning("x", message="Read this, then act."), id="message"),
    pytest.param(lambda log: log.error("rows %d of %s", 3, "kernels", at=1), id="interpolated"),
    pytest.param(lambda log: log.error("by %(name)s", {"name": "map"}), id="mapping"),
    pytest.param(lambda log: _raise_and_log(log, "exception"), id="exception"),
    pytest.param(lambda log: _raise_and_log(log, "error"), id="exc_info-true"),
    pytest.param(lambda log: _raise_and_log(log, "error", given=True), id="exc_info-given"),
    pytest.param(lambda log: log.error("nothing_raised", exc_info=True), id="no-exception"),
]


@pytest.mark.parametrize("call", CASES)
def test_persons_lines_are_the_lines_structlog_makes(call: Callable[[Any], None]) -> None:
    expected = _through_structlog(call)
    assert expected
    assert _through_persons_lines(call) == expected


def test_persons_lines_drop_events_below_the_level() -> None:
    out = io.StringIO()
    configure_logging("warning", stream=out)
    log = logger.get_logger("x")
    log.info("not_shown")
    log.warning("shown", n=1)
    assert out.getvalue() == "prvstream: warning: shown (n=1)\n"


def test_a_persons_warning_does_not_import_structlog() -> None:
    """The point of the writer: a small conversion that warns does not pay the import."""
    script = (
        "import io, sys\n"
        "from prvstream.daemon.logs import configure_logging\n"
        "from prvstream.sinks.logger import get_logger\n"
        "configure_logging(stream=io.StringIO())\n"
        "get_logger('x').warning('kind_absent', kind='memset')\n"
        "print('structlog' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, timeout=60)
    assert proc.stdout.strip() == "False"


def test_the_daemon_still_logs_through_structlog() -> None:
    out = io.StringIO()
    assert configure_logging(stream=out, service=True, json=True)
    logger.get_logger("x").info("report_appended", records=5)
    assert '"event": "report_appended"' in out.getvalue()
    assert '"records": 5' in out.getvalue()
