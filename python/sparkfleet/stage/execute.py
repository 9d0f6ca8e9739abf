"""Carrying out stage plans: the only code in the stager that writes.

Order matters and is the crash-safety argument:
  1. under the hub lock, sweep temps a killed run left behind;
  2. judge what is already there (content, never mtime or size alone) and what can be reused;
  3. preflight: bytes still to copy vs free space minus the host's reserve — refuse before byte one;
  4. files: temp → fsync → verify → os.replace (parallel workers: NFS wants several streams);
  5. links (temp link + os.replace), `.no_exist` markers, shared-store marker and manifests;
  6. the tree listing, then refs last — a ref only ever names a commit whose tree is complete.
A `kill -9` anywhere leaves final names either absent or correct; the rerun converges.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..base import atomic, space
from ..base.digests import Verdict, compare
from ..base.errors import SourceError, SpaceError, SparkfleetError, from_os_error
from ..base.lock import hub_lock
from ..base.space import free_bytes
from ..facts.hubcache import SHARED_STORE_DIR, SHARED_STORE_LAYOUT, SHARED_STORE_MARKER
from ..remote.hosts import fan_out
from . import staged
from .copy import copy_verified, link_verified, place_verified
from .fanout import assign_shares, content_key, tree_position, tree_sources
from .plan import PlannedFile, SourceScan, StagePlan, StageRequest, local_blob_index, plan_stage, scan_source
from .transport import PeerMiss, PeerSource
from .verify import VerifyReport, arrival_mode, verify_plan


class StageProgress(Protocol):
    """Where execute reports progress: a rich bar on a TTY, JSON lines or nothing otherwise."""

    def phase(self, name: str, total_bytes: int, total_items: int) -> None: ...
    def advance(self, nbytes: int) -> None: ...
    def item_done(self, rel: str) -> None: ...


class NoProgress:
    def phase(self, name: str, total_bytes: int, total_items: int) -> None:
        pass

    def advance(self, nbytes: int) -> None:
        pass

    def item_done(self, rel: str) -> None:
        pass


@dataclass
class StageResult:
    """What one repo revision's staging did, and the verification of the result."""

    repo: str
    revision: str
    commit: str
    copied_files: int = 0
    copied_bytes: int = 0
    repaired_files: int = 0
    reused_files: int = 0
    reused_bytes: int = 0
    kept_files: int = 0
    kept_bytes: int = 0
    excluded_entries: int = 0
    excluded_bytes: int = 0
    links_total: int = 0
    links_written: int = 0
    meta_written: int = 0
    refs_written: int = 0
    temps_swept: int = 0
    peer_files: int = 0
    peer_bytes: int = 0
    peer_failures: list[str] = field(default_factory=list)
    peer_misses: int = 0  # asked a tree parent that had not got the file yet (then the seed)
    peer_bytes_from: dict[str, int] = field(default_factory=dict)  # fan-out: bytes each peer served
    verify: VerifyReport | None = None

    def to_dict(self) -> dict:
        out = {k: v for k, v in vars(self).items() if k != "verify"}
        out["verify"] = self.verify.to_dict() if self.verify else None
        return out


@dataclass
class StageRun:
    """A whole `sparkfleet stage` invocation: per-repo results plus totals and timing."""

    dest_hub: Path
    verify_mode: str
    results: list[StageResult] = field(default_factory=list)
    seconds: float = 0.0
    bytes_needed: int = 0
    bytes_free: int = 0
    reserve_bytes: int = 0
    share: tuple[int, int] | None = None  # fan-out wave 1: only this share of the files, no links/refs

    @property
    def ok(self) -> bool:
        if self.share is not None:
            return True  # every file placed was verified on the way in; completeness is wave 2's job
        return all(r.verify is not None and r.verify.ok for r in self.results)

    @property
    def copied_bytes(self) -> int:
        return sum(r.copied_bytes for r in self.results)

    @property
    def mb_per_s(self) -> float:
        return self.copied_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "dest_hub": str(self.dest_hub),
            "verify_mode": self.verify_mode,
            "seconds": round(self.seconds, 3),
            "copied_bytes": self.copied_bytes,
            "reused_bytes": sum(r.reused_bytes for r in self.results),
            "kept_bytes": sum(r.kept_bytes for r in self.results),
            "excluded_bytes": sum(r.excluded_bytes for r in self.results),
            "mb_per_s": round(self.mb_per_s, 1),
            "bytes_needed": self.bytes_needed,
            "bytes_free": self.bytes_free,
            "reserve_bytes": self.reserve_bytes,
            "share": list(self.share) if self.share else None,
            "nas_bytes": sum(r.copied_bytes - r.peer_bytes for r in self.results),
            "peer_bytes": sum(r.peer_bytes for r in self.results),
            "repos": [r.to_dict() for r in self.results],
        }


