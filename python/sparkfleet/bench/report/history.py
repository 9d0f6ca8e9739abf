"""A lane's history: one point per report, oldest first, with the figures the history page plots.

Read from the report documents (plain dicts), so reports of older versions still take part; a
figure a report does not carry is None. A failed or interrupted run keeps the figures it measured
before it stopped (as `report list` shows them); the page marks them and never joins them into a
line.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .comparability import PROBE, QUALITY, SWEEP, TABLE, mismatches
from .compare import number
from .records import list_reports, load_document


@dataclass(frozen=True)
class Figure:
    """One plotted value, with its ± when the report recorded one (95 % CI half-width)."""

    value: float
    ci95: float | None = None


@dataclass(frozen=True)
class HistoryPoint:
    name: str
    created_utc: str
    tag: str
    status: str
    json_path: Path
    baseline: bool
    decode_tps: Figure | None = None
    ttft_c1_p50_ms: Figure | None = None
    ttft_c1_p99_ms: Figure | None = None
    top_concurrency: int | None = None
    ttft_top_p50_ms: Figure | None = None
    ttft_top_p99_ms: Figure | None = None
    quality_score: Figure | None = None
    quality_status: str | None = None  # the quality section's own status, when the run started one
    roofline_decode_pct: Figure | None = None  # report["roofline"]["decode"]["pct_of_bound"]
    pins: dict[str, str] = field(default_factory=dict)
    fingerprints: dict[str, dict[str, Any]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    failures: tuple[str, ...] = ()
    # what makes this run not like for like with the baseline (settings / fingerprint keys)
    unlike_baseline: tuple[str, ...] = ()

    def sibling(self, suffix: str) -> Path | None:
        """The report's .md / .png next to its JSON, if it exists."""
        path = self.json_path.with_suffix(suffix)
        return path if path.is_file() else None


def _figure(value: Any, scale: float = 1.0) -> Figure | None:
    mean = number(value)
    if mean is None:
        return None
    ci = number(value.get("ci95")) if isinstance(value, dict) else None
    return Figure(mean * scale, ci * scale if ci is not None else None)


def _quantile(dist: Any, q: str) -> Figure | None:
    return _figure(dist.get(q), 1000.0) if isinstance(dist, dict) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def point(doc: dict[str, Any], name: str, json_path: Path, baseline: bool) -> HistoryPoint:
    """A report as a history point; shapes it does not know (older or newer versions) read as absent."""
    probe = _dict(_dict(doc.get("decode_probe")).get("metrics"))
    sweep = doc.get("sweep") if isinstance(doc.get("sweep"), list) else []
    levels = [lv for lv in sweep if isinstance(lv, dict) and isinstance(lv.get("concurrency"), int)]
    levels = [lv for lv in levels if lv.get("ttft_s")]
    c1 = next((lv for lv in levels if lv["concurrency"] == 1), None)
    top = max(levels, key=lambda lv: lv["concurrency"], default=None)
    quality = _dict(doc.get("quality"))
    roofline = _dict(_dict(doc.get("roofline")).get("decode"))
    return HistoryPoint(
        name=name,
        created_utc=str(doc.get("created_utc") or ""),
        tag=str(doc.get("tag") or ""),
        status=str(doc.get("status") or "?"),
        json_path=json_path,
        baseline=baseline,
        decode_tps=_figure(probe.get("decode_tps")),
        ttft_c1_p50_ms=_quantile(c1.get("ttft_s"), "p50") if c1 else None,
        ttft_c1_p99_ms=_quantile(c1.get("ttft_s"), "p99") if c1 else None,
        top_concurrency=top["concurrency"] if top else None,
        ttft_top_p50_ms=_quantile(top.get("ttft_s"), "p50") if top else None,
        ttft_top_p99_ms=_quantile(top.get("ttft_s"), "p99") if top else None,
        quality_score=_figure(quality.get("score")) if quality.get("status") == "ok" else None,
        quality_status=str(quality["status"]) if quality.get("status") else None,
        roofline_decode_pct=_figure(roofline.get("pct_of_bound")),
        pins={k: str(_dict(v).get("value")) for k, v in _dict(doc.get("pins")).items()},
        fingerprints={h: _dict(fp) for h, fp in _dict(doc.get("fingerprints")).items()},
        settings=_dict(doc.get("settings")),
        failures=tuple(str(f) for f in doc.get("failures") or ()),
    )


def lane_history(reports_dir: Path, baseline: str | None) -> list[HistoryPoint]:
    """Every report in a lane's folder, oldest first; `baseline` (a report name) is marked, and
    every run is checked against it as `report compare` would (what differs is recorded)."""
    docs = [(r, load_document(r.path)) for r in list_reports(reports_dir)]
    base = next((doc for r, doc in docs if r.name == baseline), None)
    out = []
    for r, doc in docs:
        p = point(doc, r.name, r.path, base is not None and r.name == baseline)
        if base is not None and not p.baseline:
            found = mismatches(base, doc, {PROBE, TABLE, SWEEP, QUALITY})
            p = dataclasses.replace(p, unlike_baseline=tuple(m.key for m in found if m.blocking))
        out.append(p)
    return out


def relative_link(target: Path, page: Path) -> str:
    """A link from the page to a report file that keeps working when both move together."""
    return Path(os.path.relpath(target.resolve(), page.resolve().parent)).as_posix()
