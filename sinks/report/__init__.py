"""The HTML report of a job's efficiency summary: ``render_html(state, history)`` and
``write_report(path, state, history)`` (one self-contained file, inline SVG, no network)."""

from __future__ import annotations

from prvstream.sinks.report.html import render_html, write_report

__all__ = ["render_html", "write_report"]
