"""Promote's gates: the smoke questions, then the bench report against the lane's baseline.

`launch.generations.promote` is pure: it takes the two gates as arguments. They live here, where
the reports and the smoke loop are, so `sparkfleet promote` only parses options and renders:

- the report that counts is the one named (`--report`), else the newest made since the generation
  came up: an older report measured another generation;
- a failed report never passes;
- with no baseline declared, only `--first` accepts a passing report (the lane's first good);
- otherwise the report is compared with the baseline under the lane's thresholds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from ..errors import SparkfleetError
from ..jsonable import to_jsonable
from ..launch.generations import Promotion, promote
from ..launch.lane import status
from ..launch.report import LaneStatus
from . import report as reports
from .client import Endpoint, discover_model
from .probes import smoke
from .target import BenchTarget, for_lane

if TYPE_CHECKING:
    from ..inventory import Inventory

PROMOTE_SMOKE_TIMEOUT_S = 120.0


class GateVerdict(NamedTuple):
    """What the bench gate found: a tuple, as `generations.promote` unpacks it."""

    report: str | None  # the report judged (None: there was none to judge)
    passed: bool
    gate: str  # what it was judged against, in words
    regressions: list[str]


def judge(
    target: BenchTarget, since: float, *, report_ref: str | None = None, first: bool = False
) -> GateVerdict:
    """The bench gate for a generation that came up at `since` (epoch seconds)."""
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
    if not target.baseline:
        if first:
            return GateVerdict(str(path), True, "first good generation (no baseline declared yet)", [])
        return GateVerdict(
            str(path), False, "no [bench] baseline declared", ["set [bench] baseline or pass --first"]
        )
    try:
        base = reports.resolve(target.baseline, target.reports_dir)
    except SparkfleetError as exc:
        return GateVerdict(str(path), False, f"baseline {target.baseline}", [exc.message])
    cmp = reports.compare(reports.load_document(base), doc, target.thresholds, base.stem, path.stem)
    return GateVerdict(str(path), cmp.ok, f"against baseline {base.stem}", cmp.regressions)


def bench_gate(
    target: BenchTarget, *, report_ref: str | None = None, first: bool = False
) -> Callable[[float], GateVerdict]:
    """`judge` for this target and options, as `generations.promote` calls it: with `since` only."""
    return lambda since: judge(target, since, report_ref=report_ref, first=first)


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
    return promote(
        inv.root, lane, running, smoke_gate(target), bench_gate(target, report_ref=report_ref, first=first)
    )
