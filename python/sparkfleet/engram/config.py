"""A lane recipe's optional `[engram]` table, and where a host's packs live.

The table says which hf pin holds the engram tables and which tensors make a table's row, either
listed (`[[engram.tables]]` with `layer` and `name`, or `parts` when one packed row is several
tensors' rows side by side — the TP4 lane's 264-byte row is 256 FP8 weight bytes + 8 scale bytes
from two tensors) or as a `pattern` with `{layer}` in it, the layers then read from the shards'
tensor names. The world size and the rank are never restated: W is the number of the lane's hosts
and the rank is the host's node rank (lane.hosts order unless [world.ranks] says otherwise), so a
pack always matches the NODE_RANK its runtime is started with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import InventoryError
from ..fleet.inventory import Inventory, Lane, Pin, replica_lane, replica_of_host
from .ranges import rank_range

DEFAULT_MOUNT = "/engram"  # the container path DSV41_PACKED_DIR points at (the TP4 packer's --out default)
PACKED_DIR_ENV = "DSV41_PACKED_DIR"
LAYER_FIELD = "{layer}"
# The two on-disk layouts a lane's engine reads. "packed": one DSV41EN1 file per table (MiaAI's TP4
# packer, DSV41_PACKED_DIR). "sparse-shards": the Aiden kit's tools/engram_local.py — the checkpoint's
# own shard files, same names and sizes, holding only this rank's rows (holes elsewhere), beside the
# index and engram-local.json, read through SPARK_ENGRAM_DIR; the rank that holds the checkpoint reads
# the shards themselves (SPARK_ENGRAM_DIR = the model path, SPARK_ENGRAM_ROWS = its ranges).
PACKED, SPARSE_SHARDS = "packed", "sparse-shards"
SPARSE_DIR_ENV, SPARSE_ROWS_ENV = "SPARK_ENGRAM_DIR", "SPARK_ENGRAM_ROWS"
SPARSE_MOUNT = "/engram-local"  # launch-sgl-dsv41.sh: `-v <ENGRAM_LOCAL_DIR>:/engram-local:ro`


@dataclass(frozen=True)
class TableRef:
    """One table as the recipe names it: a layer and the tensors whose rows form one packed row."""

    layer: int
    parts: tuple[str, ...]


@dataclass(frozen=True)
class EngramSpec:
    """The lane's `[engram]` table with the pin resolved."""

    lane: str
    recipe_path: Path
    pin: Pin
    tables: tuple[TableRef, ...]  # explicit tables (empty when `patterns` is used)
    patterns: tuple[str, ...]  # tensor-name templates with {layer}, one per part of a row
    layers: tuple[int, ...]  # with patterns: only these layers (empty = every layer found)
    expect_rows: dict[int, int]  # layer -> row count the recipe asserts
    row_bytes: int | None  # asserted packed row size (else derived from the tensors)
    out_dir: str | None  # template with {lane} / {host}; None = beside the local hub
    mount: str
    layout: str = PACKED
    shards_rank: int | None = None  # sparse-shards: the rank reading the checkpoint's shards (no copy)

    def layer_regex(self) -> re.Pattern[str]:
        """The first pattern as a regex capturing the layer number."""
        head, _, tail = self.patterns[0].partition(LAYER_FIELD)
        return re.compile(re.escape(head) + r"(\d+)" + re.escape(tail))


@dataclass(frozen=True)
class Placement:
    """Where one host's share of the lane's packs goes: its rank, the world size, the directory."""

    lane: str
    host: str
    rank: int
    world: int
    out_dir: Path
    hosts: tuple[str, ...] = ()  # the lane's hosts by node rank (index = rank)


