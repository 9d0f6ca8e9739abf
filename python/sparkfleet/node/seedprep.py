"""The verified kernel-cache tree a lane's /cache is seeded from, made once per asset on a host.

Why: the EXL3 kit's kernel cache ships inside its pinned image (release/registry.py prepare() at
878e0ee: /opt/ds41-release/kernel-cache.tar, copied out of a container that is created with no
network, never started, and removed by its ID without --force, "an unexpectedly running container
must never be killed"), checked for size and sha256 against recipe-lock.json, and unpacked with
release/bootstrap.py extract()'s rules (relative members, files and directories only, mode and
mtime kept) into a staging directory renamed into place, then every file's mtime_ns restored from
cache-manifest.json. This module does the same under `<state_dir>/cacheseed/<asset sha256>/`:

- `<asset>`: the copied tar, renamed into place once its size and sha256 are the lock's, removed
  once the tree is made;
- `tree.extracting/` → `tree/`: the files the tar's cache-manifest.json lists unpacked (the
  manifest first checked against the lock; each file only at the size it lists; whatever else the
  tar holds stays packed, so the manifest's bounds bound the disk it takes), each checked (size,
  sha256), its mtime_ns set, fsynced, then renamed. A `tree/` is only ever a whole verified tree.

Unlike the kit, which stops at an interrupted extraction ("inspect it before continuing"), a rerun
converges: under the store's flock a leftover `.copying` file or `tree.extracting/` can only be a
dead run's (kill -9, a power cut), and is removed and redone. Node-side and light (no TOML).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from ..base.atomic import ensure_dir, fsync_dir, fsync_tree
from ..base.atomic import write_bytes as atomic_write
from ..base.digests import full_digest
from ..base.errors import SpaceError, SparkfleetError
from ..base.lock import held
from ..base.relnames import plain_relative
from ..fleet.cacheseed import (
    MANIFEST_NAME,
    CacheSeed,
    LockPins,
    Seeded,
    cache_roots,
    check_manifest,
    image_digest,
    read_lock,
    refuse,
    same,
)
from ..fleet.cacheseed import seed as seed_into

TREE = "tree"
STAGING = "tree.extracting"
CONTAINER_ID = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Prepared:
    """A host's verified tree for one asset, and the manifest's files in it."""

    tree: Path
    files: dict[str, dict]
    roots: frozenset[str]
    made: bool  # made by this call (False: it was there already)
    sha256: str  # the asset's, as the kit's lock pins it: the tree's name in the store

    @property
    def bytes(self) -> int:
        return sum(r["bytes"] for r in self.files.values())


def pins_for(seed: CacheSeed) -> LockPins:
    """The lock's pins, refused when the lock pins another image than the lane runs: the cache was
    built by that image's compilers (portable_node.py checks the image identity the same way)."""
    pins = read_lock(seed)
    if image_digest(pins.image) != image_digest(seed.image):
        raise refuse(seed, f"{seed.lock} pins runtime.image {pins.image}, the lane runs {seed.image}")
    return pins


def store_of(seed: CacheSeed, pins: LockPins) -> Path:
    return Path(seed.store) / pins.asset_sha256


@contextmanager
def store_lock(root: Path) -> Iterator[None]:
    """One preparer per asset on a host (a second waits); the kernel drops it when its holder dies."""
    ensure_dir(root)
    with held(root / ".lock"):
        yield


def tree_files(seed: CacheSeed, pins: LockPins, roots: frozenset[str], tree: Path) -> dict[str, dict]:
    """The manifest of a tree on disk, each file there as the manifest says (size, mtime_ns)."""
    manifest = tree / MANIFEST_NAME
    try:
        raw = manifest.read_bytes()
    except OSError as exc:
        raise SparkfleetError(f"{manifest}: {exc.strerror}") from None
    files = check_manifest(raw, pins, roots, str(manifest))
    off = [n for n, row in files.items() if not same(tree / n, row)]
    if off:
        raise SparkfleetError(f"{tree}: {len(off)} files differ from {MANIFEST_NAME} (first: {off[0]})")
    return files


def prepared(seed: CacheSeed) -> Prepared | None:
    """The tree if this host has it whole (reads only: doctor's question), else None."""
    pins = pins_for(seed)
    roots = cache_roots(seed)
    tree = store_of(seed, pins) / TREE
    if not tree.is_dir():
        return None
    return Prepared(tree, tree_files(seed, pins, roots, tree), roots, False, pins.asset_sha256)


