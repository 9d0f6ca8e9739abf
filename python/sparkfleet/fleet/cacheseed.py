"""A lane's /cache seeded from its kit's pinned kernel cache, as the EXL3 kit seeds every run's.

Why: the EXL3 kit at 878e0ee keeps its JIT and kernel caches (cuda/, flashinfer/, tilelang/,
triton/, torch-extensions/, vllm/, exllamav3/, ...) under /cache, and starts every run from a
pinned "auxiliary runtime cache": recipe-lock.json pins `runtime.files["kernel-cache.tar"]`
(bytes, sha256) and `runtime.cache_manifest_sha256`; release/registry.py prepare() copies the tar
out of the pinned image (/opt/ds41-release/kernel-cache.tar, from a container created, never
started, removed by ID); release/bootstrap.py extract() unpacks it (relative members, files and
directories only) and restores every file's mtime_ns from cache-manifest.json; portable_node.py
cache_inputs() checks that manifest and create() copies each file into the run's cache (copy2)
and checks its sha256 and mtime again. The mtimes matter: the compilers treat a changed mtime as a
stale input and rebuild (a cold boot, minutes), which is what an unseeded /cache does every time.

Here: `seedprep.prepare` makes the verified tree once per asset (content-addressed under the
host's state dir); `seed` copies into the lane's cache dir what is missing or differs, before
every serve, and never deletes what the engine wrote. Every fact is read from the kit's own files
in the pinned checkout: nothing of the lock is restated in the recipe.

Node-side and light: the agent imports it (no TOML, no jsonschema).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..base.atomic import ensure_dir, fsync_dir, temp_name
from ..base.digests import full_digest
from ..base.errors import ExitCode, SparkfleetError
from ..base.relnames import plain_relative

# portable_node.py cache_inputs() at 878e0ee: its format, and its bounds on the inventory.
LOCK_FORMAT = "ds41_public_recipe_lock_v2"  # recipe-lock.json at 878e0ee
MANIFEST_NAME = "cache-manifest.json"
MANIFEST_FORMAT = "ds41_auxiliary_runtime_cache_v1"
MAX_FILES = 100000
MAX_FILE_BYTES = 512 * 2**20
MAX_TOTAL_BYTES = 8 * 2**30
# portable_node.py create(): `for part in sorted(CACHE_ROOTS | {'tmp','hf'})` (TMPDIR, HF_HOME)
EXTRA_DIRS = ("tmp", "hf")
SHA256 = re.compile(r"[0-9a-f]{64}")
STORE_DIR = "cacheseed"  # under a host's state_dir: one verified tree per asset sha256


@dataclass(frozen=True)
class CacheSeed:
    """Where one host reads a lane's kernel cache ([launch.cache_seed]), as host paths."""

    pin: str  # the kit's git pin (hosts/fleet.toml)
    rev: str
    lock: str  # <checkout>/recipe-lock.json
    asset: str  # its runtime.files key: kernel-cache.tar
    image_path: str  # where the pinned image holds the asset
    roots_from: str  # <checkout>/<the kit file that defines CACHE_ROOTS>
    store: str  # <state_dir>/cacheseed: one verified tree per asset sha256
    engine: str  # docker | podman: the lane's runtime, which holds the image
    image: str  # the lane's image reference

    def describe(self) -> str:
        """One line for --dry-run: what is seeded, from where, checked against what."""
        return (
            f"{self.asset} out of {self.image}:{self.image_path}, checked against "
            f"{self.pin}@{self.rev[:10]}'s {Path(self.lock).name} and the tar's {MANIFEST_NAME} "
            f"(sha256, mtime_ns), prepared once under {self.store}"
        )

    def fix(self, host: str, lane: str = "LANE") -> str:
        return (
            f"load the lane's image {self.image} on {host} (`{self.engine} pull` it there or load its "
            f"archive: `{self.engine} image inspect` must find it), and stage the kit checkout "
            f"(sparkfleet stage {host} --lane {lane}); then launch again"
        )

    @classmethod
    def from_dict(cls, d: dict) -> CacheSeed:
        """A CacheSeed from its JSON form (a spec or probe request sent to the node)."""
        return cls(**{k: str(d[k]) for k in CacheSeed.__dataclass_fields__})


