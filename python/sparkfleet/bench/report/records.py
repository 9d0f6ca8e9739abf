"""Report files: one run → `<UTC YYYY-MM-DD_HHMMSS>[-N]_<tag>.{json,md,png}`; loading and listing them.

A report's name is claimed, never overwritten: the JSON record is written to a temp file, fsynced,
and hard-linked to its final name (link(2) fails if the name exists, so two runs in the same second
— or two processes at once — each get their own name: the second becomes `…_HHMMSS-2_<tag>`). The
Markdown and PNG views follow under the claimed name. Where a run's report goes (`destination`):
a lane's tracked reports/ for a successful lane run (or when asked); a failed or interrupted lane
run to the lane's git-ignored reports/failed/, so the lane's history keeps it without committing
it; a --url run to a work folder.

The JSON is the record (everything measured, the pins in force, the recipe hash, the hosts); the
Markdown and the PNG are views of it. `list` and `compare` read the JSON documents back as plain
dicts, so reports written by older versions stay comparable.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ...base.atomic import fsync_dir, temp_file, write_bytes
from ...base.errors import SparkfleetError
from ...base.jsonable import to_jsonable
from .compare import key_metrics
from .markdown import render_markdown
from .plots import render_png

_STEM = re.compile(r"^(\d{4}-\d{2}-\d{2}_\d{6})(?:-(\d+))?_(.+)$")
SCRATCH_DIR = Path("sparkfleet-reports")  # relative to the cwd: untracked work folder
FAILED_DIR = "failed"  # recipes/<lane>/reports/failed/: failed and interrupted runs (git-ignored)


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


def report_stem(created_utc: str, tag: str, seq: int = 1) -> str:
    """`YYYY-MM-DD_HHMMSS_<tag>`; the n-th report claimed in the same second gets `-n` after the time."""
    when = datetime.fromisoformat(created_utc.replace("Z", "+00:00"))
    return f"{when:%Y-%m-%d_%H%M%S}{'' if seq == 1 else f'-{seq}'}_{safe_tag(tag)}"


def destination(
    lane_reports: Path | None, ok: bool, *, out: Path | None = None, save_to_lane: bool = False
) -> Path:
    """Where a run's report goes: `out` if given; a lane's tracked reports/ for a successful lane run
    (or any lane run with `save_to_lane`); a failed or interrupted lane run to reports/failed/
    (git-ignored, still in the lane's history: `report list`, `report html`). A --url run has no
    lane (lane_reports None) and goes to the untracked work folder unless `out` says otherwise."""
    if out is not None:
        return out
    if lane_reports is not None:
        return lane_reports if ok or save_to_lane else lane_reports / FAILED_DIR
    return SCRATCH_DIR


def to_document(run: Any) -> dict[str, Any]:
    """A BenchRun (or any dataclass record) as the JSON document a report stores."""
    return to_jsonable(run, hidden_fields=True, float_digits=6)


# -- writing ----------------------------------------------------------------------------------------
def _link_no_clobber(tmp: Path, final: Path) -> None:
    """Put `tmp` at `final` unless `final` exists (FileExistsError). link(2) where the filesystem has
    hard links; elsewhere the name is reserved with O_EXCL and the finished temp replaces the
    reservation (a crash in between leaves an empty file, which listing skips as not a report)."""
    try:
        os.link(tmp, final)
        return
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
    os.close(os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
    os.replace(tmp, final)


def _claim(out_dir: Path, created_utc: str, tag: str, data: bytes) -> str:
    """Publish `data` as `<stem>.json` under the first free stem; returns the stem. Never overwrites."""
    final = out_dir / f"{report_stem(created_utc, tag)}.json"
    with temp_file(final) as (fd, tmp):
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    try:
        for seq in range(1, 10_000):
            stem = report_stem(created_utc, tag, seq)
            try:
                _link_no_clobber(tmp, out_dir / f"{stem}.json")
            except FileExistsError:
                continue
            fsync_dir(out_dir)
            return stem
        raise SparkfleetError(f"{out_dir}: no free report name for {final.name} after 9999 tries")
    finally:
        tmp.unlink(missing_ok=True)


def write_report(run: Any, out_dir: Path) -> ReportPaths:
    """Write JSON, Markdown and PNG for one run into `out_dir` under a name no other report holds."""
    doc = to_document(run)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = _claim(out_dir, doc["created_utc"], doc["tag"], (json.dumps(doc, indent=2) + "\n").encode())
    paths = ReportPaths(out_dir / f"{stem}.json", out_dir / f"{stem}.md", out_dir / f"{stem}.png")
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
    """The reports in a folder and its failed/ (failed and interrupted runs), oldest first (by the
    time in their names, then the order claimed)."""
    found = []
    for path in _report_files(reports_dir, "*.json"):
        match = _STEM.match(path.stem)
        if match:
            found.append(((match.group(1), int(match.group(2) or 1), path.stem), path, match.group(3)))
    out = []
    for _, path, tag in sorted(found):
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
                tag,
                doc.get("status", "?"),
                metrics.get("decode_tps"),
                metrics.get("quality_score"),
            )
        )
    return out


def _report_files(reports_dir: Path, pattern: str) -> list[Path]:
    """Files matching `pattern` in a reports folder and in its failed/."""
    return [p for d in (reports_dir, reports_dir / FAILED_DIR) if d.is_dir() for p in d.glob(pattern)]


def resolve_across(ref: str, lanes: dict[str, Path]) -> Path:
    """A report by path, or by name in whichever lane's reports hold it (`lanes`: lane → reports
    folder); a name no lane holds, or more than one does, says to add --lane."""
    as_path = Path(ref)
    if as_path.suffix == ".json" and as_path.is_file():
        return as_path
    found: dict[str, Path] = {}
    for lane, folder in sorted(lanes.items()):
        try:
            found[lane] = resolve(ref, folder)
        except SparkfleetError:
            continue
    if len(found) == 1:
        return next(iter(found.values()))
    if found:
        raise SparkfleetError(
            f"{ref!r} names a report in more than one lane: {', '.join(found)}",
            hint=f"add --lane ({' or '.join(f'--lane {lane}' for lane in found)})",
        )
    raise SparkfleetError(
        f"no report {ref!r} in any lane's reports" + (f" ({', '.join(sorted(lanes))})" if lanes else ""),
        hint="add --lane LANE (names from `sparkfleet report list LANE`), or give a path to the .json",
    )


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
        for folder in (reports_dir, reports_dir / FAILED_DIR):
            candidate = folder / f"{ref.removesuffix('.json')}.json"
            if candidate.is_file():
                return candidate
        matches = sorted(_report_files(reports_dir, f"*{ref}*.json"))
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise SparkfleetError(
                f"{ref!r} is ambiguous in {reports_dir}: {', '.join(m.stem for m in matches)}",
                hint="give more of the name (two runs in one second are told apart by -2, -3, …)",
            )
    raise SparkfleetError(
        f"no report {ref!r}" + (f" in {reports_dir}" if reports_dir else ""),
        hint="give a report name from `sparkfleet report list LANE` or a path to its .json",
    )
