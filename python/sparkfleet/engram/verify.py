"""Checking a host's packs without changing anything: receipt identity, then every file.

`ok` only when the receipt exists, its identity is what the lane wants now (same source commit,
tensors, ranges, world size and rank), and every planned file is there with the right header, the
receipt's size and — by default — the receipt's sampled digest, or with `full` its sha256 over
every byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..fleet.inventory import Inventory
from . import receipt, sparse
from .config import SPARSE_SHARDS
from .pack import PackPlan, file_problem, plan, source_info
from .receipt import JOURNAL_NAME, RECEIPT_NAME


@dataclass
class PackVerify:
    """The verdict on one host's packs for one lane."""

    lane: str
    host: str
    rank: int
    world: int
    out_dir: Path
    mode: str  # "sample" | "full"
    source: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)  # name -> "ok" or the problem
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        out = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(self).items()}
        return {"ok": self.ok, **out}


def verify(inv: Inventory, lane_name: str, host_name: str, full: bool = False) -> PackVerify:
    """Verify `host_name`'s packs for the lane (reads only)."""
    the_plan = plan(inv, lane_name, host_name)
    place = the_plan.placement
    report = PackVerify(
        place.lane,
        place.host,
        place.rank,
        place.world,
        place.out_dir,
        "full" if full else "sample",
        source_info(the_plan.source),
    )
    if the_plan.spec.layout == SPARSE_SHARDS:
        return _verify_sparse(the_plan, report)
    have = receipt.read(place.out_dir / RECEIPT_NAME)
    if have is None:
        journal = (place.out_dir / JOURNAL_NAME).exists()
        report.problems.append(
            f"no receipt at {place.out_dir / RECEIPT_NAME}"
            + (" (a pack was interrupted: rerun `sparkfleet engram pack`)" if journal else "")
        )
    elif have.identity != the_plan.identity:
        diffs = receipt.differences(the_plan.identity, have.identity)
        report.problems.append(f"receipt identity differs from the lane's: {'; '.join(diffs[:4])}")
    for f in the_plan.files:
        record = have.files.get(f.name) if have else None
        problem = file_problem(f.path, f.header, record, full)
        report.files[f.name] = problem or "ok"
        if problem:
            report.problems.append(f"{f.name}: {problem}")
    return report


def _verify_sparse(base: PackPlan, report: PackVerify) -> PackVerify:
    """The sparse-shards layout: engram-local.json naming this rank's ranges, and every shard copy
    (size, header, sampled rows against the source). The shards rank has nothing to verify."""
    the_plan = sparse.sparse_plan(base)
    if the_plan.reads_shards:
        return report
    out = base.placement.out_dir
    manifest = sparse.read_json(out / sparse.MANIFEST)
    if manifest is None:
        report.problems.append(f"no {sparse.MANIFEST} in {out} (run `sparkfleet engram pack`)")
    elif manifest.get("layers") != the_plan.layers:
        report.problems.append(
            f"{sparse.MANIFEST} names rows {manifest.get('layers')}, the lane wants {the_plan.layers}"
        )
    for c in the_plan.copies:
        problem = sparse.copy_problem(c, out)
        report.files[c.name] = problem or "ok"
        if problem:
            report.problems.append(problem)
    return report
