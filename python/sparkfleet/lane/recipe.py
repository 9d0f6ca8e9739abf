"""A lane recipe's `[world]` and `[launch]` tables resolved for launch, as frozen dataclasses.

The TOML was already parsed and schema-checked by `sparkfleet.fleet.inventory`, and its sections
typed (`fleet.sections`); this module fills launch's defaults and resolves the names the recipe
gives (its image and model pins, its kit trees) against the inventory, so the rest of `launch/`
reads one `LaunchRecipe`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TypeVar

from ..base.errors import InventoryError
from ..facts.display import DisplayNeed
from ..facts.memory import DEFAULT_FLOOR_BYTES, MIB, MemoryNeed, parse_size
from ..fleet.cacheseed import SeedNeed
from ..fleet.inventory import GIB, Inventory, Lane, ModelNeed, Pin
from ..fleet.kittrees import HostTree, host_trees
from .kitwire import NODE_FIELDS
from .limits import ContainerLimits, container_limits

T = TypeVar("T")

SGLANG_READY_LINE = "The server is fired up and ready to roll!"
# SGLang's loader line; the weight-load time is the number after "elapsed=".
DEFAULT_WEIGHT_LOAD_RE = r"Load weight end\. .*?elapsed=\s*([0-9.]+)"


@dataclass(frozen=True)
class WorldShape:
    """tp/ep/pad/launcher declared once; nnodes and ranks come from the lane's hosts."""

    tp: int
    ep: int
    pad: int
    launcher: str | None
    ranks: dict[str, int]  # host -> node rank (rank 0 is the head)

    @property
    def nnodes(self) -> int:
        return len(self.ranks)

    @property
    def head(self) -> str:
        return min(self.ranks, key=self.ranks.__getitem__)

    def by_rank(self) -> list[str]:
        """Hosts in rank order."""
        return sorted(self.ranks, key=self.ranks.__getitem__)


@dataclass(frozen=True)
class Timeouts:
    """[launch.timeouts]: how long a lane may take to come up and to stop, and how often it is polled."""

    ready_s: float = 1800.0
    stop_s: float = 30.0
    poll_s: float = 1.0


@dataclass(frozen=True)
class CanarySettings:
    """[launch.canary]: the fabric canary run in the lane's image before any weights load."""

    enabled: bool = True
    backend: str | None = None  # None: nccl when the lane has GPUs, else gloo
    size_bytes: int = 16 * MIB  # per all-reduce
    iterations: int = 5
    min_busbw_gbps: float = 0.0  # 0: no floor
    timeout_s: float = 120.0
    python: str = "python3"  # the interpreter inside the lane's image


# JIT/autotune caches the engines write at boot (torch inductor, triton, flashinfer, deep_gemm).
DEFAULT_BOOT_CACHE_ENV = (
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "FLASHINFER_WORKSPACE_BASE",
    "SGLANG_DG_CACHE_DIR",
    "CUDA_CACHE_PATH",
)


@dataclass(frozen=True)
class BootCacheSettings:
    """[launch.boot_cache]: node-local JIT/autotune caches keyed by image x model revision x world."""

    env: tuple[str, ...] = DEFAULT_BOOT_CACHE_ENV
    mount: str = "/bootcache"
    regression_pct: float = 25.0  # a warm boot this much slower than the last warm boot is flagged


@dataclass(frozen=True)
class LaunchRecipe:
    """How a lane is served: image, runtime, command template, ports, receipts, readiness."""

    lane: str
    world: WorldShape
    command: tuple[str, ...]
    runtime: str = "docker"
    image: Pin | None = None
    # The flake package the lane image is built from (`image_build`); launched by the image ID
    # `sparkfleet image load` recorded, never by a registry pin.
    image_build: str | None = None
    port: int = 30000
    dist_port: int = 20000
    served_model_name: str | None = None
    model: ModelNeed | None = None
    hub_mount: str = "/root/.cache/huggingface/hub"
    cache_dir: str | None = None  # host path; may use {state_dir}
    cache_mount: str = "/cache"
    receipt_roots: tuple[str, ...] = ()
    ready_signatures: tuple[str, ...] = (SGLANG_READY_LINE,)
    weight_load_regex: str = DEFAULT_WEIGHT_LOAD_RE
    fabric: str = "roce"
    gpus: str = "all"
    shm_size: str = "32g"
    needs_gib: float = 0.0
    env: dict[str, str] = field(default_factory=dict)
    timeouts: Timeouts = Timeouts()
    memory: MemoryNeed = MemoryNeed()
    canary: CanarySettings = CanarySettings()
    boot_cache: BootCacheSettings = BootCacheSettings()
    # What a kit's own launcher runs that one command list cannot say: the image's
    # entrypoint it replaces, flags only the non-head ranks get, fixed paths its models are read at.
    entrypoint: str | None = None
    worker_args: tuple[str, ...] = ()
    model_mounts: dict[str, str] = field(default_factory=dict)  # model pin -> container directory
    node_env: dict[str, str] = field(default_factory=dict)  # env key -> template of the node's facts
    container: ContainerLimits = ContainerLimits()  # [launch.container]: the box a kit runs in
    watchdog_scope: str = "rank"  # [watchdog] scope: "lane" = one rank's stop stops them all
    trees: tuple[HostTree, ...] = ()  # [[launch.trees]]: a kit's pinned files bound from each host
    display: DisplayNeed | None = None  # [launch.display]: the host's DRM card, for display-memory KV
    cache_seed: SeedNeed | None = None  # [launch.cache_seed]: the kit's pinned kernel cache, into /cache