@dataclass(frozen=True)
class SeedNeed:
    """A recipe's [launch.cache_seed]: which kit checkout's lock pins the asset, and where the image
    holds it; paths relative to the checkout of `pin` at `rev`."""

    pin: str
    rev: str
    lock: str
    asset: str
    image_path: str
    roots_from: str

    def on(self, checkout: Path, state_dir: Path, engine: str, image: str) -> CacheSeed:
        """This need on a host whose checkout of the pin is `checkout`."""
        return CacheSeed(
            self.pin, self.rev, str(checkout / self.lock), self.asset, self.image_path,
            str(checkout / self.roots_from), str(state_dir / STORE_DIR), engine, image,
        )  # fmt: skip


def refuse(seed: CacheSeed, why: str) -> SparkfleetError:
    """Launch's refusal: the asset named, and what brings it."""
    return SparkfleetError(
        f"kernel cache {seed.asset} of {seed.pin}: {why}",
        hint=seed.fix("this host"),
        exit_code=ExitCode.REFUSED,
    )


@dataclass(frozen=True)
class LockPins:
    """What the kit's recipe-lock.json pins for the asset."""

    asset_bytes: int
    asset_sha256: str
    manifest_sha256: str
    image: str


def read_lock(seed: CacheSeed) -> LockPins:
    """runtime.files[asset] {bytes, sha256}, runtime.cache_manifest_sha256 and runtime.image, read
    from the pinned checkout's lock (registry.py validate()'s rules), refusing naming the key.

    pins/lock.py parse_lock() reads the same file for `pins import-lock` on the operator's machine,
    but it stands on the inventory (TOML), which the node's agent must not import; this reads
    only the runtime block, on the node, from the checkout launch verified."""
    try:
        doc = json.loads(Path(seed.lock).read_bytes())
    except (OSError, ValueError) as exc:
        raise refuse(seed, f"cannot read {seed.lock}: {exc}") from None
    runtime = doc.get("runtime") if isinstance(doc, dict) else None
    if isinstance(doc, dict) and doc.get("format") != LOCK_FORMAT:
        raise refuse(seed, f"{seed.lock}: format {doc.get('format')!r:.60} is not {LOCK_FORMAT}")
    if isinstance(runtime, dict) and runtime.get("transport") != "ghcr":
        # registry.py: only the ghcr transport packages the assets inside the pinned image
        transport = runtime.get("transport")
        raise refuse(seed, f"{seed.lock}: runtime.transport {transport!r:.40} puts no asset in the image")
    row = ((runtime or {}).get("files") or {}).get(seed.asset) if isinstance(runtime, dict) else None
    if not isinstance(row, dict):
        raise refuse(seed, f"{seed.lock} has no runtime.files[{seed.asset!r}]")
    size, digest, msha = row.get("bytes"), row.get("sha256", ""), runtime.get("cache_manifest_sha256", "")
    if type(size) is not int or not 0 < size <= 2**31 or not SHA256.fullmatch(str(digest)):
        raise refuse(seed, f"{seed.lock}: runtime.files[{seed.asset!r}] needs bytes (1..2^31) and a sha256")
    if not SHA256.fullmatch(str(msha)):
        raise refuse(seed, f"{seed.lock}: runtime.cache_manifest_sha256 is not a sha256")
    return LockPins(size, digest, msha, str(runtime.get("image", "")))


def image_digest(ref: str) -> str:
    """The sha256 a reference names (repo@sha256:X, sha256:X, or X), '' when it names none."""
    m = re.search(r"(?:^|[@:])([0-9a-f]{64})$", ref)
    return m.group(1) if m else ""