def prepare(seed: CacheSeed) -> Prepared:
    """The verified tree, made if this host lacks it: copied out of the image, checked, unpacked."""
    pins = pins_for(seed)
    roots = cache_roots(seed)
    root = store_of(seed, pins)
    tree = root / TREE
    with store_lock(root):
        if tree.is_dir():
            try:
                return Prepared(tree, tree_files(seed, pins, roots, tree), roots, False, pins.asset_sha256)
            except SparkfleetError:
                shutil.rmtree(tree)  # ours, changed in place: made again below from the pinned asset
        archive = root / seed.asset
        if not (archive.is_file() and asset_ok(archive, pins)):
            archive.unlink(missing_ok=True)
            copy_out(seed, pins, archive)
        staging = root / STAGING
        if staging.exists():  # a dead run's (we hold the lock)
            shutil.rmtree(staging)
        try:
            files = extract(archive, staging, pins, roots)
            tree_files_fresh(staging, files)
        except (SparkfleetError, *TAR_ERRORS) as exc:
            why = exc.message if isinstance(exc, SparkfleetError) else f"not a tar it can unpack ({exc})"
            raise refuse(seed, f"{archive}: {why}") from None
        fsync_tree(staging)
        os.rename(staging, tree)
        fsync_dir(root)
        archive.unlink()
    return Prepared(tree, files, roots, True, pins.asset_sha256)


def asset_ok(path: Path, pins: LockPins) -> bool:
    return path.stat().st_size == pins.asset_bytes and full_digest(path, "sha256") == pins.asset_sha256


