"""Packing one host's engram rows: plan, refuse or skip, preflight, copy by byte ranges, receipt.

Order is the crash-safety argument (as in stage/execute):
  1. plan from the recipe and the source headers only — a bad recipe or a missing tensor fails here,
     before the output directory is touched;
  2. under the directory's lock: sweep our temps, then judge what stands there against the receipt
     (equal identity: keep what verifies; other identity or unidentified packs: refuse unless --force);
  3. preflight: bytes still to write vs free space minus the host's reserve — refuse before byte one;
  4. a journal naming the identity, then each pack: temp → rows copied by pread at computed offsets
     (never a whole table in memory) → fsync → os.replace, the journal updated after each;
  5. the receipt, atomically, last; then the journal goes.
A `kill -9` anywhere leaves every final name absent or complete; the rerun keeps what the journal
vouches for and verifies, repacks the rest, and converges.
"""

from __future__ import annotations

import errno
import hashlib
import os
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from .. import __version__
from ..base import atomic, space
from ..base.digests import sample_digest
from ..base.errors import SourceError, SpaceError, SparkfleetError
from ..base.lock import exclusive
from ..fleet.inventory import Inventory
from ..stage.execute import NoProgress, StageProgress
from . import receipt
from .config import EngramSpec, Placement, engram_spec, placement
from .ranges import PackHeader, is_pack_name, pack_name, rank_range
from .receipt import JOURNAL_NAME, PACK_FORMAT, PACKER_FORMAT_VERSION, RECEIPT_NAME, FileRecord
from .source import EngramSource, SourceTable, locate

CHUNK_BYTES = 16 * 1024 * 1024  # packed bytes per read/write round
SYNC_EVERY = (
    1024 * 1024 * 1024
)  # flush and drop written pages this often (unified memory: no 47 GiB of cache)
LOCK_PATH = Path(".locks", "engram-pack.lock")
PACK_GLOB = "engram-l*-r*of*.bin"


class EngramMismatch(SparkfleetError):
    """The output directory holds packs of another identity (or unidentified ones)."""


@dataclass(frozen=True)
class PackFile:
    """One file to produce: a table's rows [lo, hi) under its DSV41EN1 header."""

    table: SourceTable
    header: PackHeader
    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def size(self) -> int:
        return self.header.file_size


@dataclass(frozen=True)
class PackPlan:
    """Everything decided before the output directory is touched."""

    spec: EngramSpec
    placement: Placement
    source: EngramSource
    files: tuple[PackFile, ...]
    identity: dict[str, Any]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def world_ranges(self) -> list[dict[str, Any]]:
        """Every rank's rows of every table and its packed rows' bytes (ranks.py's quarters at TP4):
        what each host of the lane gets, shown before any write."""
        lane_hosts = self.placement.hosts
        out = []
        for rank in range(self.placement.world):
            ranges = []
            for f in self.files:
                lo, hi = rank_range(f.header.total_rows, rank, self.placement.world)
                ranges.append(
                    {"layer": f.header.layer, "lo": lo, "hi": hi, "bytes": (hi - lo) * f.header.row_bytes}
                )
            host = lane_hosts[rank] if rank < len(lane_hosts) else None
            out.append(
                {"rank": rank, "host": host, "tables": ranges, "bytes": sum(r["bytes"] for r in ranges)}
            )
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "ranks": self.world_ranges(),
            "lane": self.placement.lane,
            "host": self.placement.host,
            "rank": self.placement.rank,
            "world": self.placement.world,
            "out_dir": str(self.placement.out_dir),
            "source": source_info(self.source),
            "total_bytes": self.total_bytes,
            "files": [
                {
                    "name": f.name,
                    "layer": f.header.layer,
                    "lo": f.header.lo,
                    "hi": f.header.hi,
                    "total_rows": f.header.total_rows,
                    "row_bytes": f.header.row_bytes,
                    "size": f.size,
                    "tensors": [p.tensor.name for p in f.table.parts],
                }
                for f in self.files
            ],
        }


@dataclass
class PackResult:
    """What one `engram pack` did."""

    lane: str
    host: str
    rank: int
    world: int
    out_dir: Path
    source: dict[str, Any]
    action: str = "skipped"  # skipped | packed | repaired
    written: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    repaired_reasons: dict[str, str] = field(default_factory=dict)
    written_bytes: int = 0
    bytes_needed: int = 0
    bytes_free: int = 0
    reserve_bytes: int = 0
    temps_swept: int = 0
    forced: bool = False
    seconds: float = 0.0
    files: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def mb_per_s(self) -> float:
        return self.written_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(self).items()}
        out["seconds"] = round(self.seconds, 3)
        out["mb_per_s"] = round(self.mb_per_s, 1)
        return out