def engram_spec(inv: Inventory, lane_name: str) -> EngramSpec | None:
    """The lane's `[engram]` table, or None when the lane has none."""
    lane = inv.lane(lane_name)
    doc = lane.sections.engram
    if doc is None:
        return None
    where = f"{lane.recipe_path}: engram"
    pin = inv.pin_of(doc.pin, "hf", f"{where}.pin")
    has_tables, has_pattern = doc.tables is not None, doc.pattern is not None
    if has_tables == has_pattern:
        raise InventoryError(
            f"{where}: give exactly one of `tables` or `pattern`",
            hint='tables = [{layer = 1, name = "..."}] or pattern = "layers.{layer}.engram.embed.weight"',
        )
    tables: list[TableRef] = []
    for i, t in enumerate(doc.tables or ()):
        if (t.name is None) == (t.parts is None):
            raise InventoryError(f"{where}.tables[{i}]: give exactly one of `name` or `parts`")
        tables.append(TableRef(int(t.layer), (t.name,) if t.name is not None else tuple(t.parts or ())))
    layers_seen = [t.layer for t in tables]
    dup = sorted({x for x in layers_seen if layers_seen.count(x) > 1})
    if dup:
        raise InventoryError(f"{where}.tables: layer {dup[0]} is listed twice (one pack file per layer)")
    patterns = (doc.pattern,) if isinstance(doc.pattern, str) else tuple(doc.pattern or ())
    for i, p in enumerate(patterns):
        if p.count(LAYER_FIELD) != 1:
            raise InventoryError(f"{where}.pattern[{i}]: {p!r} must contain {LAYER_FIELD} exactly once")
    if doc.layers is not None and not patterns:
        raise InventoryError(f"{where}.layers: only used with `pattern` (tables name their layer)")
    try:
        expect_rows = {int(k): int(v) for k, v in (doc.rows or {}).items()}
    except ValueError:
        raise InventoryError(
            f"{where}.rows: keys are layer numbers, e.g. rows = {{ 1 = 384006168 }}"
        ) from None
    out_dir = doc.out_dir
    if out_dir is not None:
        unknown = set(re.findall(r"\{([^}]*)\}", out_dir)) - {"lane", "host"}
        if unknown:
            raise InventoryError(
                f"{where}.out_dir: unknown placeholder {{{sorted(unknown)[0]}}}",
                hint="out_dir may use {lane} and {host}",
            )
    layout = doc.layout if doc.layout is not None else PACKED
    shards_rank, mount = doc.shards_rank, doc.mount
    if layout == SPARSE_SHARDS and not expect_rows:
        raise InventoryError(
            f"{where}.rows: the sparse-shards layout needs the tables' row counts",
            hint="rows = { 1 = 384006168, 14 = 384016682 }: launch gives the shards rank its ranges "
            "from them (SPARK_ENGRAM_ROWS), and `engram pack` checks them against config.json",
        )
    if shards_rank is not None and (layout != SPARSE_SHARDS or not 0 <= int(shards_rank) < len(lane.hosts)):
        raise InventoryError(
            f"{where}.shards_rank: {shards_rank!r} is not a node rank of the lane's sparse-shards layout",
            hint=f'a rank in 0..{len(lane.hosts) - 1}, with layout = "{SPARSE_SHARDS}"',
        )
    return EngramSpec(
        lane=lane.name,
        recipe_path=lane.recipe_path,
        pin=pin,
        tables=tuple(tables),
        patterns=patterns,
        layers=tuple(int(x) for x in doc.layers or ()),
        expect_rows=expect_rows,
        row_bytes=int(doc.row_bytes) if doc.row_bytes is not None else None,
        out_dir=out_dir,
        mount=mount if mount is not None else (SPARSE_MOUNT if layout == SPARSE_SHARDS else DEFAULT_MOUNT),
        layout=layout,
        shards_rank=None if shards_rank is None else int(shards_rank),
    )


def node_rank(lane: Lane, host: str) -> int:
    """The host's node rank in the lane: [world.ranks] when given, else its index in lane.hosts."""
    if host not in lane.hosts:
        raise InventoryError(
            f"host {host!r} is not in lane {lane.name!r}", hint=f"lane hosts: {', '.join(lane.hosts)}"
        )
    ranks = lane.sections.world.ranks
    return int(ranks[host]) if ranks and host in ranks else lane.hosts.index(host)


