"""Staging plan: what the local hub needs for one repo revision, computed without writing anything.

`scan_source` reads the source hub (the NAS): the revision, every snapshot entry with its link
chain, the refs pointing at that commit, the tree listing and `.no_exist` markers. `plan_stage`
diffs that with the destination: which final files are absent (copy), present (check, then keep or
recopy), or can be reused from an identical local blob (hardlink after content is shown equal).
Paths in a plan are hub-relative, and the local hub mirrors the source hub path for path: the
same relative links, every target materialized at its mapped path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath

from ..base.errors import SourceError
from ..facts.hubcache import (
    SHARED_MANIFEST_SUFFIX,
    HubRoot,
    LinkChain,
    SnapshotEntry,
    check_revision,
    is_shared_store_path,
    repo_folder,
)
from .fanout import content_key


@dataclass(frozen=True)
class StageRequest:
    """One repo revision to stage from `source_hub` to `dest_hub`, with allow/ignore patterns."""

    source_hub: Path
    dest_hub: Path
    repo: str
    revision: str = "main"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def selects(self, path: str) -> bool:
        """huggingface_hub's allow/ignore semantics: fnmatch, `*` crosses `/`, a trailing `/` means `/*`."""
        include = [_pattern(p) for p in self.include]
        exclude = [_pattern(p) for p in self.exclude]
        if include and not any(fnmatch(path, p) for p in include):
            return False
        return not any(fnmatch(path, p) for p in exclude)


def _pattern(p: str) -> str:
    return p + "*" if p.endswith("/") else p


@dataclass(frozen=True)
class PlannedEntry:
    """A snapshot entry and whether this plan stages it."""

    path: str
    size: int
    excluded: bool
    is_link: bool
    final: str  # hub-relative path of the file the entry resolves to


@dataclass(frozen=True)
class PlannedFile:
    """A regular file the local hub must hold at `rel` (same path as on the source)."""

    rel: str
    size: int
    address: tuple[str, str] | None  # (algorithm, hex) promised by a blob name on its chain
    action: str  # "copy" | "check" | "reuse"
    reuse_from: str | None = None  # hub-relative local file with the same content address
    ident: tuple[int, int, int] | None = field(default=None, compare=False)  # source (dev, ino, size)
    # a "check" whose local copy has another size than the source: a repair known without reading
    size_differs: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class PlannedLink:
    """A symlink the local hub must hold at `rel` with exactly `target` as its text."""

    rel: str
    target: str


@dataclass(frozen=True)
class SourceScan:
    """Everything read from the source hub for one request."""

    request: StageRequest
    source: HubRoot
    commit: str
    entries: tuple[SnapshotEntry, ...]
    refs: dict[str, str]  # ref name → commit, only refs that point at `commit`
    tree_listing: dict | None
    no_exist: tuple[str, ...]
    shared_store: bool

    @property
    def repo_dir(self) -> str:
        return repo_folder(self.request.repo)


@dataclass(frozen=True)
class StagePlan:
    """The whole job for one repo revision; printable as the `--dry-run` output."""

    repo: str
    revision: str
    commit: str
    entries: tuple[PlannedEntry, ...]
    files: tuple[PlannedFile, ...]
    links: tuple[PlannedLink, ...]
    refs: dict[str, str]
    tree_listing: dict | None = field(repr=False)
    no_exist: tuple[str, ...] = field(repr=False)
    shared_manifests: dict[str, tuple[str, ...]] = field(repr=False)
    shared_store: bool = False

    @property
    def included(self) -> list[PlannedEntry]:
        return [e for e in self.entries if not e.excluded]

    @property
    def excluded(self) -> list[PlannedEntry]:
        return [e for e in self.entries if e.excluded]

    @property
    def excluded_bytes(self) -> int:
        return sum(e.size for e in self.excluded)

    @property
    def copy_bytes(self) -> int:
        return sum(f.size for f in self.files if f.action == "copy")

    @property
    def repair_bytes(self) -> int:
        """Bytes of local files known wrong before reading them (their size differs): re-copied."""
        return sum(f.size for f in self.files if f.action == "check" and f.size_differs)

    @property
    def unread_check_bytes(self) -> int:
        """Bytes of local files only reading can judge: a mismatch among them is re-copied too."""
        return sum(f.size for f in self.files if f.action == "check" and not f.size_differs)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def summary(self) -> dict:
        return {
            "repo": self.repo,
            "revision": self.revision,
            "commit": self.commit,
            "entries": len(self.included),
            "links": len(self.links),
            "files": len(self.files),
            "bytes_total": self.total_bytes,
            "bytes_to_copy": self.copy_bytes,
            "files_to_copy": sum(1 for f in self.files if f.action == "copy"),
            "files_to_check": sum(1 for f in self.files if f.action == "check"),
            "files_to_repair": sum(1 for f in self.files if f.action == "check" and f.size_differs),
            "bytes_to_repair": self.repair_bytes,
            "bytes_to_check_unread": self.unread_check_bytes,
            "repair_list": [f.rel for f in self.files if f.action == "check" and f.size_differs],
            "files_to_reuse": sum(1 for f in self.files if f.action == "reuse"),
            "excluded_entries": len(self.excluded),
            "excluded_bytes": self.excluded_bytes,
            "excluded_paths": [e.path for e in self.excluded],
            "file_list": [[f.rel, f.size, f.action, content_key(f.rel, f.address)] for f in self.files],
        }