def preflight(dest_hub: Path, needed: int, reserve: int, sizes: Sequence[int] = (), inodes: int = 0) -> int:
    """Refuse before the first byte when the run does not fit at `dest_hub` (space.check: bytes as
    whole blocks of `sizes`, `inodes` against the free inodes, the host's reserve)."""
    return space.check(
        dest_hub,
        needed,
        reserve,
        sizes=sizes,
        inodes=inodes,
        space_hint="free space, lower the host's reserve_gib, or exclude optional packs (e.g. page15/*)",
        inode_hint="free inodes there (many small files), or stage to a filesystem with more",
    )


@dataclass
class _Decision:
    file: PlannedFile
    action: str  # "keep" | "copy" | "repair" | "reuse"
    reuse_from: str | None = None


def _decide(
    scan: SourceScan, plan: StagePlan, mode: str, jobs: int, progress: StageProgress, fresh=frozenset()
) -> list[_Decision]:
    """Judge what is there. `fresh`: files this host's fan-out wave 1 just placed; they are checked
    as arrivals (a sha256 blob hashed here), not against the NAS again. A file whose identity moved
    since the last stage recorded it (stage/staged.py) is read whole, never only sampled: else a
    repair run would keep a corrupted file that the sample misses, and record it as good."""
    dest, source = Path(scan.request.dest_hub), scan.source
    record = staged.read(dest, scan.repo_dir, plan.commit)  # a file changed since staging: read it whole

    def decide(f: PlannedFile) -> _Decision:
        try:
            if f.action == "check":
                how = arrival_mode(mode) if f.rel in fresh else mode
                if how == "sample" and record and record.get(f.rel) != staged.identity(dest / f.rel):
                    how = "full"
                verdict = compare(dest / f.rel, source.abs(f.rel), how, f.address)
                return _Decision(f, "keep" if verdict.same else "repair")
            if f.action == "reuse" and compare(dest / f.reuse_from, source.abs(f.rel), mode, f.address).same:
                return _Decision(f, "reuse", f.reuse_from)
            return _Decision(f, "copy")
        finally:
            progress.item_done(f.rel)

    progress.phase(f"check {plan.repo}", 0, len(plan.files))
    return fan_out(decide, plan.files, limit=jobs)


def _reuse_within_run(decided: list[tuple[SourceScan, StagePlan, list[_Decision]]]) -> None:
    """A sha256 blob an earlier repo of this run copies is hardlinked (after verification), not recopied."""
    copied: dict[str, str] = {}
    for _, _, decisions in decided:
        for d in decisions:
            address = d.file.address
            if not address or address[0] != "sha256":
                continue
            if d.action == "copy" and address[1] in copied and copied[address[1]] != d.file.rel:
                d.action, d.reuse_from = "reuse", copied[address[1]]
            elif d.action in ("copy", "repair", "keep"):
                copied.setdefault(address[1], d.file.rel)


def _sources_for(rel: str, shares: dict[str, int], peers: Sequence[PeerSource | None]) -> list[PeerSource]:
    """Peers to try for `rel`: up its tree from this host to the seed, then the others (fanout.py)."""
    me = list(peers).index(None) if None in peers else None
    if rel not in shares or me is None:
        return [p for p in peers if p is not None]
    return [peers[i] for i in tree_sources(me, shares[rel], len(peers)) if peers[i] is not None]


