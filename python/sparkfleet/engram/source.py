"""Finding the engram tables' bytes: which hub, which shard, which offsets.

The tables are read from the LOCAL staged hub when `sparkfleet stage` put the shards there (NVMe
reads, no NAS traffic), else from the NAS hub. The fallback happens only when the local hub lacks
the revision or a shard (not staged, or excluded by the lane's patterns); a local tree that has the
files but not the tensors the recipe names is a recipe error and is reported, never papered over
by reading the NAS. Every snapshot entry is followed through its link chain inside the hub root
(hubcache), so a pack can never be read through a link that leaves the hub.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..base.errors import SourceError
from ..facts.hubcache import HubRoot, repo_folder
from ..facts.safetensors_header import SafetensorsHeader, TensorInfo, read_header
from ..fleet.inventory import Host
from .checkpoint import CheckpointEngram, from_config, reconcile_layers, reconcile_rows
from .config import LAYER_FIELD, EngramSpec, TableRef

INDEX_FILE = "model.safetensors.index.json"
LOCAL = "local"
NAS = "nas"


class NotStaged(SourceError):
    """The local hub lacks the revision or a file the tables live in (so the NAS is read instead)."""


@dataclass(frozen=True)
class SourcePart:
    """One tensor of a table: its bytes in a shard, and which snapshot entry / blob that shard is."""

    tensor: TensorInfo
    shard: str  # path inside the snapshot
    blob: str | None  # the shard's content address (sha256 of an LFS blob) when its name is one


@dataclass(frozen=True)
class SourceTable:
    """One engram table: a layer's rows, each the concatenation of its parts' rows."""

    layer: int
    parts: tuple[SourcePart, ...]
    rows: int
    row_bytes: int


@dataclass(frozen=True)
class EngramSource:
    """Where this pack reads from, and why there."""

    repo: str
    revision: str
    commit: str
    origin: str  # "local" | "nas"
    hub: Path
    fallback_reason: str | None  # why the local hub was not used (origin "nas")
    tables: tuple[SourceTable, ...]
    checkpoint: CheckpointEngram | None = None  # what config.json states (None: it states nothing)


def locate(spec: EngramSpec, host: Host) -> EngramSource:
    """The lane's tables on `host`: from its local hub if staged there, else from its NAS hub."""
    try:
        return _read(spec, host.local_hub, LOCAL, None)
    except NotStaged as exc:
        reason = exc.message
    return _read(spec, host.nas_hub, NAS, reason)


def _read(spec: EngramSpec, hub_path: Path, origin: str, fallback_reason: str | None) -> EngramSource:
    missing = NotStaged if origin == LOCAL else SourceError
    repo, revision = spec.pin.source, spec.pin.value
    try:
        hub = HubRoot(hub_path)
        commit = hub.resolve_revision(repo, revision)
    except SourceError as exc:
        raise missing(f"{repo}@{revision} is not in the {origin} hub: {exc.message}", hint=exc.hint) from None
    snapshot = Snapshot(hub, repo, commit, origin, missing)
    weight_map = snapshot.weight_map()
    ckpt = snapshot.engram_config()
    refs = _table_refs(spec, weight_map, snapshot.index_name, ckpt)
    tables = tuple(_table(spec, ref, weight_map, snapshot, ckpt) for ref in refs)
    return EngramSource(repo, revision, commit, origin, hub_path, fallback_reason, tables, ckpt)


class Snapshot:
    """One revision's files in one hub, read lazily: the index, then only the shards the tables need."""

    def __init__(self, hub: HubRoot, repo: str, commit: str, origin: str, missing: type[SourceError]):
        self.hub, self.repo, self.commit, self.origin, self.missing = hub, repo, commit, origin, missing
        self.rel = f"{repo_folder(repo)}/snapshots/{commit}"
        self.index_name = INDEX_FILE
        self._headers: dict[str, tuple[SafetensorsHeader, str | None]] = {}

    def shown(self, path: str) -> str:
        return f"{self.repo}@{self.commit[:12]}/{path} ({self.origin} hub {self.hub.given})"

    def resolve(self, path: str) -> tuple[Path, str | None]:
        """The regular file behind snapshot entry `path` and its content address."""
        pure = PurePosixPath(path)
        if pure.is_absolute() or ".." in pure.parts:
            raise SourceError(f"{self.shown(self.index_name)}: shard path {path!r} leaves the snapshot")
        try:
            chain = self.hub.chain(f"{self.rel}/{path}")
        except SourceError as exc:
            raise self.missing(f"{self.shown(path)}: {exc.message}", hint=exc.hint) from None
        address = chain.content_address()
        return self.hub.abs(chain.final), address[1] if address and address[0] == "sha256" else None

    def header(self, shard: str) -> tuple[SafetensorsHeader, str | None]:
        if shard not in self._headers:
            path, blob = self.resolve(shard)
            self._headers[shard] = (read_header(path, self.shown(shard)), blob)
        return self._headers[shard]

    def engram_config(self) -> CheckpointEngram | None:
        """The engram block of the snapshot's config.json (None when there is no such file or block)."""
        if not os.path.lexists(self.hub.abs(self.rel) / "config.json"):
            return None
        path, _ = self.resolve("config.json")
        try:
            doc = json.loads(path.read_bytes())
        except ValueError as exc:
            raise SourceError(f"{self.shown('config.json')}: not valid JSON ({exc})") from None
        return from_config(doc, self.shown("config.json"))

    def weight_map(self) -> dict[str, str]:
        """Tensor name -> shard: from the index when there is one, else from every root shard's header."""
        base = self.hub.abs(self.rel)
        if os.path.lexists(base / INDEX_FILE):
            path, _ = self.resolve(INDEX_FILE)
            try:
                doc = json.loads(path.read_bytes())
                weight_map = doc["weight_map"]
                if not isinstance(weight_map, dict):
                    raise TypeError("weight_map is not an object")
            except (ValueError, KeyError, TypeError) as exc:
                raise SourceError(f"{self.shown(INDEX_FILE)}: no usable weight_map ({exc})") from None
            return {str(k): str(v) for k, v in weight_map.items()}
        shards = sorted(n for n in os.listdir(base) if n.endswith(".safetensors")) if base.is_dir() else []
        if not shards:
            raise self.missing(f"{self.shown('')}: no {INDEX_FILE} and no *.safetensors at the snapshot root")
        self.index_name = "*.safetensors headers"
        out: dict[str, str] = {}
        for shard in shards:
            for name in self.header(shard)[0].tensors:
                out.setdefault(name, shard)
        return out


