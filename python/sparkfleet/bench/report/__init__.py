"""Bench reports: files (records), views (markdown, plots) and comparison (compare).

`sparkfleet.bench.run` produces a BenchRun record; this package writes it as JSON + Markdown + PNG,
lists and resolves a lane's reports, and compares two of them.
"""

from __future__ import annotations

from .compare import Comparison, MetricDelta, compare, key_intervals, key_metrics
from .markdown import render_markdown
from .plots import render_png
from .records import (
    SCRATCH_DIR,
    ReportPaths,
    ReportSummary,
    destination,
    list_reports,
    load_document,
    report_stem,
    resolve,
    resolve_across,
    safe_tag,
    to_document,
    write_report,
)

__all__ = [
    "Comparison",
    "MetricDelta",
    "ReportPaths",
    "ReportSummary",
    "SCRATCH_DIR",
    "compare",
    "destination",
    "key_intervals",
    "key_metrics",
    "list_reports",
    "load_document",
    "render_markdown",
    "render_png",
    "report_stem",
    "resolve",
    "resolve_across",
    "safe_tag",
    "to_document",
    "write_report",
]