def _write_files(scan, decisions, mode, jobs, result: StageResult, progress: StageProgress, fanout) -> None:
    dest, source = Path(scan.request.dest_hub), scan.source
    shares, peers = fanout
    todo = [d for d in decisions if d.action in ("copy", "repair", "reuse")]
    if peers and None in peers:  # lowest tree position first: parents tend to finish before children ask
        me = list(peers).index(None)
        todo.sort(key=lambda d: tree_position(me, shares.get(d.file.rel, me), len(peers)))
    lock = threading.Lock()

    def from_peers(f: PlannedFile, final: Path) -> bool:
        sha256 = f.address is not None and f.address[0] == "sha256"
        for peer in _sources_for(f.rel, shares, peers):
            if not (sha256 or peer.protects_bytes):
                continue  # no name to check and a transport that does not protect bytes: NAS copy
            try:
                fill = lambda tmp, p=peer: p.fill(f.rel, tmp)  # noqa: E731
                place_verified(final, fill, source.abs(f.rel), mode, f.address)
            except PeerMiss:
                with lock:
                    result.peer_misses += 1
                continue
            except (OSError, SparkfleetError, subprocess.SubprocessError) as exc:
                with lock:
                    result.peer_failures.append(f"{peer.name}: {f.rel}: {exc}")
                continue
            with lock:
                result.peer_files += 1
                result.peer_bytes += f.size
                result.peer_bytes_from[peer.name] = result.peer_bytes_from.get(peer.name, 0) + f.size
            progress.advance(f.size)
            return True
        return False

    def write(d: _Decision) -> None:
        f = d.file
        final = inside(dest, dest / f.rel)
        reference = source.abs(f.rel)
        if d.action == "reuse" and link_verified(dest / d.reuse_from, reference, final, mode, f.address):
            with lock:
                result.reused_files += 1
                result.reused_bytes += f.size
            progress.advance(f.size)
        else:
            if not (peers and from_peers(f, final)):
                copy_verified(source.abs(f.rel), final, f.size, mode, f.address, progress.advance, f.ident)
            with lock:
                result.copied_files += 1
                result.copied_bytes += f.size
                result.repaired_files += d.action == "repair"
        progress.item_done(f.rel)

    progress.phase(f"copy {scan.request.repo}", sum(d.file.size for d in todo), len(todo))
    fan_out(write, todo, limit=jobs)


def inside(dest: Path, path: Path) -> Path:
    """`path`, after checking it stays lexically under `dest` (a hostile name never writes elsewhere)."""
    normal = Path(os.path.normpath(path))
    if normal == Path(os.path.normpath(dest)) or Path(os.path.normpath(dest)) not in normal.parents:
        raise SparkfleetError(f"refusing to write {path}: outside the destination hub {dest}")
    return path


def recheck_chains(scan: SourceScan, plan: StagePlan) -> None:
    """Before the refs publish the commit: every staged entry's chain on the source is still the
    scanned one (same hops, same final file, same inode and size). A link retargeted while we
    copied would otherwise leave a local tree that matches neither the old nor the new source."""
    staged = {e.path for e in plan.included}
    for entry in scan.entries:
        if entry.path not in staged:
            continue
        rel = f"{scan.repo_dir}/snapshots/{scan.commit}/{entry.path}"
        now = scan.source.chain(rel)
        if now != entry.chain or now.ident != entry.chain.ident:
            raise SourceError(
                f"{scan.source.given / rel} changed since the scan (its link chain or file moved); "
                "the commit was not published (no ref written)",
                hint="something rewrote the source hub while staging; rerun once it is settled",
            )


def _write_metadata(scan: SourceScan, plan: StagePlan, result: StageResult) -> None:
    dest = Path(scan.request.dest_hub)
    for link in sorted(plan.links, key=lambda link: link.rel):
        result.links_written += atomic.symlink(inside(dest, dest / link.rel), link.target)
    result.links_total = len(plan.links)
    for rel in plan.no_exist:
        if not (dest / rel).exists():
            result.meta_written += atomic.write_bytes(inside(dest, dest / rel), b"")
    if plan.shared_manifests:
        result.meta_written += atomic.write_bytes(
            dest / SHARED_STORE_DIR / SHARED_STORE_MARKER, SHARED_STORE_LAYOUT.encode()
        )
    for manifest_rel, references in plan.shared_manifests.items():
        path = inside(dest, dest / manifest_rel)
        try:
            have = set(path.read_text().splitlines())
        except OSError:
            have = set()
        lines = sorted(have | set(references))
        result.meta_written += atomic.write_bytes(path, "".join(f"{line}\n" for line in lines).encode())
    repo_dir = dest / scan.repo_dir
    if plan.tree_listing is not None:
        listing = {**plan.tree_listing, "files": dict(sorted(plan.tree_listing["files"].items()))}
        text = json.dumps(listing, indent=1).encode()
        result.meta_written += atomic.write_bytes(
            inside(dest, repo_dir / "trees" / f"{plan.commit}.json"), text
        )
    atomic.ensure_dir(repo_dir / "snapshots" / plan.commit)
    recheck_chains(scan, plan)
    # Refs last, with no trailing newline: huggingface_hub reads them with f.read() and no strip.
    for name, commit in plan.refs.items():
        result.refs_written += atomic.write_bytes(inside(dest, repo_dir / "refs" / name), commit.encode())


