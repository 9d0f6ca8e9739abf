"""Promote's gates: the smoke questions, then the bench report against the lane's baseline.

`launch.generations.promote` is pure: it takes the two gates as arguments. They live here, where
the reports and the smoke loop are, so `sparkfleet promote` only parses options and renders:

- the report that counts is the one named (`--report`), else the newest made since the generation
  came up: an older report measured another generation;
- a failed report never passes;
- the baseline is the recipe's `[bench] baseline`, else the report that made the lane's last good
  generation good (so each promotion raises the bar without a recipe edit);
- a lane with neither (its first night) takes a passing report as its first good, and says so;
  `--first` does the same on a lane that has good generations but should start over;
- otherwise the report is compared with the baseline under the lane's thresholds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, NamedTuple

from ..base.errors import SparkfleetError
from ..base.jsonable import to_jsonable
from ..launch.generations import Promotion, load_all, promote
from ..launch.lane import status
from ..launch.report import LaneStatus
from . import report as reports
from .client import Endpoint, discover_model
from .probes import smoke
from .target import BenchTarget, for_lane

if TYPE_CHECKING:
    from ..fleet.inventory import Inventory

PROMOTE_SMOKE_TIMEOUT_S = 120.0
SET_BASELINE = "set [bench] baseline or pass --first"
REPORT_NAME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}_[0-9]{6}_[A-Za-z0-9._-]+")  # as [bench] baseline


class GateVerdict(NamedTuple):
    """What the bench gate found: a tuple, as `generations.promote` unpacks it."""

    report: str | None  # the report judged (None: there was none to judge)
    passed: bool
    gate: str  # what it was judged against, in words
    regressions: list[str]


class Baseline(NamedTuple):
    """What a lane's reports are compared against: a report, or None and why there is none."""

    path: Path | None
    said: str  # "baseline NAME", "NAME, the report that made generation G good", or why there is none
    first_night: bool = False  # none declared and no good generation ever: nothing to hold to


def baseline_of(target: BenchTarget, root: Path | None) -> Baseline:
    """The recipe's declared baseline, else the report that gated the last good generation under
    `root` (None: the generations are not known here).

    That report is looked up by its name in the lane's own reports folder, never by the path the
    generation record holds: a record names a report, it cannot point the gate at another file."""
    assert target.reports_dir is not None
    if target.baseline:
        return Baseline(reports.resolve(target.baseline, target.reports_dir), f"baseline {target.baseline}")
    if root is None or target.lane is None:
        return Baseline(None, "no [bench] baseline declared")
    good = [g for g in load_all(root, target.lane) if g.get("good")]
    if not good:
        return Baseline(None, "no [bench] baseline declared and no good generation yet", first_night=True)
    for gen in reversed(good):  # a relaunched good generation (rollback) carries no promotion of its own
        promotion = gen.get("promotion")
        named = promotion.get("bench_report") if isinstance(promotion, dict) else None
        if isinstance(named, str):
            break
    else:
        return Baseline(None, f"no good generation of {target.lane} names the report that made it good")
    name = PurePath(named).stem
    try:
        if not REPORT_NAME.fullmatch(name):
            raise SparkfleetError(f"{named!r} is not a report name")
        path = reports.resolve(name, target.reports_dir)
    except SparkfleetError:
        return Baseline(None, f"the report that made generation {gen['id']} good is gone ({named[:200]})")
    return Baseline(path, f"{path.stem}, the report that made generation {gen['id']} good")


def judge(
    target: BenchTarget,
    since: float,
    *,
    report_ref: str | None = None,
    first: bool = False,
    root: Path | None = None,
) -> GateVerdict:
    """The bench gate for a generation that came up at `since` (epoch seconds); `root`: where the
    lane's generations are (its last good one's report is the baseline when none is declared)."""
    if target.reports_dir is None:
        raise SparkfleetError(f"{target.lane or target.url} has no reports folder to gate on")
    if report_ref:
        path = reports.resolve(report_ref, target.reports_dir)
    else:
        fresh = [r for r in reports.list_reports(target.reports_dir) if r.path.stat().st_mtime >= since]
        if not fresh:
            hint = f"run sparkfleet bench {target.lane}"
            return GateVerdict(None, False, "no bench report since this generation came up", [hint])
        path = fresh[-1].path
    doc = reports.load_document(path)
    if doc.get("status") != "ok":
        return GateVerdict(str(path), False, "bench report failed", list(doc.get("failures") or ["failed"]))
    if first and not target.baseline:
        return GateVerdict(str(path), True, "first good generation (no baseline declared yet)", [])
    try:
        base = baseline_of(target, root)
    except SparkfleetError as exc:
        return GateVerdict(str(path), False, f"baseline {target.baseline}", [exc.message])
    if base.first_night:  # a lane's first promotion: nothing before it to fall behind
        return GateVerdict(str(path), True, f"first good generation ({base.said})", [])
    if base.path is None:
        return GateVerdict(str(path), False, base.said, [SET_BASELINE])
    cmp = reports.compare(reports.load_document(base.path), doc, target.thresholds, base.path.stem, path.stem)
    return GateVerdict(str(path), cmp.ok, f"against {base.said}", cmp.regressions)


def bench_gate(
    target: BenchTarget, *, report_ref: str | None = None, first: bool = False, root: Path | None = None
) -> Callable[[float], GateVerdict]:
    """`judge` for this target and options, as `generations.promote` calls it: with `since` only."""
    return lambda since: judge(target, since, report_ref=report_ref, first=first, root=root)


def smoke_gate(target: BenchTarget) -> Callable[[], tuple[bool, list[dict]]]:
    """The smoke questions, as `generations.promote` calls them: (all passed, each case as JSON)."""

    def ask() -> tuple[bool, list[dict]]:
        endpoint = discover_model(Endpoint(target.url, None, target.api_key(), PROMOTE_SMOKE_TIMEOUT_S))
        cases = smoke(endpoint, target.smoke)
        return all(c.passed for c in cases), [to_jsonable(c) for c in cases]

    return ask


def all_ranks_up(status: LaneStatus) -> bool:
    """A generation can be promoted only while every rank of the lane is running."""
    return status.running == status.expected and status.running > 0


def promote_lane(
    inv: Inventory, lane: str, *, report_ref: str | None = None, first: bool = False
) -> Promotion:
    """`sparkfleet promote LANE`: the running generation is marked good iff both gates pass."""
    target = for_lane(inv, lane)
    running = all_ranks_up(status(inv, lane))
    gate = bench_gate(target, report_ref=report_ref, first=first, root=inv.root)
    return promote(inv.root, lane, running, smoke_gate(target), gate)