def scan_source(request: StageRequest) -> SourceScan:
    """Read the source hub for `request`; raise SourceError (naming the path) on anything unsafe."""
    check_revision(request.revision, request.repo)
    source = HubRoot(request.source_hub)
    commit = source.resolve_revision(request.repo, request.revision)
    entries = tuple(source.snapshot(request.repo, commit))
    if not entries:
        raise SourceError(f"{request.repo}@{commit}: the snapshot on {request.source_hub} is empty")
    refs = {name: value for name, value in source.refs(request.repo).items() if value == commit}
    if request.revision not in refs and not commit.startswith(request.revision):
        refs[request.revision] = commit
    return SourceScan(
        request=request,
        source=source,
        commit=commit,
        entries=entries,
        refs=refs,
        tree_listing=source.tree_listing(request.repo, commit),
        no_exist=tuple(source.no_exist(request.repo, commit)),
        shared_store=source.has_shared_store(),
    )


def _local_link_target(link_rel: str, text: str, target_rel: str) -> str:
    """The text a local link gets: the source's own text when relative and pointing at the same path,
    else a relative path to the mapped target (an absolute NAS path must never be copied)."""
    if not os.path.isabs(text):
        lexical = os.path.normpath(os.path.join(os.path.dirname(link_rel), text))
        if lexical == target_rel:
            return text
    return os.path.relpath(target_rel, os.path.dirname(link_rel))


def _chain_links(chain: LinkChain) -> list[PlannedLink]:
    links = []
    for i, hop in enumerate(chain.hops):
        target_rel = chain.hops[i + 1].path if i + 1 < len(chain.hops) else chain.final
        links.append(PlannedLink(hop.path, _local_link_target(hop.path, hop.text, target_rel)))
    return links


def local_blob_index(dest_hub: Path) -> dict[str, str]:
    """Content-addressed regular files already in the local hub: blob name → hub-relative path."""
    index: dict[str, str] = {}
    if not dest_hub.is_dir():
        return index
    for blobs in sorted(dest_hub.glob("*--*/blobs")):
        for path in blobs.iterdir():
            if len(path.name) == 64 and path.is_file() and not path.is_symlink():
                index.setdefault(path.name, path.relative_to(dest_hub).as_posix())
    return index


def plan_stage(scan: SourceScan, blob_index: dict[str, str] | None = None) -> StagePlan:
    """Diff the source scan with the destination by existence only; content is judged in execute/verify."""
    request = scan.request
    dest = Path(request.dest_hub)
    if blob_index is None:
        blob_index = local_blob_index(dest)
    entries: list[PlannedEntry] = []
    files: dict[str, PlannedFile] = {}
    links: dict[str, PlannedLink] = {}
    manifests: dict[str, set[str]] = {}
    for entry in scan.entries:
        excluded = not request.selects(entry.path)
        entries.append(PlannedEntry(entry.path, entry.size, excluded, entry.is_link, entry.chain.final))
        if excluded:
            continue
        for link in _chain_links(entry.chain):
            links[link.rel] = link
        final = entry.chain.final
        address = entry.chain.content_address()
        if is_shared_store_path(final) and entry.chain.hops:
            # The manifest lists the repo blob link that points straight at the store entry.
            last = entry.chain.hops[-1].path
            if PurePosixPath(last).parts[1:2] == ("blobs",):
                manifests.setdefault(final + SHARED_MANIFEST_SUFFIX, set()).add(last)
        if final in files:
            continue
        local = dest / final
        differs = False
        if local.is_file() and not local.is_symlink():
            action, reuse = "check", None
            differs = local.stat().st_size != entry.size
        elif (
            address
            and address[0] == "sha256"
            and address[1] in blob_index
            and blob_index[address[1]] != final
        ):
            action, reuse = "reuse", blob_index[address[1]]
        else:
            action, reuse = "copy", None
        files[final] = PlannedFile(final, entry.size, address, action, reuse, entry.chain.ident, differs)
    return StagePlan(
        repo=request.repo,
        revision=request.revision,
        commit=scan.commit,
        entries=tuple(entries),
        files=tuple(files.values()),
        links=tuple(links.values()),
        refs=dict(sorted(scan.refs.items())),
        tree_listing=_staged_listing(scan.tree_listing, {e.path for e in entries if not e.excluded}),
        no_exist=scan.no_exist,
        shared_manifests={k: tuple(sorted(v)) for k, v in sorted(manifests.items())},
        shared_store=scan.shared_store,
    )


def _staged_listing(listing: dict | None, staged: set[str]) -> dict | None:
    """The tree listing rewritten to list exactly the staged files (so offline loads see it complete)."""
    if listing is None:
        return None
    files = listing.get("files")
    if not isinstance(files, dict):
        raise SourceError("tree listing without a 'files' object")
    return {**listing, "files": {path: info for path, info in files.items() if path in staged}}