def _inodes_needed(dest: Path, decided) -> int:
    """Files, links, metadata and folders the plans would create that are not there yet."""
    new: set[str] = set()
    for scan, plan, decisions in decided:
        rels = [d.file.rel for d in decisions if d.action != "keep"]
        rels += [link.rel for link in plan.links]
        rels += list(plan.no_exist) + list(plan.shared_manifests)
        rels += [f"{scan.repo_dir}/refs/{name}" for name in plan.refs]
        rels += [f"{scan.repo_dir}/trees/{plan.commit}.json", f"{scan.repo_dir}/snapshots/{plan.commit}"]
        for rel in rels:
            parts = rel.split("/")
            for i in range(1, len(parts) + 1):
                new.add("/".join(parts[:i]))
    return sum(1 for rel in new if not os.path.lexists(dest / rel)) + 2  # + temp and lock


def execute_plans(
    scans_and_plans: list[tuple[SourceScan, StagePlan]],
    *,
    dest_hub: Path,
    verify_mode: str,
    jobs: int,
    reserve_bytes: int,
    progress: StageProgress,
    share: tuple[int, int] | None = None,
    peers: Sequence[PeerSource | None] = (),
) -> StageRun:
    """Carry out plans for one destination hub. The caller holds the hub lock.

    `share=(i, n)`: fan-out wave 1, place only share i of n (no links, listings or refs).
    `peers`: fan-out wave 2, one entry per share (None for this host): where to pull files first.
    """
    start = time.monotonic()
    run = StageRun(dest_hub=dest_hub, verify_mode=verify_mode, reserve_bytes=reserve_bytes, share=share)
    count = share[1] if share else len(peers)
    files = [(f.rel, f.size, content_key(f.rel, f.address)) for _, p in scans_and_plans for f in p.files]
    shares = assign_shares(files, count) if count else {}
    if share is not None:
        scans_and_plans = [
            (scan, dataclasses.replace(plan, files=tuple(f for f in plan.files if shares[f.rel] == share[0])))
            for scan, plan in scans_and_plans
        ]
    swept = 0
    for scan, _ in scans_and_plans:
        swept += len(atomic.sweep_temps(dest_hub / scan.repo_dir))
        swept += len(atomic.sweep_temps(dest_hub / staged.FOLDER / scan.repo_dir))
    swept += len(atomic.sweep_temps(dest_hub / SHARED_STORE_DIR))
    # Fan-out checks sha256 blobs as they arrive by hashing them here (verify.arrival_mode): no NAS
    # re-reads. A plain stage keeps its sampled windows: hashing every byte would halve its speed.
    arrival = arrival_mode(verify_mode) if share is not None or peers else verify_mode
    own = list(peers).index(None) if None in peers else None  # wave 2: my wave-1 share
    fresh = frozenset(rel for rel, i in shares.items() if i == own)
    decided = [
        (scan, plan, _decide(scan, plan, verify_mode, jobs, progress, fresh))
        for scan, plan in scans_and_plans
    ]
    _reuse_within_run(decided)
    run.bytes_needed = sum(
        d.file.size for _, _, decisions in decided for d in decisions if d.action in ("copy", "repair")
    )
    copies = [d.file.size for _, _, decisions in decided for d in decisions if d.action in ("copy", "repair")]
    run.bytes_free = preflight(
        dest_hub, run.bytes_needed, reserve_bytes, sizes=copies, inodes=_inodes_needed(dest_hub, decided)
    )
    for i, (scan, plan, decisions) in enumerate(decided):
        result = StageResult(plan.repo, plan.revision, plan.commit, temps_swept=swept if i == 0 else 0)
        result.excluded_entries, result.excluded_bytes = len(plan.excluded), plan.excluded_bytes
        kept = [d for d in decisions if d.action == "keep"]
        result.kept_files, result.kept_bytes = len(kept), sum(d.file.size for d in kept)
        _write_files(scan, decisions, arrival, jobs, result, progress, (shares, list(peers)))
        if share is None:
            _write_metadata(scan, plan, result)
            # Content was verified file by file above; the final pass checks the structure and refs.
            result.verify = verify_plan(scan, plan, verify_mode, content=lambda rel: Verdict(True))
        run.results.append(result)
    if share is None:  # after every write of the run: a later repo's hardlink moves an earlier one's ctime
        for scan, plan, _ in decided:
            staged.write(dest_hub, scan.repo_dir, plan.commit, [f.rel for f in plan.files])
    run.seconds = time.monotonic() - start
    return run