def cache_roots(seed: CacheSeed) -> frozenset[str]:
    """CACHE_ROOTS as the kit's own file defines it, read with ast, never run: its top-level
    assignments in order (`=`, an annotated `=`, `|=`), each a set of string literals, written as a
    set, list or tuple display, `set(...)`/`frozenset(...)` of one, a `|` of those, or CACHE_ROOTS
    itself. Anything else is refused naming the line: a value that would take running the file to
    know is not read. Each root must be one plain directory name (seed() makes each under /cache)."""
    where = seed.roots_from
    try:
        tree = ast.parse(Path(where).read_bytes())
    except (OSError, SyntaxError, ValueError, RecursionError) as exc:
        raise refuse(seed, f"cannot read CACHE_ROOTS from {where}: {exc}") from None
    roots: frozenset[str] | None = None
    for node in tree.body:
        try:
            assigns, value = _roots_assignment(node, roots)
        except RecursionError:  # a `|` chain thousands long: no kit writes one
            assigns, value = True, None
        if not assigns:
            continue
        if value is None:
            why = "CACHE_ROOTS is not a set of names that can be read without running the file"
            raise refuse(seed, f"{where}:{node.lineno}: {why}")
        roots = value
    if not roots:
        raise refuse(seed, f"{where} defines no CACHE_ROOTS (a non-empty set of names)")
    bad = sorted(r for r in roots if not plain_relative(r) or "/" in r)
    if bad:
        raise refuse(seed, f"{where}: CACHE_ROOTS holds {bad[0]!r:.80}, which is not one directory name")
    return roots


def _roots_assignment(node: ast.stmt, prior: frozenset[str] | None) -> tuple[bool, frozenset[str] | None]:
    """(does this top-level statement assign CACHE_ROOTS, the value it gives it: None where that
    value is not read here)."""
    if isinstance(node, ast.Assign) and any(_is_roots(t) for t in node.targets):
        return True, _roots_value(node.value, prior)
    if isinstance(node, ast.AnnAssign) and _is_roots(node.target):
        return True, _roots_value(node.value, prior)
    if isinstance(node, ast.AugAssign) and _is_roots(node.target):
        more = _roots_value(node.value, prior)
        ok = isinstance(node.op, ast.BitOr) and prior is not None and more is not None
        return True, prior | more if ok else None
    return False, None


def _is_roots(target: ast.expr) -> bool:
    return isinstance(target, ast.Name) and target.id == "CACHE_ROOTS"


SET_CALLS = ("set", "frozenset")


def _roots_value(node: ast.expr | None, prior: frozenset[str] | None) -> frozenset[str] | None:
    if isinstance(node, (ast.Set, ast.List, ast.Tuple)):
        names = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return frozenset(names) if len(names) == len(node.elts) else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in SET_CALLS:
        if node.keywords or len(node.args) > 1:
            return None
        return _roots_value(node.args[0], prior) if node.args else frozenset()
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _roots_value(node.left, prior), _roots_value(node.right, prior)
        return left | right if left is not None and right is not None else None
    if isinstance(node, ast.Name) and node.id == "CACHE_ROOTS":
        return prior
    return None


def check_manifest(raw: bytes, pins: LockPins, roots: frozenset[str], where: str) -> dict[str, dict]:
    """The manifest's files, after portable_node.py cache_inputs()'s checks: its sha256 is the lock's,
    its format, each name under a cache root (no lock files), bytes and sha256 bounded, total ≤ 8 GiB."""
    if hashlib.sha256(raw).hexdigest() != pins.manifest_sha256:
        want = pins.manifest_sha256
        raise SparkfleetError(f"{where}: sha256 is not the lock's cache_manifest_sha256 {want[:12]}…")
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise SparkfleetError(f"{where}: not JSON ({exc})") from None
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict) or doc.get("format") != MANIFEST_FORMAT or not 0 < len(files) <= MAX_FILES:
        raise SparkfleetError(f"{where}: not a {MANIFEST_FORMAT} inventory of 1..{MAX_FILES} files")
    total = 0
    for name, row in files.items():
        p = PurePosixPath(name) if isinstance(name, str) else None
        bad = (
            not plain_relative(name) or p is None or p.parts[0] not in roots or name.endswith(".lock")
            or p.name == ".ninja_lock" or not isinstance(row, dict) or type(row.get("bytes")) is not int
            or not 0 <= row["bytes"] <= MAX_FILE_BYTES or not SHA256.fullmatch(str(row.get("sha256", "")))
            or ("mtime_ns" in row and (type(row["mtime_ns"]) is not int or not 0 <= row["mtime_ns"] < 2**63))
        )  # fmt: skip
        if bad:
            raise SparkfleetError(f"{where}: unsafe or unsupported entry {name!r}")
        total += row["bytes"]
    if total > MAX_TOTAL_BYTES:
        raise SparkfleetError(f"{where}: {total} bytes, over the kit's 8 GiB staging bound")
    return files


