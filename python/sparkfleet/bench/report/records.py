"""Report files: one run → `<UTC YYYY-MM-DD_HHMMSS>_<tag>.{json,md,png}`; loading and listing them.

The JSON is the record (everything measured, the pins in force, the recipe hash, the hosts); the
Markdown and the PNG are views of it. `list` and `compare` read the JSON documents back as plain
dicts, so reports written by older versions stay comparable.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ...atomic import write_bytes
from ...errors import SparkfleetError
from ...jsonable import to_jsonable
from .compare import key_metrics
from .markdown import render_markdown
from .plots import render_png

_STEM = re.compile(r"^(\d{4}-\d{2}-\d{2}_\d{6})_(.+)$")


@dataclass(frozen=True)
class ReportPaths:
    json: Path
    markdown: Path
    png: Path | None


@dataclass(frozen=True)
class ReportSummary:
    name: str  # the stem, e.g. 2026-09-27_053009_exl3-2x-local
    path: Path
    created_utc: str
    tag: str
    status: str
    decode_tps: float | None
    quality_score: float | None


def safe_tag(tag: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", tag).strip("-.")
    return cleaned or "bench"


def report_stem(created_utc: str, tag: str) -> str:
    when = datetime.strptime(created_utc, "%Y-%m-%dT%H:%M:%SZ")
    return f"{when:%Y-%m-%d_%H%M%S}_{safe_tag(tag)}"


def to_document(run: Any) -> dict[str, Any]:
    """A BenchRun (or any dataclass record) as the JSON document a report stores."""
    return to_jsonable(run, hidden_fields=True, float_digits=6)


# -- writing ----------------------------------------------------------------------------------------
def write_report(run: Any, out_dir: Path) -> ReportPaths:
    """Write JSON, Markdown and PNG for one run into `out_dir` (each atomically)."""
    doc = to_document(run)
    stem = report_stem(doc["created_utc"], doc["tag"])
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = ReportPaths(out_dir / f"{stem}.json", out_dir / f"{stem}.md", out_dir / f"{stem}.png")
    write_bytes(paths.json, (json.dumps(doc, indent=2) + "\n").encode())
    write_bytes(paths.markdown, render_markdown(doc, stem).encode())
    png = render_png(doc)
    if png is None:
        return dataclasses.replace(paths, png=None)
    write_bytes(paths.png, png)
    return paths


# -- history --------------------------------------------------------------------------------------
def load_document(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise SparkfleetError(f"no report {path}") from None
    except ValueError as exc:
        raise SparkfleetError(f"{path}: not a JSON report: {exc}") from None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("sparkfleet.bench/"):
        raise SparkfleetError(f"{path}: not a sparkfleet bench report")
    return doc


def list_reports(reports_dir: Path) -> list[ReportSummary]:
    """The reports in a folder, oldest first (their names sort by time)."""
    out = []
    for path in sorted(reports_dir.glob("*.json")) if reports_dir.is_dir() else []:
        match = _STEM.match(path.stem)
        if not match:
            continue
        try:
            doc = load_document(path)
        except SparkfleetError:
            continue
        metrics = key_metrics(doc)
        out.append(
            ReportSummary(
                path.stem,
                path,
                doc.get("created_utc", ""),
                match.group(2),
                doc.get("status", "?"),
                metrics.get("decode_tps"),
                metrics.get("quality_score"),
            )
        )
    return out


def resolve(ref: str, reports_dir: Path | None) -> Path:
    """A report by path, by name (stem) in `reports_dir`, or `latest`."""
    as_path = Path(ref)
    if as_path.suffix == ".json" and as_path.is_file():
        return as_path
    if reports_dir is not None:
        if ref == "latest":
            reports = list_reports(reports_dir)
            if not reports:
                raise SparkfleetError(f"no reports in {reports_dir}", hint="run `sparkfleet bench` first")
            return reports[-1].path
        candidate = reports_dir / f"{ref.removesuffix('.json')}.json"
        if candidate.is_file():
            return candidate
        matches = sorted(reports_dir.glob(f"*{ref}*.json"))
        if len(matches) == 1:
            return matches[0]
    raise SparkfleetError(
        f"no report {ref!r}" + (f" in {reports_dir}" if reports_dir else ""),
        hint="give a report name from `sparkfleet report list LANE` or a path to its .json",
    )
