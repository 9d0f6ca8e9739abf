"""The bind manifest: which copy of every snapshot entry a rank reads, local NVMe or NAS.

Why: in the night-shift log the lane booted only once the manifest was back to 171 binds =
141 entries from the verified local tree + 30 page15 entries from the NAS read-only. Two rules
come from that night:
  * a snapshot directory is bound locally only when every entry in it is staged and verifies
    (a directory the local tree lacks, like the optional page15 pack, falls back to the NAS);
  * a local tree that does not verify is never bound (51 wrong blobs crashed EngineCore).
Decisions are per directory, binds per entry, so the counts match the kit's manifest.

`build_manifest` is pure; the node's agent (`agent.model_state`) reads the staging plan and
the verify report of the local tree, and sends the ModelState records this module decides on.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..base.errors import SparkfleetError
from ..facts.hubcache import HubRoot, is_commit, repo_folder

LOCAL = "local"
NAS = "nas"


@dataclass(frozen=True)
class SnapshotFile:
    """One snapshot entry of a model and whether the lane's patterns leave it out of staging."""

    path: str  # relative to snapshots/<commit>/
    excluded: bool


@dataclass(frozen=True)
class ModelState:
    """What one node knows about one model revision: its entries and its local tree's health."""

    repo: str
    commit: str
    files: tuple[SnapshotFile, ...]
    local_verified: bool  # the local tree exists and its verify report is clean
    bad_paths: tuple[str, ...] = ()  # entries the verify report names (missing/dangling/mismatch)
    problems: tuple[str, ...] = ()  # the verify report's own words, for the manifest's reasons


@dataclass(frozen=True)
class BindMount:
    """One bind: host `source` at container `target`. Model binds are always read-only."""

    source: Path
    target: str
    read_only: bool
    origin: str  # "local" | "nas" | "cache"
    repo: str | None = None

    def docker_arg(self) -> str:
        """The `-v` value: src:dst[:ro]."""
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")


@dataclass(frozen=True)
class DirDecision:
    """Why a snapshot directory is bound from where it is."""

    repo: str
    directory: str  # relative to the snapshot root; "" for the root itself
    origin: str
    reason: str
    entries: int


@dataclass(frozen=True)
class BindManifest:
    """Every model bind of one rank, with local/NAS counts and the reason for each directory."""

    host: str
    binds: tuple[BindMount, ...]
    decisions: tuple[DirDecision, ...]
    model_paths: dict[str, str]  # repo -> snapshot dir as the rank sees it (container path)

    @property
    def local(self) -> int:
        return sum(1 for b in self.binds if b.origin == LOCAL)

    @property
    def nas(self) -> int:
        return sum(1 for b in self.binds if b.origin == NAS)

    @property
    def total(self) -> int:
        return len(self.binds)


def snapshot_rel(repo: str, commit: str) -> str:
    """`models--org--name/snapshots/<commit>`: the same relative path in every hub."""
    return f"{repo_folder(repo)}/snapshots/{commit}"


def candidate_sources(repo: str, revision: str, local_hub: Path, nas_hub: Path) -> tuple[str, str]:
    """The two places a model's snapshot can bind from on a host: its local hub, else the NAS."""
    return snapshot_path(repo, revision, Path(local_hub)), snapshot_path(repo, revision, Path(nas_hub))


def snapshot_path(repo: str, revision: str, hub: Path) -> str:
    """The snapshot directory `revision` names in `hub`. A commit is its own name; a ref (`main`) is
    resolved through the hub's refs/ where this machine can read that hub, else said to be
    unresolved: `snapshots/main` is never a directory, so it is never printed as one."""
    if is_commit(revision):
        return str(hub / snapshot_rel(repo, revision))
    try:
        commit = HubRoot(hub).resolve_revision(repo, revision)
    except (SparkfleetError, OSError):
        unresolved = f"<unresolved ref {revision}: refs/{revision} there names it>"
        return f"{hub / repo_folder(repo)}/snapshots/{unresolved}"
    return str(hub / snapshot_rel(repo, commit))


def _directory(path: str) -> str:
    parent = str(PurePosixPath(path).parent)
    return "" if parent == "." else parent


def _decide(state: ModelState, directory: str, files: list[SnapshotFile]) -> tuple[str, str]:
    excluded = [f for f in files if f.excluded]
    if excluded:
        kind = "not staged (excluded by the lane's patterns)"
        if len(excluded) < len(files):
            kind = f"partly staged ({len(excluded)} of {len(files)} entries excluded)"
        return NAS, kind
    if not state.local_verified and not state.bad_paths:
        return NAS, "local tree does not verify: " + ("; ".join(state.problems[:2]) or "not staged")
    bad = [f.path for f in files if f.path in state.bad_paths]
    if bad:
        return NAS, f"{len(bad)} entries fail verify (e.g. {bad[0]})"
    return LOCAL, "staged and verified"


def build_manifest(
    host: str,
    local_hub: Path,
    nas_hub: Path,
    models: list[ModelState],
    hub_mount: str | None,
) -> BindManifest:
    """Bind every entry of every model; `hub_mount=None` means no container (paths seen as on the host).

    Without a container a rank reads one tree through one path: the local tree when every
    staged directory is local (wholly excluded packs are then absent), else the NAS tree.
    """
    binds: list[BindMount] = []
    decisions: list[DirDecision] = []
    model_paths: dict[str, str] = {}
    for state in models:
        rel = snapshot_rel(state.repo, state.commit)
        by_dir: dict[str, list[SnapshotFile]] = defaultdict(list)
        for f in state.files:
            by_dir[_directory(f.path)].append(f)
        origin_of: dict[str, str] = {}
        for directory in sorted(by_dir):
            origin, reason = _decide(state, directory, by_dir[directory])
            origin_of[directory] = origin
            decisions.append(DirDecision(state.repo, directory, origin, reason, len(by_dir[directory])))
        for f in sorted(state.files, key=lambda f: f.path):
            origin = origin_of[_directory(f.path)]
            hub = local_hub if origin == LOCAL else nas_hub
            target = f"{hub_mount}/{rel}/{f.path}" if hub_mount else str(hub / rel / f.path)
            binds.append(BindMount(hub / rel / f.path, target, True, origin, state.repo))
        if hub_mount:
            model_paths[state.repo] = f"{hub_mount}/{rel}"
        else:
            # Wholly excluded directories are simply absent from the local tree (optional packs);
            # any other directory on the NAS means the local tree cannot serve this model.
            usable = all(o == LOCAL or all(f.excluded for f in by_dir[d]) for d, o in origin_of.items())
            model_paths[state.repo] = str((local_hub if usable else nas_hub) / rel)
    return BindManifest(host, tuple(binds), tuple(decisions), model_paths)
