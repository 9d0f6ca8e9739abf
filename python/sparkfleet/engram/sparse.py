"""The sparse-shards layout: a rank's engram rows in sparse copies of the checkpoint's own shards.

Why: the Aiden lane's engine (aidendle94/sparkrun-recipes, recipes/deepseek-v4.1-flash/sglang)
does not read DSV41EN1 packs. Its tools/engram_local.py (the only stored version, d903b10c) makes,
for every shard holding a table, a file of the SAME name and size whose safetensors header is
verbatim and whose bytes are the source's only over rows [START, END) of each table
(layers.L.engram.embed.weight and .scale, at the same offsets) — holes elsewhere, so a rank's
quarter costs its 47.21 GiB of disk, not the tables' 189 GiB — then copies
model.safetensors.index.json and writes engram-local.json ({"source", "layers": {"L": [START, END]},
"quant", "created", "note"}). launch-sgl-dsv41.sh binds that directory at /engram-local with
SPARK_ENGRAM_DIR=/engram-local; its preflight wants engram-local.json. The rank that holds the
checkpoint (fleet.env MODEL_HOST_RANK) gets no copy: SPARK_ENGRAM_DIR is the model path and
SPARK_ENGRAM_ROWS its ranges (engram/config.py wires both).

Crash safety, as in pack.py: the directory's lock; engram-local.json (what the engine and the kit's
preflight take as "the rows are there") is removed before any shard is rewritten and written last;
each shard goes temp → fsync → os.replace; sparkfleet's own receipt (identity + sampled rows) beside
it lets a rerun keep what verifies.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from ..base import atomic, space
from ..base.errors import SparkfleetError
from ..facts.hubcache import repo_folder
from ..fleet.inventory import Inventory
from ..stage.execute import NoProgress, StageProgress
from .config import SPARSE_ROWS_ENV, rows_spec
from .pack import (
    CHUNK_BYTES,
    INODE_HINT,
    SPACE_HINT,
    SYNC_EVERY,
    PackPlan,
    PackResult,
    pack_lock,
    source_info,
)
from .ranges import rank_range

MANIFEST = "engram-local.json"  # tools/engram_local.py's manifest: the engine's and the preflight's
RECEIPT = ".sparkfleet-engram-local.json"  # ours: identity and what was verified
INDEX = "model.safetensors.index.json"
NOTE = "sparse copy: only these rows exist; tools/engram_local.py"  # the kit's own words
SAMPLE_ROWS = 64  # random rows compared per range, besides its first and last (the kit: 2000)


@dataclass(frozen=True)
class Span:
    """Bytes [offset, offset + length) of one tensor's rows, copied at the same offset."""

    tensor: str
    offset: int
    length: int
    row_bytes: int
    lo: int


@dataclass(frozen=True)
class ShardCopy:
    """One sparse shard: the source file, its size and header, and the spans of this rank's rows."""

    name: str  # the shard's path in the snapshot (= in the copy)
    source: Path
    size: int
    header_bytes: int  # the 8-byte length and the JSON header: copied verbatim
    spans: tuple[Span, ...]

    @property
    def data_bytes(self) -> int:
        return self.header_bytes + sum(s.length for s in self.spans)


@dataclass(frozen=True)
class SparsePlan:
    """What one host gets in the sparse-shards layout; decided before the directory is touched."""

    base: PackPlan
    layers: dict[str, list[int]]  # "L" -> [START, END): engram-local.json's "layers"
    copies: tuple[ShardCopy, ...]  # empty on the shards rank
    reads_shards: bool

    @property
    def total_bytes(self) -> int:
        return sum(c.data_bytes for c in self.copies)

    def identity(self) -> dict[str, Any]:
        return {
            "layout": "sparse-shards",
            "source": {"repo": self.base.source.repo, "commit": self.base.source.commit},
            "world_size": self.base.placement.world,
            "rank": self.base.placement.rank,
            "layers": self.layers,
            "shards": {c.name: c.size for c in self.copies},
        }

    def summary(self) -> dict[str, Any]:
        place = self.base.placement
        base = self.base.summary()
        # the tables' rows of this rank, named by layer: no DSV41EN1 file is written in this layout
        files = [
            {**f, "name": f"layer {f['layer']}", "size": (f["hi"] - f["lo"]) * f["row_bytes"]}
            for f in base["files"]
        ]
        out = {
            **base,
            "files": files,
            "layout": "sparse-shards",
            "total_bytes": self.total_bytes,
            "layers": self.layers,
            "reads_shards": self.reads_shards,
            "copies": [
                {
                    "name": c.name,
                    "size": c.size,
                    "data_bytes": c.data_bytes,
                    "tensors": [s.tensor for s in c.spans],
                }
                for c in self.copies
            ],
        }
        if self.reads_shards:
            out[SPARSE_ROWS_ENV] = rows_spec(self.base.spec, place.rank, place.world)
        return out


