"""The Hugging Face hub cache as data: repos, refs, snapshots, link chains, the shared store.

Layout (huggingface_hub `file_download.py`, `utils/_shared_blobs.py`, `_tree_cache.py`):

    <hub>/models--ORG--NAME/refs/<ref>                  40-hex commit, no trailing newline
    <hub>/models--ORG--NAME/snapshots/<commit>/<path>   relative link ../../blobs/<etag> (or a real file)
    <hub>/models--ORG--NAME/blobs/<etag>                the content, or a link into the shared store
    <hub>/models--ORG--NAME/trees/<commit>.json         the completeness listing of that commit
    <hub>/models--ORG--NAME/.no_exist/<commit>/<path>   empty markers of files known to be absent
    <hub>/blobs/<2hex>/<xet_hash>                       shared store (marker blobs/.huggingface-shared-blobs)

The night-shift log's first lesson: a snapshot entry is a *chain* of links, not one link. We follow
every hop ourselves, lexically, inside the hub root, and refuse a chain that dangles or leaves the
root — so a mirror can never end up reading through the NAS. Nothing here writes.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..base.errors import SourceError

REPO_TYPE_PREFIX = {"model": "models", "dataset": "datasets", "space": "spaces"}
SHARED_STORE_DIR = "blobs"
SHARED_STORE_MARKER = ".huggingface-shared-blobs"
SHARED_STORE_LAYOUT = "1\n"
SHARED_MANIFEST_SUFFIX = ".refs"
MAX_HOPS = 40

_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX_PREFIX = re.compile(r"[0-9a-f]{4,40}")
_REPO_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_STORE_PATH = re.compile(r"blobs/[0-9a-f]{2}/[0-9a-f]{64}")
# A git ref name as `git check-ref-format` allows it (the subset hub revisions use), or a hex commit:
# no `..`, no component starting with a dot or a dash or ending in `.lock`, no control characters.
_REVISION = re.compile(
    r"(?!.*\.\.)(?!.*\.lock(?:/|$))[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)*"
)


def file_kind(mode: int) -> str:
    """What a non-regular file is, for messages (a FIFO on the NAS once hung staging forever)."""
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path: Path, limit: int = 64 * 1024 * 1024) -> bytes:
    """The bytes of a small metadata file, refusing anything but a regular file before reading.

    Opened O_NONBLOCK so a FIFO planted where a ref or tree listing belongs cannot hang the
    scan; its type is checked on the open fd (no window between check and read).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SourceError(f"{path} is {file_kind(st.st_mode)}, not a regular file; refusing to read it")
        if st.st_size > limit:
            raise SourceError(f"{path} is {st.st_size} bytes; too large for hub metadata")
        chunks, total = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise SourceError(f"{path} grew past {limit} bytes while being read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def repo_folder(repo_id: str, repo_type: str = "model") -> str:
    """`ORG/NAME` → `models--ORG--NAME` (huggingface_hub's `repo_folder_name`)."""
    return "--".join([REPO_TYPE_PREFIX[repo_type], *repo_id.split("/")])


def parse_repo_spec(spec: str) -> tuple[str, str]:
    """`ORG/NAME[@REV]` → (repo_id, revision); the revision defaults to `main`."""
    repo, _, rev = spec.partition("@")
    if repo.count("/") != 1 or not all(_REPO_PART.fullmatch(part) for part in repo.split("/")):
        raise SourceError(f"bad repo {spec!r}: expected ORG/NAME[@REV]")
    check_revision(rev or "main", spec)
    return repo, rev or "main"


def is_revision(value: str) -> bool:
    """Whether `value` is a ref name or a commit (never a path that could climb out of refs/)."""
    return _REVISION.fullmatch(value) is not None and len(value) <= 255


def check_revision(value: str, context: str) -> None:
    if not is_revision(value):
        raise SourceError(
            f"{context}: revision {value!r} is not a git ref name or a commit",
            hint="a revision is a ref such as main or refs/pr/1, or a hex commit (no .., no leading dot)",
        )


def is_commit(value: str) -> bool:
    return _HEX40.fullmatch(value) is not None


def content_address(name: str) -> str | None:
    """The hash algorithm a repo blob's *name* promises, if any.

    A 64-hex repo blob name is the sha256 of an LFS/Xet file; a 40-hex one is the git blob sha1
    of a small file. Shared-store names are Xet hashes and are never content addresses here.
    """
    if _HEX64.fullmatch(name):
        return "sha256"
    if _HEX40.fullmatch(name):
        return "gitsha1"
    return None


@dataclass(frozen=True)
class Hop:
    """One symlink in a chain: where it stands (hub-relative) and the text it holds."""

    path: str
    text: str


@dataclass(frozen=True)
class LinkChain:
    """A snapshot entry followed hop by hop to a regular file, all paths hub-relative (posix)."""

    hops: tuple[Hop, ...]
    final: str
    # (st_dev, st_ino, st_size) of the final file when scanned: the copy opens exactly that file.
    ident: tuple[int, int, int] | None = field(default=None, compare=False)

    def content_address(self) -> tuple[str, str] | None:
        """(algorithm, hex) promised by a repo-level blob name on the chain, if any."""
        for rel in (*(h.path for h in self.hops), self.final):
            parts = PurePosixPath(rel).parts
            if len(parts) == 3 and parts[1] == "blobs":
                algo = content_address(parts[2])
                if algo:
                    return algo, parts[2]
        return None


@dataclass(frozen=True)
class SnapshotEntry:
    """A file of a snapshot: `path` relative to the snapshot root, and how it is stored."""

    path: str
    chain: LinkChain  # a real file inside snapshots/ is a chain with no hops
    size: int

    @property
    def is_link(self) -> bool:
        return bool(self.chain.hops)


class HubRoot:
    """A hub cache directory, read-only. Paths handed out are hub-relative posix strings."""

    def __init__(self, root: Path, side: str = "source") -> None:
        """`side` names this hub in messages: the NAS `source`, or the `local hub` being verified."""
        self.side = side
        self.given = Path(root)
        if not self.given.is_dir():
            raise SourceError(
                f"hub cache not found: {root}", hint="check the hub root path (and the NAS mount)"
            )
        self.real = Path(os.path.realpath(root))

    def abs(self, rel: str) -> Path:
        return self.real / rel

    def _rel(self, absolute: str, context: str) -> str:
        real = Path(absolute)
        try:
            rel = real.relative_to(self.real)
        except ValueError:
            raise SourceError(
                f"link escapes the hub root {self.given}: {context} → {absolute}",
                hint="every link of a snapshot must resolve inside the hub cache; fix the link on the source",
            ) from None
        return rel.as_posix()

    def canonical(self, rel_or_abs: str, context: str) -> str:
        """Hub-relative path with every *directory* symlink resolved; the last component kept as is."""
        p = rel_or_abs if os.path.isabs(rel_or_abs) else os.path.join(self.real, rel_or_abs)
        p = os.path.normpath(p)
        parent = os.path.realpath(os.path.dirname(p))
        return self._rel(os.path.join(parent, os.path.basename(p)), context)

    def chain(self, rel: str) -> LinkChain:
        """Follow `rel` hop by hop to a regular file inside the root (SourceError otherwise)."""
        hops: list[Hop] = []
        current = self.canonical(rel, rel)
        for _ in range(MAX_HOPS):
            path = self.abs(current)
            try:
                st = path.lstat()
            except FileNotFoundError:
                shown = " → ".join([h.path for h in hops] + [current])
                hint = (
                    "the source cache is incomplete; re-download that file on the NAS first"
                    if self.side == "source"
                    else "rerun `sparkfleet stage` for this host: it repairs the local tree"
                )
                raise SourceError(
                    f"dangling link on the {self.side}: {shown} (missing {self.given / current})", hint=hint
                ) from None
            if stat.S_ISLNK(st.st_mode):
                try:
                    text = os.readlink(path)
                except OSError as exc:
                    raise SourceError(
                        f"cannot read link {self.given / current}: {exc.strerror}",
                        hint="an sshfs mount rejects '..' links unless mounted with -o no_contain_symlinks",
                    ) from None
                hops.append(Hop(current, text))
                target = text if os.path.isabs(text) else os.path.join(os.path.dirname(current), text)
                current = self.canonical(target, current)
                continue
            if stat.S_ISREG(st.st_mode):
                return LinkChain(tuple(hops), current, (st.st_dev, st.st_ino, st.st_size))
            raise SourceError(
                f"not a regular file ({file_kind(st.st_mode)}): {self.given / current} (reached from {rel})",
                hint="a hub cache holds only regular files and links; remove it on the source",
            )
        raise SourceError(f"link loop or chain longer than {MAX_HOPS} hops at {self.given / rel}")

    def repo_dir(self, repo_id: str) -> Path:
        return self.real / repo_folder(repo_id)

    def resolve_revision(self, repo_id: str, revision: str) -> str:
        """A ref name, a full commit, or a unique commit prefix → the 40-hex commit on this hub."""
        check_revision(revision, repo_id)
        repo = self.repo_dir(repo_id)
        if not repo.is_dir():
            raise SourceError(f"repo {repo_id} is not in the hub cache {self.given} (no {repo.name}/)")
        snapshots = repo / "snapshots"
        have = sorted(p.name for p in snapshots.iterdir()) if snapshots.is_dir() else []
        ref_file = repo / "refs" / revision
        if os.path.lexists(ref_file) and not ref_file.is_dir():  # a FIFO here is refused, not skipped
            value = read_regular(ref_file).decode(errors="replace").strip()
            if not is_commit(value):
                raise SourceError(f"{ref_file}: not a 40-hex commit: {value[:60]!r}")
            commit = value
        elif revision in have:
            commit = revision
        elif _HEX_PREFIX.fullmatch(revision):
            matches = [c for c in have if c.startswith(revision)]
            if len(matches) > 1:
                raise SourceError(f"revision {revision!r} of {repo_id} is ambiguous: {', '.join(matches)}")
            if not matches:
                raise SourceError(
                    f"revision {revision!r} of {repo_id} is not in {self.given}",
                    hint=self._what_is_there(repo_id, have),
                )
            commit = matches[0]
        else:
            raise SourceError(
                f"revision {revision!r} of {repo_id} is not in {self.given}",
                hint=self._what_is_there(repo_id, have),
            )
        if commit not in have:
            raise SourceError(
                f"{repo_id}: ref {revision!r} points at {commit}, which has no snapshot in {self.given}"
            )
        return commit

    def _what_is_there(self, repo_id: str, snapshots: list[str]) -> str:
        refs = ", ".join(self.refs(repo_id)) or "none"
        return f"refs: {refs}; snapshots: {', '.join(snapshots) or 'none'}"

    def refs(self, repo_id: str) -> dict[str, str]:
        """Every ref of the repo (nested names such as `pr/1` included) → its commit as stored."""
        refs_dir = self.repo_dir(repo_id) / "refs"
        out: dict[str, str] = {}
        if refs_dir.is_dir():
            for path in sorted(refs_dir.rglob("*")):
                if path.is_file():
                    text = read_regular(path).decode(errors="replace").strip()
                    out[path.relative_to(refs_dir).as_posix()] = text
        return out

    def snapshot(self, repo_id: str, commit: str) -> list[SnapshotEntry]:
        """Every file of `snapshots/<commit>/`, each with its resolved chain, in path order."""
        base_rel = f"{repo_folder(repo_id)}/snapshots/{commit}"
        base = self.abs(base_rel)
        entries: list[SnapshotEntry] = []
        for dirpath, dirnames, filenames in os.walk(base):
            for d in list(dirnames):
                if os.path.islink(os.path.join(dirpath, d)):
                    raise SourceError(
                        f"directory symlink inside a snapshot is not supported: {os.path.join(dirpath, d)}"
                    )
            dirnames.sort()
            for name in sorted(filenames):
                rel_in_snapshot = os.path.relpath(os.path.join(dirpath, name), base)
                chain = self.chain(f"{base_rel}/{Path(rel_in_snapshot).as_posix()}")
                size = chain.ident[2] if chain.ident else self.abs(chain.final).stat().st_size
                entries.append(SnapshotEntry(Path(rel_in_snapshot).as_posix(), chain, size))
        return entries

    def tree_listing(self, repo_id: str, commit: str) -> dict | None:
        """huggingface_hub's `trees/<commit>.json`, parsed, or None if absent or unreadable."""
        path = self.repo_dir(repo_id) / "trees" / f"{commit}.json"
        try:
            return json.loads(read_regular(path))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise SourceError(f"unreadable tree listing {path}: {exc}") from None

    def no_exist(self, repo_id: str, commit: str) -> list[str]:
        """Hub-relative paths of the `.no_exist/<commit>/` markers."""
        base = self.repo_dir(repo_id) / ".no_exist" / commit
        if not base.is_dir():
            return []
        return sorted(
            p.relative_to(self.real).as_posix() for p in base.rglob("*") if p.is_file() and not p.is_symlink()
        )

    def has_shared_store(self) -> bool:
        marker = self.real / SHARED_STORE_DIR / SHARED_STORE_MARKER
        return marker.is_file() and read_regular(marker) == SHARED_STORE_LAYOUT.encode()


def is_shared_store_path(rel: str) -> bool:
    """Whether a hub-relative path is an entry of the hub-level shared store."""
    return _STORE_PATH.fullmatch(rel) is not None
