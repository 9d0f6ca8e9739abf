"""`sparkfleet history LANE`: the lane's generations, newest first, each with the bench reports made
while it was the newest generation.

The generations come from launch/generations.py (a file that is not a valid generation is skipped
and named); the reports from the lane's reports folder, failed runs included (marked, never hidden).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..launch.generations import history, scan
from . import report as reports
from .target import for_lane

if TYPE_CHECKING:
    from ..fleet.inventory import Inventory


@dataclass(frozen=True)
class LaneHistory:
    lane: str
    generations: list[dict[str, Any]]  # newest first (generations.history's rows)
    skipped: list[str]  # files that are not a valid generation, each with why
    failed: dict[str, str] = field(default_factory=dict)  # report path -> its status, for runs not ok


def lane_history(inv: Inventory, lane: str) -> LaneHistory:
    """LANE's generations with their reports (a report belongs to the generation newest when it was made)."""
    target = for_lane(inv, lane)
    folder = target.reports_dir
    found = reports.list_reports(folder) if folder and folder.is_dir() else []
    rows = history(inv.root, lane, [(r.path.stat().st_mtime, str(r.path)) for r in found])
    skipped = [str(s) for s in scan(inv.root, lane)[1]]
    failed = {str(r.path): r.status for r in found if r.status != "ok"}
    return LaneHistory(lane, rows, skipped, failed)