def source_info(src: EngramSource) -> dict[str, Any]:
    return {
        "repo": src.repo,
        "revision": src.revision,
        "commit": src.commit,
        "origin": src.origin,
        "hub": str(src.hub),
        "fallback_reason": src.fallback_reason,
    }


def plan(inv: Inventory, lane_name: str, host_name: str) -> PackPlan:
    """Read the recipe and the source headers; decide every file's rows and name. Writes nothing."""
    spec = engram_spec(inv, lane_name)
    if spec is None:
        raise SparkfleetError(
            f"lane {lane_name!r} has no [engram] table in {inv.lane(lane_name).recipe_path}",
            hint="add [engram] with pin and tables (or pattern) to pack engram rows per rank",
        )
    place = placement(inv, spec, host_name)
    src = locate(spec, inv.host(host_name))
    files = []
    for table in src.tables:
        lo, hi = rank_range(table.rows, place.rank, place.world)
        header = PackHeader(table.layer, lo, hi, table.rows, table.row_bytes)
        files.append(PackFile(table, header, place.out_dir / pack_name(table.layer, place.rank, place.world)))
    identity = {
        "format": PACK_FORMAT,
        "packer_format": PACKER_FORMAT_VERSION,
        "source": {"repo": src.repo, "commit": src.commit},
        "world_size": place.world,
        "rank": place.rank,
        "tables": [
            {
                "layer": f.header.layer,
                "file": f.name,
                "total_rows": f.header.total_rows,
                "lo": f.header.lo,
                "hi": f.header.hi,
                "row_bytes": f.header.row_bytes,
                "parts": [
                    {
                        "tensor": p.tensor.name,
                        "shard": p.shard,
                        "blob": p.blob,
                        "dtype": p.tensor.dtype,
                        "shape": list(p.tensor.shape),
                    }
                    for p in f.table.parts
                ],
            }
            for f in files
        ],
    }
    return PackPlan(spec, place, src, tuple(files), identity)


# What an operator can do when a pack does not fit (every engram writer's preflight says the same).
SPACE_HINT = "free space there, lower the host's reserve_gib, or point [engram].out_dir at a bigger disk"
INODE_HINT = "free inodes there, or point [engram].out_dir at a filesystem with more"


def preflight(out: Path, todo: list[PackFile], reserve: int) -> int:
    """Refuse before the first byte when the packs do not fit beside the host's reserve (space.check:
    blocks, inodes and reserve, as staging counts them). Inodes at the peak: every pack (its temp
    becomes it), the journal and the temp that replaces it (or the receipt's)."""
    return space.check(
        out,
        sum(f.size for f in todo),
        reserve,
        sizes=[f.size for f in todo],
        inodes=len(todo) + 2,
        what=", ".join(f.name for f in todo),
        space_hint=SPACE_HINT,
        inode_hint=INODE_HINT,
    )


def pack_lock(out_dir: Path) -> AbstractContextManager[Path]:
    """One pack per output directory at a time (flock; the kernel drops it when the holder dies)."""
    return exclusive(out_dir / LOCK_PATH, "engram pack", "wait for it to finish")