def world_of(lane: Lane) -> WorldShape:
    """The `[world]` table; a lane without one is a single-rank world."""
    world = lane.sections.world
    ranks = world.ranks or {h: i for i, h in enumerate(lane.hosts)}
    return WorldShape(
        tp=int(world.tp if world.tp is not None else len(lane.hosts)),
        ep=int(world.ep if world.ep is not None else 1),
        pad=int(world.pad if world.pad is not None else 0),
        launcher=world.launcher,
        ranks=dict(ranks),
    )


def _or(value: T | None, default: T) -> T:
    """The recipe's value, or the default where the recipe leaves the key out."""
    return default if value is None else value


def launch_recipe(inv: Inventory, lane_name: str) -> LaunchRecipe:
    """The lane's launch recipe, with pins resolved against the inventory."""
    lane = inv.lane(lane_name)
    doc = lane.sections.launch
    if doc is None:
        raise InventoryError(
            f"{lane.recipe_path}: lane {lane.name!r} has no [launch] table",
            hint="add [launch] with at least command = [...] (see recipes/dsv41-flash-4x-mia)",
        )
    image = None
    if doc.image is not None:
        image = inv.pins.get(doc.image)
        if image is None or image.kind != "oci":
            known = ", ".join(sorted(n for n, p in inv.pins.items() if p.kind == "oci")) or "none"
            raise InventoryError(
                f"{lane.recipe_path}: launch.image: {doc.image!r} is not an oci pin",
                hint=f"expected one of: {known}",
            )
    model = lane.models[0]
    if doc.model is not None:
        found = [m for m in lane.models if m.pin == doc.model]
        if not found:
            raise InventoryError(
                f"{lane.recipe_path}: launch.model: {doc.model!r} is not one of the lane's [[models]]",
                hint=f"expected one of: {', '.join(m.pin for m in lane.models)}",
            )
        model = found[0]
    runtime = _or(doc.runtime, "docker")
    image_build = doc.image_build
    if image is not None and image_build is not None:
        raise InventoryError(
            f"{lane.recipe_path}: launch.image and launch.image_build are both set",
            hint="a lane runs either a registry image (image = <oci pin>) or a Nix-built one (image_build)",
        )
    if runtime in ("docker", "podman") and image is None and image_build is None:
        raise InventoryError(
            f"{lane.recipe_path}: launch.image or launch.image_build is required for the {runtime} runtime",
            hint="name an oci pin of hosts/fleet.toml, or the flake package the image is built from",
        )
    model_mounts = dict(doc.model_mounts)
    strangers = sorted(set(model_mounts) - {m.pin for m in lane.models})
    if strangers:
        raise InventoryError(
            f"{lane.recipe_path}: launch.model_mounts: {strangers[0]!r} is not one of the lane's [[models]]",
            hint=f"expected one of: {', '.join(m.pin for m in lane.models)}",
        )
    node_env = dict(doc.node_env)
    for key, template in node_env.items():
        unknown = sorted(set(re.findall(r"\{([^}]*)\}", template)) - set(NODE_FIELDS))
        if unknown:
            raise InventoryError(
                f"{lane.recipe_path}: launch.node_env.{key} uses unknown placeholder {{{unknown[0]}}}",
                hint="node_env may use " + ", ".join("{" + n + "}" for n in NODE_FIELDS),
            )
    t = doc.timeouts
    shm_size = _or(doc.shm_size, "32g")
    trees = host_trees(list(doc.trees), inv, str(lane.recipe_path))
    return LaunchRecipe(
        lane=lane.name,
        world=world_of(lane),
        command=doc.command,
        runtime=runtime,
        image=image,
        image_build=image_build,
        port=int(_or(doc.port, 30000)),
        dist_port=int(_or(doc.dist_port, 20000)),
        served_model_name=doc.served_model_name,
        model=model,
        hub_mount=_or(doc.hub_mount, LaunchRecipe.hub_mount),
        cache_dir=doc.cache_dir,
        cache_mount=_or(doc.cache_mount, LaunchRecipe.cache_mount),
        receipt_roots=doc.receipt_roots,
        ready_signatures=_or(doc.ready_signatures, (SGLANG_READY_LINE,)),
        weight_load_regex=_or(doc.weight_load_regex, DEFAULT_WEIGHT_LOAD_RE),
        fabric=_or(doc.fabric, "roce"),
        gpus=_or(doc.gpus, "all"),
        shm_size=shm_size,
        needs_gib=float(_or(doc.needs_gib, 0)),
        env=dict(doc.env),
        timeouts=Timeouts(
            ready_s=float(t.get("ready_s", Timeouts.ready_s)),
            stop_s=float(t.get("stop_s", Timeouts.stop_s)),
            poll_s=float(t.get("poll_s", Timeouts.poll_s)),
        ),
        memory=memory_need(doc.memory, shm_size, runtime),
        canary=canary_settings(doc.canary),
        boot_cache=BootCacheSettings(
            env=tuple(doc.boot_cache.get("env", DEFAULT_BOOT_CACHE_ENV)),
            mount=doc.boot_cache.get("mount", BootCacheSettings.mount),
            regression_pct=float(doc.boot_cache.get("regression_pct", 25.0)),
        ),
        entrypoint=doc.entrypoint,
        worker_args=doc.worker_args,
        model_mounts=model_mounts,
        node_env=node_env,
        container=container_limits(doc.container, str(lane.recipe_path)),
        watchdog_scope=lane.sections.watchdog.scope,
        trees=trees,
        display=display_need(doc.display),
        cache_seed=seed_need(doc.cache_seed, trees, image, str(lane.recipe_path)),
    )


