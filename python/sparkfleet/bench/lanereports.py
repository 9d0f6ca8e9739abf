"""Which reports `report list|html|compare` read: a lane's folder (its thresholds and declared
baseline with it) or a folder named outright, and what a comparison with no base named holds to.

The inventory is asked for only when a lane is named (`inventory` is called then): a report folder
named with --dir reads no fleet checkout, and names given without either are looked for in every
lane's folder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import SparkfleetError
from ..fleet.inventory import Inventory
from . import report as reports
from .gate import baseline_of
from .target import Thresholds, for_lane

NO_BASELINE_HINT = 'give two reports, or declare [bench] baseline = "<report name>" in the recipe'


@dataclass(frozen=True)
class ReportFolder:
    """A folder of reports with what a comparison in it holds to."""

    path: Path
    thresholds: Thresholds
    baseline: str | None  # the recipe's [bench] baseline (None: none declared, or a --dir)


def report_folder(
    inventory: Callable[[], Inventory], lane: str | None, directory: Path | None
) -> ReportFolder:
    """The folder named with --dir, else LANE's reports folder (refused when neither is named)."""
    if directory is not None:
        return ReportFolder(directory, Thresholds(), None)
    if lane:
        target = for_lane(inventory(), lane)
        assert target.reports_dir is not None
        return ReportFolder(target.reports_dir, target.thresholds, target.baseline)
    raise SparkfleetError("name a LANE (or --dir with a report folder)")


def lane_report_dirs(inventory: Callable[[], Inventory]) -> dict[str, Path]:
    """lane -> its reports folder, for every lane of the fleet (none outside a fleet checkout)."""
    try:
        inv = inventory()
    except SparkfleetError:
        return {}
    out = {}
    for lane in sorted(inv.lanes):
        with contextlib.suppress(SparkfleetError):
            folder = for_lane(inv, lane).reports_dir
            if folder is not None:
                out[lane] = folder
    return out


@dataclass(frozen=True)
class NothingToCompare:
    """A lane before its first good generation, with no [bench] baseline: nothing to fall behind."""

    lane: str
    new: str  # the newest report's name
    why: str


def compare_reports(
    inventory: Callable[[], Inventory],
    refs: tuple[str, ...],
    lane: str | None,
    directory: Path | None,
    force: bool,
) -> reports.Comparison | NothingToCompare:
    """`report compare`: `A B` (A is the base), `A` against the lane's baseline, or none: the latest
    against it. The baseline is the recipe's [bench] baseline, else the report that made the lane's
    last good generation good; names given without a lane or folder are found in any lane's folder."""
    if len(refs) > 2:
        raise SparkfleetError("compare takes at most two reports")
    folder = report_folder(inventory, lane, directory) if lane or directory else None
    thresholds = folder.thresholds if folder else Thresholds()
    where = folder.path if folder else None
    if len(refs) == 2:
        base_ref, new_ref = refs
    else:
        new_ref = refs[0] if refs else "latest"
        base_ref = folder.baseline if folder and folder.baseline else None
        if base_ref is None:
            found = _lane_baseline(inventory, lane, new_ref, where)
            if isinstance(found, NothingToCompare):
                return found
            base_ref = found
    if where is None:  # names, without --lane: whichever of the fleet's lanes holds each
        lanes = lane_report_dirs(inventory)
        base_path, new_path = reports.resolve_across(base_ref, lanes), reports.resolve_across(new_ref, lanes)
    else:
        base_path, new_path = reports.resolve(base_ref, where), reports.resolve(new_ref, where)
    return reports.compare(
        reports.load_document(base_path),
        reports.load_document(new_path),
        thresholds,
        base_path.stem,
        new_path.stem,
        force=force,
    )


def _lane_baseline(
    inventory: Callable[[], Inventory], lane: str | None, new_ref: str, folder: Path | None
) -> str | NothingToCompare:
    """With no [bench] baseline declared: the report that made the lane's last good generation
    good. A lane with no good generation yet has nothing to fall behind."""
    if not lane:
        raise SparkfleetError("no baseline to compare against", hint=NO_BASELINE_HINT)
    inv = inventory()
    base = baseline_of(for_lane(inv, lane), inv.root)
    if base.path is not None:
        return str(base.path)
    if not base.first_night:
        raise SparkfleetError(f"no baseline to compare against: {base.said}", hint=NO_BASELINE_HINT)
    newest = reports.resolve(new_ref, folder).stem
    return NothingToCompare(lane, newest, f"{lane} has {base.said}: nothing for {newest} to fall behind")