def sparse_plan(base: PackPlan) -> SparsePlan:
    """The rank's ranges of every table and the shard copies holding them (headers read, nothing written)."""
    place, spec = base.placement, base.spec
    layers: dict[str, list[int]] = {}
    spans: dict[str, list[Span]] = {}
    sources: dict[str, Path] = {}
    for table in base.source.tables:
        lo, hi = rank_range(table.rows, place.rank, place.world)
        layers[str(table.layer)] = [lo, hi]
        for part in table.parts:
            t = part.tensor
            pure = PurePosixPath(part.shard)
            if pure.is_absolute() or ".." in pure.parts:
                raise SparkfleetError(f"shard path {part.shard!r} of {t.name} leaves the snapshot")
            sources[part.shard] = t.path
            spans.setdefault(part.shard, []).append(
                Span(t.name, t.row_offset(lo), (hi - lo) * t.row_bytes, t.row_bytes, lo)
            )
    reads_shards = spec.shards_rank == place.rank
    copies = []
    if not reads_shards:
        from ..facts.safetensors_header import read_header

        for shard in sorted(spans):
            header = read_header(sources[shard], shard)
            copies.append(
                ShardCopy(
                    shard, sources[shard], header.file_size, 8 + header.header_bytes, tuple(spans[shard])
                )
            )
    return SparsePlan(base, layers, tuple(copies), reads_shards)


def _copy_range(src: int, dst: int, offset: int, length: int, progress: StageProgress, chunk: int) -> None:
    end, synced = offset + length, offset
    while offset < end:
        n = min(chunk, end - offset)
        data = os.pread(src, n, offset)
        if len(data) != n:
            raise SparkfleetError(
                f"short read at {offset}: {len(data)} of {n} bytes (the source shard shrank?)"
            )
        os.pwrite(dst, data, offset)
        os.posix_fadvise(src, offset, n, os.POSIX_FADV_DONTNEED)
        offset += n
        progress.advance(n)
        if offset - synced >= SYNC_EVERY:  # unified memory: no 47 GiB of page cache
            os.fdatasync(dst)
            os.posix_fadvise(dst, 0, 0, os.POSIX_FADV_DONTNEED)
            synced = offset


