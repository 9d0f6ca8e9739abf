"""A bench session: check where the report will go, bench, then record (write and compare).

`run_bench` measures; this module decides what happens around it, so `sparkfleet bench` and
`sparkfleet smoke` only parse options and render the records returned here:

- before any request, the reports folder must be writable (`writable_reports_dir`);
- a lane's run is fingerprinted (every host's stack) and gets its roofline section;
- the report goes where `report.destination` says (a failed lane run to reports/failed/);
- a good run is compared with the lane's declared baseline; a baseline that cannot be read is a
  warning on the record, never a failed bench.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.atomic import writable_dir
from ..base.errors import SparkfleetError
from . import report as reports
from .client import discover_model
from .probes import LANE_BUDGET_HINT, URL_BUDGET_HINT, SmokeCase, SmokeOutcome, smoke
from .run import BenchRun, BenchSettings, run_bench
from .target import BenchTarget
from .tokens import LocalTokenizer

if TYPE_CHECKING:
    from ..fleet.inventory import Inventory

WRITABLE_HINT = "pass --out DIR (e.g. --out ./reports), or run from a writable checkout (--root)"


def writable_reports_dir(folder: Path) -> Path:
    """Refuse, before a bench runs, a reports folder that cannot be written (leaves nothing made).

    `nix run .#bench` starts sparkfleet with the flake source as its fleet root: a store path,
    read-only, so recipes/<lane>/reports there is never a place for a report.
    """
    return writable_dir(folder, "reports folder", WRITABLE_HINT)


def lane_fingerprinter(inv: Inventory, lane: str) -> Callable[[], dict[str, dict[str, Any]]]:
    """Reads every lane host's stack (kernel, driver, CUDA, NCCL, firmware, clocks, image) on the node.

    The image fingerprinted is the one the recipe launches (its pin's ref), none for a lane that
    sparkfleet does not launch.
    """
    from ..lane.recipe import launch_recipe
    from ..launch.preflight import lane_fingerprints

    image = None
    if inv.lane(lane).sections.launch is not None:
        pin = launch_recipe(inv, lane).image
        image = pin.ref if pin is not None else None
    return lambda: lane_fingerprints(inv, lane, image)


def staged_counter(target: BenchTarget) -> tuple[LocalTokenizer | None, str | None]:
    """The model's own tokenizer from the staged hub, when there is one and `tokenizers` is installed.

    Returns (counter, why not): a tokenizer that cannot be loaded is a note for the operator and the
    run sizes its prompts another way, never a failed bench.
    """
    if target.tokenizer is None:
        return None, None
    try:
        return LocalTokenizer(target.tokenizer), None
    except SparkfleetError as exc:
        return None, f"not using {target.tokenizer}: {exc.message}"


# -- smoke --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SmokeRun:
    """`sparkfleet smoke`'s result (its --json document, field for field)."""

    ok: bool
    url: str
    lane: str | None
    model: str | None
    cases: list[SmokeOutcome]


def smoke_target(
    target: BenchTarget, *, model: str | None = None, timeout: float = 120.0, max_tokens: int | None = None
) -> SmokeRun:
    """Ask the target's smoke prompts; `max_tokens` overrides every case's budget.

    A cut-off answer's hint names what the operator can change: a lane's recipe, or --max-tokens.
    """
    endpoint = discover_model(target.endpoint(model, timeout))
    cases = [SmokeCase(c.prompt, c.expect, max_tokens or c.max_tokens) for c in target.smoke]
    outcomes = smoke(endpoint, cases, LANE_BUDGET_HINT if target.lane else URL_BUDGET_HINT)
    return SmokeRun(all(o.passed for o in outcomes), target.url, target.lane, endpoint.model, outcomes)


# -- bench, then record ---------------------------------------------------------------------------
@dataclass
class Recorded:
    """A bench run as written: its report's paths, its key metrics and its baseline comparison."""

    run: BenchRun
    paths: reports.ReportPaths
    metrics: dict[str, Any]
    comparison: reports.Comparison | None = None
    warnings: list[str] = field(default_factory=list)  # e.g. a declared baseline that was not compared

    @property
    def failed(self) -> bool:
        """A failed run, or a regression against the baseline (a refused comparison is not one)."""
        return self.run.status != "ok" or (self.comparison is not None and bool(self.comparison.regressions))


def record(
    run: BenchRun,
    target: BenchTarget,
    *,
    inv: Inventory | None = None,
    out: Path | None = None,
    save_to_lane: bool = False,
    trust_measured: bool = False,
) -> Recorded:
    """Attach a lane run's roofline section, write the report where it belongs, compare with the baseline.

    `inv` is the fleet a lane target came from (its roofline facts); None for a --url or gateway run.
    `trust_measured`: the section vets measured figures as `roofline --trust-measured` does.
    """
    if target.lane and inv is not None:
        from ..roofline.service import section_for_report

        run.roofline = section_for_report(inv, target.lane, reports.to_document(run), trust_measured)
    lane_reports = target.reports_dir if target.lane else None
    folder = reports.destination(lane_reports, run.status == "ok", out=out, save_to_lane=save_to_lane)
    paths = reports.write_report(run, folder)
    comparison, warnings = None, []
    if target.baseline and run.status == "ok":
        try:
            base_path = reports.resolve(target.baseline, lane_reports)
            comparison = reports.compare(
                reports.load_document(base_path),
                reports.load_document(paths.json),
                target.thresholds,
                base_path.stem,
                paths.json.stem,
            )
        except SparkfleetError as exc:
            warnings.append(f"baseline {target.baseline!r} not compared: {exc.message}")
    metrics = reports.key_metrics(reports.to_document(run))
    return Recorded(run, paths, metrics, comparison, warnings)


def bench(
    target: BenchTarget,
    settings: BenchSettings,
    tag: str,
    *,
    inv: Inventory | None = None,
    out: Path | None = None,
    save_to_lane: bool = False,
    trust_measured: bool = False,
    **run_options: Any,
) -> Recorded:
    """Bench, then record: `run_options` go to `run_bench` (model, tokenizer, progress, timeout,
    fingerprint); `inv`, `out`, `save_to_lane` and `trust_measured` to `record`."""
    return record(run_bench(target, settings, tag, **run_options), target, inv=inv, out=out,
                  save_to_lane=save_to_lane, trust_measured=trust_measured)  # fmt: skip