def file_problem(path: Path, header: PackHeader, record: FileRecord | None, full: bool) -> str | None:
    """Why the pack at `path` is not the one wanted (None if it is): size, header, then content."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "missing"
    if size != header.file_size:
        return f"size {size} != expected {header.file_size}"
    with open(path, "rb") as fh:
        got = PackHeader.decode(fh.read(64))
    if got != header:
        return f"header {got} != expected {header}"
    if record is None:
        return "not in the receipt"
    if record.size != size:
        return f"size {size} != receipt {record.size}"
    if full:
        digest = _sha256(path)
        return None if digest == record.sha256 else f"sha256 {digest[:16]}… != receipt {record.sha256[:16]}…"
    sample = sample_digest(path)[1]
    return None if sample == record.sample else "sampled content differs from the receipt"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        buf = bytearray(8 * 1024 * 1024)
        view = memoryview(buf)
        while n := fh.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def pack(
    inv: Inventory,
    lane_name: str,
    host_name: str,
    *,
    force: bool = False,
    full: bool = False,
    reserve_bytes: int | None = None,
    progress: StageProgress | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> PackResult:
    """Pack `host_name`'s rows of the lane's engram tables (run on the host). See the module docstring."""
    started = time.monotonic()
    progress = progress or NoProgress()
    the_plan = plan(inv, lane_name, host_name)
    place, out = the_plan.placement, the_plan.placement.out_dir
    reserve = inv.host(host_name).reserve_bytes if reserve_bytes is None else reserve_bytes
    result = PackResult(
        place.lane, place.host, place.rank, place.world, out, source_info(the_plan.source), forced=force
    )
    with pack_lock(out):
        result.temps_swept = len(atomic.sweep_temps(out))
        old = _read(out / RECEIPT_NAME, force)
        journal = _read(out / JOURNAL_NAME, force)
        keep, stale = _judge(the_plan, old, journal, force, full, result)
        todo = [f for f in the_plan.files if f.name not in keep]
        result.kept = sorted(keep)
        result.reserve_bytes = reserve
        matched = old is not None and old.identity == the_plan.identity
        if not todo:
            result.files = {n: r.to_dict() for n, r in keep.items()}
            if not matched or set(old.files) != set(keep):
                result.action = "completed"  # a killed run's packs, all vouched for by its journal
                _finish(the_plan, keep, result, stale)
            elif journal is not None:
                (out / JOURNAL_NAME).unlink()  # killed between the receipt and the journal's removal
            result.seconds = time.monotonic() - started
            return result
        result.bytes_needed = sum(f.size for f in todo)
        result.bytes_free = preflight(out, todo, reserve)
        records = dict(keep)
        # The journal carries the stale names: once the old receipt is gone it is their only record.
        journal_info = {"journal_of": RECEIPT_NAME, "stale": sorted(p.name for p in stale)}
        receipt.write(out / JOURNAL_NAME, the_plan.identity, records, journal_info)
        if old is not None and old.identity != the_plan.identity:
            (out / RECEIPT_NAME).unlink()  # --force: the old receipt no longer describes the directory
            atomic.fsync_dir(out)
        progress.phase(f"pack r{place.rank}of{place.world}", result.bytes_needed, len(todo))
        for f in todo:
            records[f.name] = write_pack(f, progress, chunk_bytes)
            result.written.append(f.name)
            result.written_bytes += f.size
            receipt.write(out / JOURNAL_NAME, the_plan.identity, records, journal_info)
            progress.item_done(f.name)
        result.action = "repaired" if matched and not force else "packed"
        result.files = {n: r.to_dict() for n, r in records.items()}
        _finish(the_plan, records, result, stale)
    result.seconds = time.monotonic() - started
    return result


def _read(path: Path, force: bool) -> receipt.Receipt | None:
    """A receipt or journal; with --force an unreadable one counts as foreign (replaced), not fatal."""
    try:
        return receipt.read(path)
    except SparkfleetError:
        if not force:
            raise
        return receipt.Receipt(path, {"unreadable": True}, {}, {})


def _judge(
    the_plan: PackPlan,
    old: receipt.Receipt | None,
    journal: receipt.Receipt | None,
    force: bool,
    full: bool,
    result: PackResult,
) -> tuple[dict[str, FileRecord], list[Path]]:
    """(files to keep as they are, stale files of an old identity to remove after --force)."""
    out = the_plan.placement.out_dir
    planned = {f.name for f in the_plan.files}
    vouched = old if old is not None else journal
    if vouched is not None and vouched.identity != the_plan.identity:
        if not force:
            diffs = receipt.differences(the_plan.identity, vouched.identity)
            raise EngramMismatch(
                f"{vouched.path} describes other packs than lane {the_plan.placement.lane} wants on "
                f"{the_plan.placement.host}: " + "; ".join(diffs[:4]) + (" …" if len(diffs) > 4 else ""),
                hint="nothing was changed; --force repacks this directory (its old packs are replaced)",
            )
        stale = [out / n for n in vouched.files if n not in planned]
        return {}, stale
    if vouched is None:
        strangers = sorted(p.name for p in out.glob(PACK_GLOB)) if out.is_dir() else []
        if strangers and not force:
            raise EngramMismatch(
                f"{out} holds engram packs without a sparkfleet receipt: {', '.join(strangers[:4])}",
                hint="nothing was changed; they may be another packer's — move them aside, or pass --force",
            )
        return {}, []
    # A journal of this identity may name an interrupted --force's leftovers of the old identity.
    stale = [out / n for n in (journal.info.get("stale") or []) if n not in planned] if journal else []
    if force:
        return {}, stale  # --force repacks everything, even packs the receipt vouches for
    keep: dict[str, FileRecord] = {}
    for f in the_plan.files:
        record = vouched.files.get(f.name)
        if record is None:
            continue
        problem = file_problem(f.path, f.header, record, full)
        if problem is None:
            keep[f.name] = record
        elif old is not None:
            result.repaired_reasons[f.name] = problem
    return keep, stale


def _finish(
    the_plan: PackPlan, records: dict[str, FileRecord], result: PackResult, stale: list[Path]
) -> None:
    out = the_plan.placement.out_dir
    info = {
        "packer": "sparkfleet.engram",
        "sparkfleet_version": __version__,
        "lane": the_plan.placement.lane,
        "host": the_plan.placement.host,
        "source": source_info(the_plan.source),
        "packed_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    receipt.write(out / RECEIPT_NAME, the_plan.identity, records, info)
    (out / JOURNAL_NAME).unlink(missing_ok=True)
    for path in stale:
        if path.parent != out or not is_pack_name(path.name):
            continue  # confined to this directory's pack files, whatever a receipt said
        if path.is_file() or path.is_symlink():
            path.unlink()
            result.removed.append(path.name)
    atomic.fsync_dir(out)


@cache
def _numpy():
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def interleave(blocks: list[bytes], widths: list[int], n: int, use_numpy: bool = True) -> bytes | memoryview:
    """n rows whose bytes are each block's row side by side: row i = b0[i] + b1[i] + …

    numpy when present (one strided copy), else bytearray extended-slice assignment per byte column
    — the same bytes either way, a few times slower without numpy.
    """
    total = sum(widths)
    np = _numpy() if use_numpy else None
    if np is not None:
        arrays = [np.frombuffer(b, dtype=np.uint8).reshape(n, w) for b, w in zip(blocks, widths, strict=True)]
        return memoryview(np.concatenate(arrays, axis=1).reshape(-1))
    out = bytearray(n * total)
    column = 0
    for block, width in zip(blocks, widths, strict=True):
        for j in range(width):
            out[column + j :: total] = block[j::width]
        column += width
    return out


def _pread_exact(fd: int, length: int, offset: int, path: Path, row: int) -> bytes:
    data = os.pread(fd, length, offset)
    while len(data) < length:
        more = os.pread(fd, length - len(data), offset + len(data))
        if not more:
            raise SourceError(
                f"short read from {path} at row {row}: wanted {length} bytes at offset {offset}, "
                f"got {len(data)}",
                hint="the shard shrank or is truncated; re-stage it",
            )
        data += more
    return data


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view) :]


def write_pack(f: PackFile, progress: StageProgress, chunk_bytes: int = CHUNK_BYTES) -> FileRecord:
    """Write one pack via temp → fsync → os.replace and return its record (sha256 computed on the way)."""
    parts = f.table.parts
    widths = [p.tensor.row_bytes for p in parts]
    chunk_rows = max(1, chunk_bytes // f.header.row_bytes)
    digest = hashlib.sha256()
    fds: dict[Path, int] = {}
    try:
        for p in parts:
            if p.tensor.path not in fds:
                fds[p.tensor.path] = os.open(p.tensor.path, os.O_RDONLY | os.O_CLOEXEC)
        with atomic.temp_file(f.path) as (fd, tmp):
            head = f.header.encode()
            _write_all(fd, head)
            digest.update(head)
            written = synced = 0
            for start in range(f.header.lo, f.header.hi, chunk_rows):
                n = min(chunk_rows, f.header.hi - start)
                blocks = []
                for p, width in zip(parts, widths, strict=True):
                    src = fds[p.tensor.path]
                    offset = p.tensor.row_offset(start)
                    blocks.append(_pread_exact(src, n * width, offset, p.tensor.path, start))
                    os.posix_fadvise(src, offset, n * width, os.POSIX_FADV_DONTNEED)
                data = blocks[0] if len(blocks) == 1 else interleave(blocks, widths, n)
                digest.update(data)
                _write_all(fd, data)
                written += n * f.header.row_bytes
                progress.advance(n * f.header.row_bytes)
                if written - synced >= SYNC_EVERY:
                    os.fdatasync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    synced = written
            os.fsync(fd)
            size = os.fstat(fd).st_size
            if size != f.size:
                raise SparkfleetError(f"{tmp}: wrote {size} bytes, expected {f.size}")
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        atomic.publish(tmp, f.path)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise SpaceError(
                f"{f.path.parent} filled up while packing {f.name} ({exc.strerror}); its temp was removed",
                hint="something else is writing there; free space and rerun (finished packs are kept)",
            ) from None
        raise
    finally:
        for fd_src in fds.values():
            os.close(fd_src)
    return FileRecord(f.name, f.size, digest.hexdigest(), sample_digest(f.path)[1])