def write_copy(copy: ShardCopy, out: Path, progress: StageProgress, chunk: int = CHUNK_BYTES) -> None:
    """One sparse shard: temp of the source's size, header verbatim, this rank's rows, fsync, replace."""
    final = out / copy.name
    final.parent.mkdir(parents=True, exist_ok=True)
    src = os.open(copy.source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        with atomic.temp_file(final) as (fd, tmp):
            os.ftruncate(fd, copy.size)  # a hole wherever no row of this rank lies
            os.pwrite(fd, os.pread(src, copy.header_bytes, 0), 0)
            for span in copy.spans:
                _copy_range(src, fd, span.offset, span.length, progress, chunk)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        atomic.publish(tmp, final)
    finally:
        os.close(src)


def copy_problem(copy: ShardCopy, out: Path, seed: int = 0) -> str | None:
    """Why the copy at out/name is not this rank's rows (None if it is): size, header, sampled rows."""
    path = out / copy.name
    try:
        if path.stat().st_size != copy.size:
            return f"{copy.name}: size {path.stat().st_size} != the source's {copy.size}"
    except FileNotFoundError:
        return f"{copy.name}: missing"
    rng = random.Random(seed)
    src, dst = os.open(copy.source, os.O_RDONLY), os.open(path, os.O_RDONLY)
    try:
        if os.pread(src, copy.header_bytes, 0) != os.pread(dst, copy.header_bytes, 0):
            return f"{copy.name}: safetensors header differs from the source's"
        for span in copy.spans:
            n = span.length // span.row_bytes
            if n == 0:
                continue
            for r in [0, n - 1] + [rng.randrange(n) for _ in range(SAMPLE_ROWS)]:
                at = span.offset + r * span.row_bytes
                if os.pread(src, span.row_bytes, at) != os.pread(dst, span.row_bytes, at):
                    return f"{copy.name}: {span.tensor} row {span.lo + r} differs from the source"
    finally:
        os.close(src)
        os.close(dst)
    return None


def pack_sparse(
    inv: Inventory,
    base: PackPlan,
    *,
    force: bool = False,
    reserve_bytes: int | None = None,
    progress: StageProgress | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> PackResult:
    """Write (or keep) `base`'s host's sparse copies; the shards rank writes nothing."""
    started = time.monotonic()
    progress = progress or NoProgress()
    the_plan = sparse_plan(base)
    place, out = base.placement, base.placement.out_dir
    result = PackResult(
        place.lane, place.host, place.rank, place.world, out, source_info(base.source), forced=force
    )
    if the_plan.reads_shards:
        result.action = "reads-shards"  # launch gives it SPARK_ENGRAM_DIR = the model path + its ranges
        result.files = {SPARSE_ROWS_ENV: {"value": rows_spec(base.spec, place.rank, place.world)}}
        return result
    reserve = inv.host(place.host).reserve_bytes if reserve_bytes is None else reserve_bytes
    identity = the_plan.identity()
    with pack_lock(out):
        result.temps_swept = len(atomic.sweep_temps(out))
        old = read_json(out / RECEIPT)
        same = old is not None and old.get("identity") == identity and (out / MANIFEST).is_file()
        problems = {c.name: copy_problem(c, out) for c in the_plan.copies} if same and not force else {}
        todo = [c for c in the_plan.copies if force or not same or problems.get(c.name)]
        result.kept = sorted(c.name for c in the_plan.copies if c not in todo)
        result.repaired_reasons = {n: p for n, p in problems.items() if p}
        result.reserve_bytes = reserve
        if not todo:
            result.files = old.get("files", {}) if old else {}
            result.seconds = time.monotonic() - started
            return result
        result.bytes_needed = sum(c.data_bytes for c in todo)
        # sparse copies: only their data takes blocks (sizes would count the holes); inodes: every
        # copy (its temp becomes it), the manifest, the receipt and the temp that replaces one
        result.bytes_free = space.check(
            out,
            result.bytes_needed,
            reserve,
            inodes=len(todo) + 3,
            what=", ".join(c.name for c in todo),
            space_hint=SPACE_HINT,
            inode_hint=INODE_HINT,
        )
        # From here until the manifest is back, the directory must not look complete to the engine.
        (out / MANIFEST).unlink(missing_ok=True)
        (out / RECEIPT).unlink(missing_ok=True)
        atomic.fsync_dir(out)
        progress.phase(f"sparse copy r{place.rank}of{place.world}", result.bytes_needed, len(todo))
        for c in todo:
            write_copy(c, out, progress, chunk_bytes)
            problem = copy_problem(c, out, seed=1)
            if problem:
                raise SparkfleetError(f"{out}: the copy just written does not verify: {problem}")
            result.written.append(c.name)
            result.written_bytes += c.data_bytes
            progress.item_done(c.name)
        _finish(the_plan, result)
        result.action = "repaired" if same and not force else "packed"
    result.seconds = time.monotonic() - started
    return result


def read_json(path: Path) -> dict | None:
    try:
        doc = json.loads(path.read_bytes())
    except (FileNotFoundError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _finish(the_plan: SparsePlan, result: PackResult) -> None:
    """The index, our receipt, then engram-local.json last: the engine's sign that the rows are there."""
    base = the_plan.base
    out = base.placement.out_dir
    src = base.source
    snapshot = src.hub / repo_folder(src.repo) / "snapshots" / src.commit
    index = snapshot / INDEX
    if index.is_file():
        atomic.write_bytes(out / INDEX, index.read_bytes())
    quant = "fp8"  # engram_local.py: config's text_config.engram_quant, "fp8" when it names none
    config = snapshot / "config.json"
    if config.is_file():
        doc = json.loads(config.read_bytes())
        text = doc.get("text_config", doc) if isinstance(doc, dict) else {}
        quant = str(text.get("engram_quant", "fp8") or "fp8") if isinstance(text, dict) else quant
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    result.files = {
        c.name: {"size": c.size, "data_bytes": c.data_bytes, "spans": [[s.offset, s.length] for s in c.spans]}
        for c in the_plan.copies
    }
    receipt = {"identity": the_plan.identity(), "files": result.files, "written_at": now}
    atomic.write_bytes(out / RECEIPT, (json.dumps(receipt, indent=1) + "\n").encode())
    manifest = {
        "source": str(snapshot),
        "layers": the_plan.layers,
        "quant": quant,
        "created": now,
        "note": NOTE,
    }
    atomic.write_bytes(out / MANIFEST, json.dumps(manifest, indent=1).encode())
    atomic.fsync_dir(out)