@dataclass(frozen=True)
class Seeded:
    """What one seeding did to the lane's cache dir."""

    source: str  # the verified tree
    files: int
    bytes: int
    copied: int  # missing or differing, copied in
    kept: int  # already the seed's (size and mtime_ns)
    asset_sha256: str = ""  # the kit's asset the tree was unpacked from (its lock's sha256)


def same(path: Path, row: dict) -> bool:
    """Is the file at `path` the manifest's, as a compiler sees it (size and mtime_ns)?"""
    try:
        st = path.lstat()
    except OSError:
        return False
    return (
        path.is_file() and not path.is_symlink() and st.st_size == row["bytes"]
        and ("mtime_ns" not in row or st.st_mtime_ns == row["mtime_ns"])
    )  # fmt: skip


def plain_dirs(base: Path, rel: PurePosixPath) -> bool:
    """Make base/rel a chain of plain directories (mkdir where missing); False where a link or a
    file stands on it: the seed never writes through a link the engine may have left in /cache."""
    d = base
    for part in rel.parts:
        d = d / part
        if d.is_symlink() or (d.exists() and not d.is_dir()):
            return False
        if not d.exists():
            os.mkdir(d, 0o755)
    return True


def seed(tree: Path, files: dict[str, dict], roots: frozenset[str], cache_dir: Path) -> Seeded:
    """Copy into `cache_dir` each manifest file that is missing or differs (copy2, exact mtime_ns),
    each checked by sha256 before it takes its name; delete nothing. As create() does, the cache
    roots and tmp/ hf/ exist afterwards."""
    base = cache_dir.resolve()
    dirs = [base / part for part in sorted(roots | set(EXTRA_DIRS))]
    blocked = [d for d in dirs if d.is_symlink() or (d.exists() and not d.is_dir())]
    if blocked:  # checked before anything is made or copied: a refusal changes nothing
        raise SparkfleetError(
            f"cannot seed {cache_dir}: {blocked[0]} is a link or a file, where the kit's cache makes a "
            f"directory (TMPDIR, HF_HOME and the compilers' caches point there)"
            + (f"; so are {', '.join(d.name for d in blocked[1:])}" if blocked[1:] else ""),
            hint=f"inspect {blocked[0]} and remove it (the seed never writes through, nor deletes, "
            "what the engine wrote); then launch again",
        )
    for d in dirs:
        ensure_dir(d)
    kept = 0
    changed: set[Path] = set()  # the directories that got a file: fsynced once each, at the end
    for name, row in sorted(files.items()):
        target = base / name
        if same(target, row):
            kept += 1
            continue
        if not plain_dirs(base, PurePosixPath(name).parent) or target.is_dir():
            raise SparkfleetError(
                f"cannot seed {target}: a link, a file or a directory stands on its path in {cache_dir}",
                hint=f"inspect {target} (the seed never deletes what the engine wrote)",
            )
        tmp = temp_name(target)
        try:
            shutil.copy2(tree / name, tmp)  # the tree's bytes, mode and mtime_ns
            if "mtime_ns" in row:
                os.utime(tmp, ns=(row["mtime_ns"], row["mtime_ns"]))
            if full_digest(tmp, "sha256") != row["sha256"]:
                raise SparkfleetError(f"seeding {target}: the copy's sha256 is not the manifest's")
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        changed.add(target.parent)
    for d in changed:  # a reseed with nothing to copy (every serve but the first) syncs nothing
        fsync_dir(d)
    copied = len(files) - kept
    return Seeded(str(tree), len(files), sum(r["bytes"] for r in files.values()), copied, kept)