def stage(
    requests: list[StageRequest],
    *,
    verify_mode: str = "sample",
    jobs: int = 4,
    reserve_bytes: int = 0,
    wait_seconds: float = 0.0,
    progress: StageProgress | None = None,
    share: tuple[int, int] | None = None,
    peers: Sequence[PeerSource | None] = (),
) -> StageRun:
    """Stage every request into its destination hub (all requests share one destination)."""
    dests = {Path(r.dest_hub) for r in requests}
    if len(dests) != 1:
        raise ValueError("stage() takes requests for exactly one destination hub")
    (dest_hub,) = dests
    check_wait(wait_seconds)
    try:
        for r in requests:
            check_not_inside(Path(r.source_hub), dest_hub)
        scans = [scan_source(r) for r in requests]  # every source problem surfaces before any write
        with hub_lock(dest_hub, wait_seconds):
            index = local_blob_index(dest_hub)
            pairs = [(scan, plan_stage(scan, index)) for scan in scans]
            return execute_plans(
                pairs,
                dest_hub=dest_hub,
                verify_mode=verify_mode,
                jobs=jobs,
                reserve_bytes=reserve_bytes,
                progress=progress or NoProgress(),
                share=share,
                peers=peers,
            )
    except OSError as exc:
        err = from_os_error(exc, f"staging into {dest_hub}")
        if err is None:
            raise
        raise err from exc


def check_wait(seconds: float) -> None:
    """`--wait nan` (or inf, or negative) would wait forever or never: refuse it."""
    if not math.isfinite(seconds) or seconds < 0:
        raise SparkfleetError(f"--wait {seconds}: expected a finite number of seconds >= 0")


def check_not_inside(source: Path, dest: Path) -> None:
    """Refuse a destination equal to or inside the source (staging would copy into what it reads)."""
    src = Path(os.path.realpath(source))
    probe = Path(os.path.abspath(dest))
    tail: list[str] = []
    while not probe.exists() and probe != probe.parent:
        tail.insert(0, probe.name)
        probe = probe.parent
    real_dest = Path(os.path.realpath(probe), *tail)
    if real_dest == src or src in real_dest.parents:
        raise SparkfleetError(
            f"destination {dest} is {'the source' if real_dest == src else 'inside the source'} {source}",
            hint="stage to a hub cache outside the NAS hub",
        )


def plan(requests: list[StageRequest]) -> list[StagePlan]:
    """The dry run: every plan, reading only."""
    plans = []
    for r in requests:
        plans.append(plan_stage(scan_source(r)))
    return plans


def space_check(requests: list[StageRequest], plans: list[StagePlan], reserve_bytes: int) -> dict:
    """The dry run's preflight: what the real run checks before byte one, answered instead of raised.

    Needed = the bytes of every file the destination lacks plus every local file known wrong
    without reading it (another size than the source: repaired, through a temp copy). A real run
    may also repair files whose content fails the check, which only reading them can tell:
    `may_repair` is the most that could add.
    """
    dests = {Path(r.dest_hub) for r in requests}
    needed = sum(p.copy_bytes + p.repair_bytes for p in plans)
    out: dict = {"needed": needed, "reserve": reserve_bytes, "ok": True, "error": None, "hint": None,
                 "may_repair": sum(p.unread_check_bytes for p in plans)}  # fmt: skip
    for dest in dests:
        out["dest"] = str(dest)
        try:
            out["free"] = preflight(dest, needed, reserve_bytes)
        except SpaceError as exc:
            out.update(ok=False, free=free_bytes(dest), error=exc.message, hint=exc.hint)
    return out


def verify(requests: list[StageRequest], mode: str = "sample") -> list[VerifyReport]:
    """Verify every request's local tree against its source; reads only."""
    reports = []
    for r in requests:
        scan = scan_source(r)
        reports.append(verify_plan(scan, plan_stage(scan, {}), mode))
    return reports
