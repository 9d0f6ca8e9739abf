"""What the fleet root's files say about a lane: its newest bench, its incidents, its reference.

Read on the controller, no node asked. Every reader takes whatever the files hold (another
version's shape, a hand edit, a truncated write) and answers with checked values or None: a
bad file shows as a missing figure, never as a failed scrape.
"""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path
from typing import Any

from ..bench.report.compare import number
from ..fleet.inventory import Lane
from .snapshot import BenchFigures, IncidentView

MAX_INCIDENTS = 500  # the newest this many bundles are counted (a lane with more has a bigger problem)
MAX_SUMMARY_BYTES = 1 << 20
DEFAULT_DECODE_FLOOR_PCT = 80.0
# Incident kinds, from the supervisor's reason (supervisor.py) and the bundle's memstop record.
INCIDENT_KINDS = ("memory", "ranks_missing", "wrong_answer", "latency", "probe_failed")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _utc(text: Any) -> float | None:
    """2026-09-27T05:30:09Z -> seconds since the epoch (None for anything else)."""
    try:
        return float(calendar.timegm(time.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def _read_json(path: Path) -> Any:
    try:
        with open(path, "rb") as fh:
            return json.loads(fh.read(MAX_SUMMARY_BYTES + 1)[:MAX_SUMMARY_BYTES])
    except (OSError, ValueError, RecursionError):
        return None


def reports_dir(lane: Lane) -> Path:
    """recipes/<lane>/reports: where `sparkfleet bench` writes the lane's reports."""
    return lane.recipe_path.parent / "reports"


def newest_bench(folder: Path) -> BenchFigures | None:
    """The newest report in `folder` whose run succeeded (names sort by time; failed/ is skipped)."""
    names = sorted(p for p in folder.glob("*.json") if p.is_file()) if folder.is_dir() else []
    for path in reversed(names):
        doc = _read_json(path)
        if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("sparkfleet.bench/"):
            continue
        if doc.get("status") != "ok":
            continue
        probe = _dict(_dict(doc.get("decode_probe")).get("metrics"))
        created = _utc(doc.get("created_utc"))
        return BenchFigures(
            report=path.stem,
            created_at=created if created is not None else path.stat().st_mtime,
            decode_tps=number(probe.get("decode_tps")),
            ttft_s=number(probe.get("ttft_s")),
            bound_pct=number(_dict(_dict(doc.get("roofline")).get("decode")).get("pct_of_bound")),
        )
    return None


def incident_kind(reason: str, summary: dict[str, Any]) -> str:
    """Which of INCIDENT_KINDS a bundle is, from the supervisor's words for it."""
    if summary.get("memstop") or "memory watchdog" in reason:
        return "memory"
    if "ranks running" in reason:
        return "ranks_missing"
    if "wrong answer" in reason:
        return "wrong_answer"
    if "latency bound" in reason or "answered in" in reason:
        return "latency"
    return "probe_failed"


def incidents(folder: Path) -> tuple[IncidentView, ...]:
    """The lane's incident bundles, newest first (at most MAX_INCIDENTS)."""
    try:
        dirs = sorted((p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()), reverse=True)
    except OSError:
        return ()
    out = []
    for d in dirs[:MAX_INCIDENTS]:
        summary = _dict(_read_json(d / "summary.json"))
        reason = summary.get("reason") if isinstance(summary.get("reason"), str) else ""
        at = number(summary.get("at"))
        if at is None:
            try:
                at = d.stat().st_mtime
            except OSError:
                continue
        out.append(IncidentView(d.name, at, incident_kind(reason, summary), reason[:300]))
    return tuple(sorted(out, key=lambda i: i.at, reverse=True))


def reference(lane: Lane) -> tuple[float | None, float]:
    """The lane's decode reference (tok/s) and the share of it below which the lane is slow.

    `[view] reference_tps` when the recipe gives one, else the first `[[kit.reference]]` whose
    metric begins with "decode" and whose unit is tok/s (the kit's published figure); the share is
    `[view] decode_floor_pct` (80 % by default).
    """
    view = lane.sections.view
    floor = number(view.decode_floor_pct)
    floor = floor if floor is not None and 0 < floor <= 100 else DEFAULT_DECODE_FLOOR_PCT
    given = number(view.reference_tps)
    if given is not None and given > 0:
        return given, floor
    kit = lane.sections.kit
    for ref in kit.references if kit is not None else ():
        value = number(ref.value)
        if ref.metric.startswith("decode") and ref.unit == "tok/s" and value is not None and value > 0:
            return value, floor
    return None, floor

