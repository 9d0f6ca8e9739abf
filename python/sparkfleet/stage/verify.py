"""Is the local tree complete and correct? Answers `links ok / dangling / mismatches / missing`.

Reads only; changes nothing. A link counts as ok only when its whole chain resolves inside the
local hub (never through the NAS) to the same hub-relative file as on the source, and that file's
content matches the source by the chosen mode. Refs and the tree listing are checked too, since a
stray newline in `refs/main` or a listing naming an unstaged file breaks offline loading.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..base.digests import Verdict, compare, sample_note
from ..base.errors import SourceError
from ..facts.hubcache import HubRoot
from . import staged
from .plan import SourceScan, StagePlan


def arrival_mode(mode: str) -> str:
    """How bytes that just arrived in a fan-out run — from the NAS or a peer — are checked.

    Under `sample`, a blob named by its sha256 is hashed whole on this host and compared with its
    name ("address"): every byte checked, and not one byte read back from the NAS — which is what
    lets fan-out take a blob from a peer at ~1x NAS bytes for the fleet. Files without a content
    address are still sampled against the NAS copy. `full` already works this way. A plain
    (non-fan-out) stage keeps `sample`'s windows: benchmarks/stage_bench.py measured hashing every
    byte at ~0.56x its cold throughput on this machine.
    """
    return "address" if mode == "sample" else mode


@dataclass
class VerifyReport:
    """The answer for one repo revision; `problems` names each bad path and why."""

    repo: str
    commit: str
    mode: str
    links_ok: int = 0
    files_ok: int = 0
    dangling: int = 0
    mismatches: int = 0
    missing: int = 0
    excluded: int = 0
    refs_ok: bool = True
    tree_listing_ok: bool = True
    problems: list[str] = field(default_factory=list)
    recorded: bool = False  # staging left a record of each file (stage/staged.py): changes are seen
    read_in_full: int = 0  # files a sampled check read whole: changed since staging, or unrecorded

    @property
    def ok(self) -> bool:
        return (
            not (self.dangling or self.mismatches or self.missing) and self.refs_ok and self.tree_listing_ok
        )

    def line(self) -> str:
        return f"links ok: {self.links_ok}, dangling: {self.dangling}, mismatches: {self.mismatches}"

    def to_dict(self) -> dict:
        return {
            "repo": self.repo,
            "commit": self.commit,
            "mode": self.mode,
            "ok": self.ok,
            "links_ok": self.links_ok,
            "files_ok": self.files_ok,
            "dangling": self.dangling,
            "mismatches": self.mismatches,
            "missing": self.missing,
            "excluded": self.excluded,
            "refs_ok": self.refs_ok,
            "tree_listing_ok": self.tree_listing_ok,
            "problems": self.problems,
            "recorded": self.recorded,
            "read_in_full": self.read_in_full,
        }


def verify_plan(
    scan: SourceScan,
    plan: StagePlan,
    mode: str,
    content: Callable[[str], Verdict] | None = None,
) -> VerifyReport:
    """Check the destination against `plan`. `content(final_rel)` may supply verdicts already known."""
    dest_root = Path(scan.request.dest_hub)
    report = VerifyReport(plan.repo, plan.commit, mode, excluded=len(plan.excluded))
    if not dest_root.is_dir():
        report.missing = len(plan.included)
        report.problems.append(f"local hub {dest_root} does not exist")
        report.refs_ok = not plan.refs
        report.tree_listing_ok = plan.tree_listing is None
        return report
    dest = HubRoot(dest_root, side="local hub")
    verdicts: dict[str, Verdict] = {}
    snapshot = f"{scan.repo_dir}/snapshots/{plan.commit}"

    addresses = {f.rel: f.address for f in plan.files}
    # A sampled check reads in full each file that changed since staging recorded it (staged.py).
    sampled = mode == "sample" and content is None
    record = staged.read(dest_root, scan.repo_dir, plan.commit) if sampled else {}
    report.recorded = bool(record)

    def judge(final: str) -> Verdict:
        if final not in verdicts:
            how = mode
            if record and record.get(final) != staged.identity(dest.abs(final)):
                how = "full"
                report.read_in_full += 1
            if content is not None:
                verdicts[final] = content(final)
            else:
                verdicts[final] = compare(dest.abs(final), scan.source.abs(final), how, addresses.get(final))
        return verdicts[final]

    for entry in plan.included:
        rel = f"{snapshot}/{entry.path}"
        local = dest.abs(rel)
        if not local.is_symlink() and not local.exists():
            report.missing += 1
            report.problems.append(f"missing: {rel}")
            continue
        try:
            chain = dest.chain(rel)
        except SourceError as exc:
            report.dangling += 1
            report.problems.append(f"dangling: {rel}: {exc.message}")
            continue
        if chain.final != entry.final:
            report.mismatches += 1
            report.problems.append(f"mismatch: {rel} resolves to {chain.final}, source to {entry.final}")
            continue
        verdict = judge(chain.final)
        if not verdict.same:
            report.mismatches += 1
            # the file a reader opens, then the blob behind it: `model-00003-of-00005.safetensors`
            # says which shard, the blob's hash alone says nothing to a person
            report.problems.append(f"mismatch: {rel} (local hub blob {chain.final}): {verdict.reason}")
        elif chain.hops:
            report.links_ok += 1
        else:
            report.files_ok += 1
    repo_dir = dest_root / scan.repo_dir
    for name, commit in plan.refs.items():
        path = repo_dir / "refs" / name
        try:
            value = path.read_text()
        except OSError:
            value = None
        if value != commit:
            report.refs_ok = False
            report.problems.append(f"ref {name}: {path} holds {value!r}, expected {commit!r} (no newline)")
    if plan.tree_listing is not None:
        path = repo_dir / "trees" / f"{plan.commit}.json"
        try:
            listed = json.loads(path.read_text())
        except (OSError, ValueError):
            listed = None
        if listed != plan.tree_listing:
            report.tree_listing_ok = False
            report.problems.append(f"tree listing {path} does not list exactly the staged files")
    return report


def verify_note(mode: str, reports: list[dict]) -> str:
    """What a verify of `reports` (VerifyReport.to_dict()s) read, and what it could not have seen:
    said with every result, so that a sampled "ok" is never read as more than it is."""
    if mode == "full":
        return "full: every byte read (sha256 against a blob's name, else the source's digest)"
    whole = sum(int(r.get("read_in_full") or 0) for r in reports)
    if reports and all(r.get("recorded") for r in reports):
        return (
            f"sampled, and each file changed since it was staged read whole ({whole} here); a byte "
            "changed below the filesystem (a failing disk) is not seen; --full reads every byte"
        )
    return f"{sample_note()}; --full reads every byte"