def placement(inv: Inventory, spec: EngramSpec, host_name: str) -> Placement:
    """Rank, world size and output directory of `host_name`'s packs for the lane."""
    lane = inv.lane(spec.lane)
    copy_n = replica_of_host(lane, host_name)  # a host of a [gateway] replicas copy packs its rank's rows
    if copy_n:
        lane = replica_lane(lane, copy_n)
    host = inv.host(host_name)
    rank = node_rank(lane, host_name)
    if spec.out_dir is not None:
        try:
            out = Path(spec.out_dir.format(lane=lane.name, host=host_name))
        except (KeyError, IndexError, ValueError) as exc:
            raise InventoryError(
                f"{lane.recipe_path}: engram.out_dir {spec.out_dir!r}: unknown or broken placeholder ({exc})",
                hint="out_dir may use {lane} and {host}",
            ) from None
    else:
        out = host.local_hub.parent / "engram-packs" / lane.name
    by_rank = tuple(sorted(lane.hosts, key=lambda h: node_rank(lane, h)))
    return Placement(lane.name, host_name, rank, len(lane.hosts), out, by_rank)


def packed_dir(inv: Inventory, lane_name: str, host_name: str) -> Path | None:
    """The host directory holding `host_name`'s packs for the lane, or None when the lane packs nothing."""
    spec = engram_spec(inv, lane_name)
    return None if spec is None else placement(inv, spec, host_name).out_dir


@dataclass(frozen=True)
class PackMount:
    """A rank's packs as a container sees them: host directory `source`, read-only at `target`."""

    source: Path
    target: str


def rows_spec(spec: EngramSpec, rank: int, world: int) -> str:
    """SPARK_ENGRAM_ROWS of `rank`: LAYER:START:END per table, comma-separated (engram_partition.py)."""
    spans = ((layer, *rank_range(rows, rank, world)) for layer, rows in sorted(spec.expect_rows.items()))
    return ",".join(f"{layer}:{lo}:{hi}" for layer, lo, hi in spans)


def launch_wiring(
    inv: Inventory, lane_name: str, host_name: str, in_container: bool, model_path: str = ""
) -> tuple[dict[str, str], list[PackMount]]:
    """(env, mounts) a rank needs to read its packs: DSV41_PACKED_DIR, and in a container a read-only mount.

    Called by lane.spec.build_spec, which turns the mounts into its own binds: the wiring runs
    one way, lane → engram, so engram never imports lane/ or launch/. Empty when the lane has no
    [engram]. The env key is refused in [launch.env] for such a lane, so the directory is named
    in one place only.
    """
    spec = engram_spec(inv, lane_name)
    if spec is None:
        return {}, []
    lane = inv.lane(lane_name)
    if PACKED_DIR_ENV in _launch_env(lane):
        raise InventoryError(
            f"{lane.recipe_path}: launch.env sets {PACKED_DIR_ENV}, which [engram] derives",
            hint="drop it from [launch.env]; [engram].out_dir / mount say where the packs are",
        )
    place = placement(inv, spec, host_name)
    if spec.layout == SPARSE_SHARDS:
        return _sparse_wiring(lane, spec, place, in_container, model_path)
    out = place.out_dir
    if not in_container:
        return {PACKED_DIR_ENV: str(out)}, []
    return {PACKED_DIR_ENV: spec.mount}, [PackMount(out, spec.mount)]


def _launch_env(lane: Lane) -> dict[str, str]:
    """The recipe's [launch.env] as written (empty for a lane without [launch])."""
    return lane.sections.launch.env if lane.sections.launch is not None else {}


def _sparse_wiring(
    lane: Lane, spec: EngramSpec, place: Placement, in_container: bool, model_path: str
) -> tuple[dict[str, str], list[PackMount]]:
    """launch-sgl-dsv41.sh run_cmd(): the shards rank reads the checkpoint, every other its sparse copy."""
    taken = [k for k in (SPARSE_DIR_ENV, SPARSE_ROWS_ENV) if k in _launch_env(lane)]
    if taken:
        raise InventoryError(
            f"{lane.recipe_path}: launch.env sets {', '.join(taken)}, which [engram] derives",
            hint="drop it from [launch.env]; [engram] layout / shards_rank / out_dir say where the rows are",
        )
    if place.rank == spec.shards_rank:
        return {SPARSE_DIR_ENV: model_path, SPARSE_ROWS_ENV: rows_spec(spec, place.rank, place.world)}, []
    if not in_container:
        return {SPARSE_DIR_ENV: str(place.out_dir)}, []
    return {SPARSE_DIR_ENV: spec.mount}, [PackMount(place.out_dir, spec.mount)]