def copy_out(seed: CacheSeed, pins: LockPins, dest: Path) -> None:
    """The asset out of the pinned image: a container created (never started, no network), `cp`,
    then removed by its ID without --force. The copy takes `dest` only once size and sha256 are the
    lock's; a tampered or other asset is refused, naming it, and left as `.copying` for inspection
    until the next run."""
    partial = dest.with_name(dest.name + ".copying")
    if partial.is_dir() and not partial.is_symlink():  # a dead run's (we hold the lock)
        shutil.rmtree(partial)
    partial.unlink(missing_ok=True)
    runtime = ["--runtime=runc"] if seed.engine == "docker" else []  # the kit's flag; podman: its own
    label = f"--label=sparkfleet.cache-seed={uuid.uuid4().hex}"
    # --pull=never, as the lane's ranks run (runtimes.py): the pinned image is loaded, never fetched here
    create = [seed.engine, "create", "--pull=never", "--network=none", *runtime, label,
              "--entrypoint=/bin/true", seed.image]  # fmt: skip
    try:
        cp = subprocess.run(create, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except OSError as exc:  # the engine itself is not there
        raise refuse(seed, f"`{seed.engine} create` from {seed.image} failed: {exc.strerror}") from None
    cid = cp.stdout.strip().splitlines()[-1] if cp.stdout.strip() else ""
    if cp.returncode != 0 or not CONTAINER_ID.fullmatch(cid):
        raise refuse(seed, f"`{seed.engine} create` from {seed.image} failed: {cp.stderr.strip()[-300:]}")
    try:
        got = subprocess.run(
            [seed.engine, "cp", f"{cid}:{seed.image_path}", str(partial)],
            capture_output=True, text=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if got.returncode != 0:
            raise refuse(seed, f"the image has no {seed.image_path}: {got.stderr.strip()[-300:]}")
    finally:
        # No --force: an unexpectedly running container must never be killed (registry.py).
        subprocess.run([seed.engine, "rm", cid], capture_output=True, stdin=subprocess.DEVNULL)
    if partial.is_symlink() or not partial.is_file() or not asset_ok(partial, pins):
        size = partial.lstat().st_size if partial.exists() else 0
        raise refuse(
            seed,
            f"{seed.image}:{seed.image_path} is not the asset {seed.lock} pins "
            f"({size} bytes; the lock: {pins.asset_bytes} bytes, sha256 {pins.asset_sha256[:12]}…); "
            f"kept at {partial}",
        )
    with open(partial, "rb") as fh:
        os.fsync(fh.fileno())
    os.rename(partial, dest)
    fsync_dir(dest.parent)


# What Python's tarfile raises on an archive it cannot read, beyond TarError: a pax header's bad
# sparse map (ValueError), a name that is not UTF-8 (UnicodeError, a ValueError), a member cut short
# (EOFError), and the OS's own errors. Each is the archive's fault, refused naming it.
TAR_ERRORS = (tarfile.TarError, OSError, ValueError, OverflowError, EOFError)
MAX_MANIFEST_BYTES = 64 << 20  # MAX_FILES rows of the kit's format fit in well under this


def read_manifest(archive: Path, pins: LockPins, roots: frozenset[str]) -> tuple[bytes, dict[str, dict]]:
    """The tar's cache-manifest.json (its first such member, a file of at most MAX_MANIFEST_BYTES),
    checked against the lock's cache_manifest_sha256 and the kit's bounds (check_manifest): what
    `extract` then unpacks, and nothing else."""
    with tarfile.open(archive, "r|") as stream:
        for item in stream:
            if item.name != MANIFEST_NAME:
                continue
            if not item.isfile() or item.sparse is not None or not 0 < item.size <= MAX_MANIFEST_BYTES:
                raise SparkfleetError(f"{MANIFEST_NAME} is not a file of 1..{MAX_MANIFEST_BYTES} bytes")
            src = stream.extractfile(item)
            assert src is not None  # a regular file member
            raw = src.read(item.size)
            return raw, check_manifest(raw, pins, roots, MANIFEST_NAME)
    raise SparkfleetError(f"no {MANIFEST_NAME} in it")


def tar_mtime(item: tarfile.TarInfo) -> int:
    """A member's mtime in ns; a pax header may say inf, nan or 1e300, which is no time at all."""
    t = item.mtime
    if not (isinstance(t, (int, float)) and math.isfinite(t) and 0 <= t < 2**63 / 1e9):
        raise SparkfleetError(f"{item.name!r}: mtime {t!r:.40} is not a time")
    return int(t * 1_000_000_000)


def extract(archive: Path, staging: Path, pins: LockPins, roots: frozenset[str]) -> dict[str, dict]:
    """bootstrap.py extract()'s rules: every member a plain relative path, a file or a directory
    (no links, no devices), written exclusively, mode & 0o777 and mtime kept; returns the manifest's
    files. Only the files the manifest lists are unpacked, each only at the size it lists (before a
    byte is written): the manifest is pinned by the lock and bounded (≤ MAX_FILE_BYTES a file,
    MAX_TOTAL_BYTES in all), so what lands on disk is too, whatever the tar holds besides (a sparse
    member of a few header blocks expands to any size it claims)."""
    raw, files = read_manifest(archive, pins, roots)
    need = sum(row["bytes"] for row in files.values())
    staging.mkdir()
    free = shutil.disk_usage(staging).free
    if need > free:
        raise SpaceError(
            f"{staging}: the kernel cache needs {need} bytes, {free} are free",
            hint=f"free space under {staging.parent} (or give the host another state_dir)",
        )
    written: set[str] = set()
    with tarfile.open(archive, "r|") as stream:
        for item in stream:
            if not plain_relative(item.name):
                raise SparkfleetError(f"unsafe member {item.name!r}")
            if not (item.isdir() or item.isfile()):
                raise SparkfleetError(f"{item.name!r} is a link or a device, not a file")
            row = files.get(item.name)
            if item.isdir() or row is None:
                continue  # directories come with their files; what the manifest lacks stays packed
            if item.name in written:
                raise SparkfleetError(f"{item.name!r} appears twice")
            if item.size != row["bytes"]:
                listed = row["bytes"]
                raise SparkfleetError(f"{item.name!r} is {item.size} bytes, the manifest lists {listed}")
            mtime_ns = row.get("mtime_ns")
            if mtime_ns is None:
                mtime_ns = tar_mtime(item)
            out = staging / item.name
            out.parent.mkdir(parents=True, exist_ok=True)
            src = stream.extractfile(item)
            assert src is not None  # a regular file member
            with open(out, "xb") as fh:
                shutil.copyfileobj(src, fh, 1 << 20)
            os.chmod(out, item.mode & 0o777)
            os.utime(out, ns=(mtime_ns, mtime_ns))
            written.add(item.name)
    atomic_write(staging / MANIFEST_NAME, raw)
    return files


def tree_files_fresh(staging: Path, files: dict[str, dict]) -> None:
    """Every manifest file of a just-unpacked tree there, checked by size and sha256."""
    for name, row in files.items():
        path = staging / name
        if not path.is_file() or path.is_symlink() or path.stat().st_size != row["bytes"]:
            raise SparkfleetError(f"{name}: missing or not {row['bytes']} bytes")
        if full_digest(path, "sha256") != row["sha256"]:
            raise SparkfleetError(f"{name}: sha256 is not the manifest's")


def seed_facts(seed: CacheSeed, make: bool) -> dict:
    """The probe's answer: the tree prepared (made now when `make`: launch's probe), or why it
    cannot be had, with the fix. Doctor asks without `make`: it reads only."""
    try:
        got = prepare(seed) if make else prepared(seed)
    except SparkfleetError as exc:
        return {"ok": False, "problem": exc.message, "hint": exc.hint}
    if got is None:
        return {"ok": True, "prepared": False, "store": seed.store}
    return {"ok": True, "prepared": True, "made": got.made, "tree": str(got.tree),
            "files": len(got.files), "bytes": got.bytes}  # fmt: skip


def seed_cache(seed: CacheSeed, cache_dir: str) -> Seeded:
    """Before a serve: the tree (made if missing), copied into the lane's cache dir where it differs."""
    got = prepare(seed)
    seeded = seed_into(got.tree, got.files, got.roots, Path(cache_dir))
    return replace(seeded, asset_sha256=got.sha256)