def seed_need(
    doc: dict | None, trees: tuple[HostTree, ...], image: Pin | None, where: str
) -> SeedNeed | None:
    """[launch.cache_seed] (schema-checked): its pin must be one the lane binds through [[launch.trees]]
    (so staging brings the checkout and launch verifies it), its files inside that checkout, and the
    lane must run a pinned registry image (the asset is read out of it, checked against the lock)."""
    if doc is None:
        return None
    tree = next((t for t in trees if t.pin == doc["pin"]), None)
    if tree is None:
        raise InventoryError(
            f"{where}: launch.cache_seed.pin {doc['pin']!r} is not a pin of the lane's [[launch.trees]]",
            hint="the lock is read from the kit checkout that staging brings for [[launch.trees]]",
        )
    for key in ("lock", "roots_from"):
        rel = PurePosixPath(doc[key])
        if rel.is_absolute() or ".." in rel.parts:
            raise InventoryError(
                f"{where}: launch.cache_seed.{key}: {doc[key]!r} must stay inside the checkout"
            )
    if image is None:
        raise InventoryError(
            f"{where}: launch.cache_seed needs launch.image (the pinned image the asset is read from)"
        )
    return SeedNeed(tree.pin, tree.rev, doc["lock"], doc["asset"], doc["image_path"], doc["roots_from"])


def display_need(doc: dict | None) -> DisplayNeed | None:
    """[launch.display] (schema-checked): the card's place in the container and its nvidia_drm needs."""
    if doc is None:
        return None
    return DisplayNeed(doc["target"], tuple(sorted(doc.get("nvidia_drm", {}).items())))


def memory_need(doc: dict, shm_size: str, runtime: str) -> MemoryNeed:
    """[launch.memory] in bytes; the shm need is the lane's shm_size when it runs in containers."""
    swap = doc.get("max_swap_used_gib")
    return MemoryNeed(
        weights_per_rank=int(float(doc.get("weights_gib_per_rank", 0)) * GIB),
        kv_budget=int(float(doc.get("kv_budget_gib", 0)) * GIB),
        mem_fraction=float(doc["mem_fraction"]) if "mem_fraction" in doc else None,
        shm=parse_size(shm_size) if runtime in ("docker", "podman") else 0,
        floor=int(float(doc.get("floor_mib", DEFAULT_FLOOR_BYTES / MIB)) * MIB),
        max_swap_used=int(float(swap) * GIB) if swap is not None else None,
        interval_s=float(doc.get("watchdog_interval_s", 2.0)),
    )


def canary_settings(doc: dict) -> CanarySettings:
    return CanarySettings(
        enabled=bool(doc.get("enabled", True)),
        backend=doc.get("backend"),
        size_bytes=int(float(doc.get("size_mib", 16)) * MIB),
        iterations=int(doc.get("iterations", 5)),
        min_busbw_gbps=float(doc.get("min_busbw_gbps", 0)),
        timeout_s=float(doc.get("timeout_s", 120)),
        python=doc.get("python", "python3"),
    )


def rank_port(recipe: LaunchRecipe, rank: int) -> int:
    """The port a rank serves on: the lane's port, plus the rank when the command says {rank_port}."""
    return recipe.port + rank if "{rank_port}" in recipe.command else recipe.port


def ports_for_probe(recipe: LaunchRecipe, rank: int, nnodes: int) -> list[int]:
    """The ports the probe checks on a node before the plan exists: its serving port, and the
    head's rendezvous (dist-init) port when the lane spans nodes."""
    port = rank_port(recipe, rank)
    return [port, recipe.dist_port] if rank == 0 and nnodes > 1 else [port]