def _table_refs(
    spec: EngramSpec, weight_map: dict[str, str], index_name: str, ckpt: CheckpointEngram | None
) -> list[TableRef]:
    where = f"{spec.recipe_path}: engram"
    if spec.tables:
        if ckpt is not None:
            reconcile_layers(ckpt, tuple(t.layer for t in spec.tables), where + ".tables")
        return list(spec.tables)
    regex = spec.layer_regex()
    found = sorted({int(m.group(1)) for name in weight_map if (m := regex.fullmatch(name))})
    if ckpt is not None:  # the checkpoint names its engram layers: the recipe only confirms them
        layers = list(reconcile_layers(ckpt, spec.layers, where))
    else:
        layers = list(spec.layers) or found
    if not layers:
        raise SourceError(
            f"{spec.recipe_path}: engram.pattern {spec.patterns[0]!r} matches no tensor in {index_name} "
            f"of {spec.pin.ref}",
            hint=_near(spec.patterns[0].replace(LAYER_FIELD, "1"), weight_map),
        )
    return [
        TableRef(layer, tuple(p.replace(LAYER_FIELD, str(layer)) for p in spec.patterns)) for layer in layers
    ]


def _near(name: str, weight_map: dict[str, str]) -> str:
    close = difflib.get_close_matches(name, list(weight_map), n=3, cutoff=0.5)
    return f"closest tensor names: {', '.join(close)}" if close else "check the tensor names in the index"


def _table(
    spec: EngramSpec, ref: TableRef, weight_map: dict[str, str], snap: Snapshot, ckpt: CheckpointEngram | None
) -> SourceTable:
    parts: list[SourcePart] = []
    for name in ref.parts:
        shard = weight_map.get(name)
        if shard is None:
            raise SourceError(
                f"engram layer {ref.layer}: tensor {name!r} is not in {snap.shown(snap.index_name)}",
                hint=f"{_near(name, weight_map)} (recipe {spec.recipe_path}, [engram])",
            )
        header, blob = snap.header(shard)
        tensor = header.tensors.get(name)
        if tensor is None:
            raise SourceError(
                f"engram layer {ref.layer}: the index maps tensor {name!r} to {shard}, "
                f"but that shard's header has no such tensor ({snap.shown(shard)})"
            )
        parts.append(SourcePart(tensor, shard, blob))
    rows = {p.tensor.rows for p in parts}
    if len(rows) != 1:
        detail = ", ".join(f"{p.tensor.name} {p.tensor.rows}" for p in parts)
        raise SourceError(f"engram layer {ref.layer}: parts of one row have different row counts: {detail}")
    total = rows.pop()
    row_bytes = sum(p.tensor.row_bytes for p in parts)
    want_rows = spec.expect_rows.get(ref.layer)
    if ckpt is not None:
        stated = reconcile_rows(ckpt, ref.layer, want_rows, f"{spec.recipe_path}: engram")
        if stated is not None and stated != total:
            raise SourceError(
                f"engram layer {ref.layer}: {ckpt.where}.engram_num_embeddings says {stated} rows, "
                f"{snap.shown(parts[0].shard)} header has {parts[0].tensor.name} with {total}",
                hint="the checkpoint disagrees with itself: re-stage it or pin another revision",
            )
        width = parts[0].tensor.shape[1] if len(parts[0].tensor.shape) > 1 else None
        if ckpt.head_dim is not None and width is not None and width != ckpt.head_dim:
            raise SourceError(
                f"engram layer {ref.layer}: {parts[0].tensor.name} rows are {width} wide, "
                f"{ckpt.where}.engram_head_dim is {ckpt.head_dim}"
            )
    if want_rows is not None and want_rows != total:
        raise SourceError(
            f"engram layer {ref.layer}: {parts[0].tensor.name} has {total} rows, the recipe says {want_rows}",
            hint=f"{spec.recipe_path} [engram].rows, or a different checkpoint revision",
        )
    if spec.row_bytes is not None and spec.row_bytes != row_bytes:
        shapes = " + ".join(f"{p.tensor.dtype}{list(p.tensor.shape[1:])}" for p in parts)
        raise SourceError(
            f"engram layer {ref.layer}: a row is {row_bytes} bytes ({shapes}), "
            f"the recipe says {spec.row_bytes}",
            hint=f"{spec.recipe_path} [engram].row_bytes",
        )
    if row_bytes == 0:
        raise SourceError(f"engram layer {ref.layer}: rows of {', '.join(ref.parts)} are empty")
    return SourceTable(ref.layer, tuple(parts), total, row_bytes)
