"""Lane recipe + host → LaunchSpec: image, command, env, binds, devices, ports. Pure.

Why the env is derived here and nowhere else: the TP4 lane's adapters read the world shape from
env, not from sglang's flags. With `DSV41_LAUNCHER` unset every TP4 adapter was silently off, and
with `TP_SIZE` unset `tp3_pad.py` assumed 3 and padded 64 heads to 96. So tp/ep/pad/launcher are
declared once in `[world]`, nnodes and ranks come from the lane's hosts, and every rank's env and
every flag in the command are computed from that one shape; a recipe whose command or env says
otherwise is refused before anything starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ..errors import SparkfleetError
from .bootcache import cache_key, env_subdir
from .manifest import BindManifest, BindMount

if TYPE_CHECKING:  # the node-side agent imports this module; keep it free of jsonschema/TOML
    from ..fabric import FabricFacts
    from ..inventory import Host, Inventory
    from .recipe import LaunchRecipe, WorldShape

# Env keys the world shape owns; a recipe's [launch.env] may not restate them.
DERIVED_KEYS = (
    "DSV41_LAUNCHER",
    "TP_SIZE",
    "EP_SIZE",
    "DSV41_TP_PAD",
    "NNODES",
    "NODE_RANK",
    "DIST_INIT_ADDR",
    "MODEL_PATH",
    "SERVER_PORT",
    "SGLANG_HOST_IP",
    "NCCL_IB_HCA",
    "NCCL_IB_GID_INDEX",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
)
# The engines' flags for the share of memory they claim: SGLang, vLLM. [launch.memory] declares it once.
MEM_FRACTION_FLAGS = ("--mem-fraction-static", "--gpu-memory-utilization")
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
_SECRET_KEY = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|(^|_)KEY$", re.IGNORECASE)


class ShapeError(SparkfleetError):
    """The lane's world shape, command or env do not agree with each other."""


@dataclass(frozen=True)
class LaunchSpec:
    """Everything one rank's runtime needs; a runtime only executes this, it decides nothing."""

    lane: str
    host: str
    rank: int
    nnodes: int
    runtime: str
    name: str  # container / process name: sparkfleet-<lane>-r<rank>
    image: str | None  # image@sha256:digest
    argv: tuple[str, ...]
    env: dict[str, str]
    binds: tuple[BindMount, ...]
    devices: tuple[str, ...]
    port: int
    gpus: str
    shm_size: str
    state_dir: str  # node-local: records and logs
    cache_dir: str  # node-local dir bound at the recipe's cache_mount
    receipt_roots: tuple[str, ...]  # host paths cleared before every serve
    ready_signatures: tuple[str, ...] = ()
    weight_load_regex: str = ""
    stop_timeout_s: float = 30.0
    labels: dict[str, str] = field(default_factory=dict)
    boot_cache_dir: str = ""  # node-local JIT/autotune caches for this image x model x world
    boot_cache_key: str = ""

    @property
    def is_head(self) -> bool:
        return self.rank == 0


def is_secret(key: str) -> bool:
    return _SECRET_KEY.search(key) is not None


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """The env as it may be printed: values of secret-looking keys hidden."""
    return {k: ("<redacted>" if is_secret(k) else v) for k, v in env.items()}


def state_dir_of(host: Host) -> Path:
    """Node-local records and logs: the host's state_dir, else beside its local hub."""
    return host.state_dir or host.local_hub.parent / "sparkfleet"


def check_world(world: WorldShape, hosts: tuple[str, ...], where: str) -> None:
    """Refuse shapes that cannot run: rank clashes and gaps, tp not divisible, launcher mismatch."""
    extra = sorted(set(world.ranks) - set(hosts))
    missing = [h for h in hosts if h not in world.ranks]
    if extra or missing:
        raise ShapeError(
            f"{where}: world.ranks must name exactly the lane's hosts"
            + (f"; not in lane.hosts: {', '.join(extra)}" if extra else "")
            + (f"; without a rank: {', '.join(missing)}" if missing else ""),
            hint="drop [world.ranks] to take ranks from the order of lane.hosts",
        )
    by_rank: dict[int, list[str]] = {}
    for h, r in world.ranks.items():
        by_rank.setdefault(r, []).append(h)
    for r, hs in sorted(by_rank.items()):
        if len(hs) > 1:
            raise ShapeError(f"{where}: hosts {' and '.join(sorted(hs))} both have node rank {r}")
    ranks = sorted(by_rank)
    gaps = sorted(set(range(len(ranks))) - set(ranks))
    if gaps:
        raise ShapeError(
            f"{where}: node ranks {', '.join(map(str, ranks))} are not 0..{len(ranks) - 1}: "
            f"rank {', '.join(map(str, gaps))} missing",
            hint="ranks are 0 (head) to nnodes-1 without gaps",
        )
    if world.tp % world.nnodes:
        raise ShapeError(
            f"{where}: tp={world.tp} is not divisible by nnodes={world.nnodes} (the lane's hosts)",
            hint="on Sparks tp is the total GPU count: one per node",
        )
    if world.tp % world.ep:
        raise ShapeError(f"{where}: ep={world.ep} does not divide tp={world.tp}")
    m = re.fullmatch(r"tp(\d+)", world.launcher or "")
    if m and int(m.group(1)) != world.tp:
        raise ShapeError(
            f"{where}: launcher {world.launcher!r} gates the TP{m.group(1)} adapters but tp={world.tp}",
            hint="set world.tp to match, or pick the launcher for this tp",
        )


def _substitute(argv: tuple[str, ...], values: dict[str, str], where: str) -> tuple[str, ...]:
    def one(m: re.Match) -> str:
        name = m.group(1)
        if name not in values:
            raise ShapeError(
                f"{where}: launch.command uses unknown placeholder {{{name}}}",
                hint=f"known: {', '.join('{' + k + '}' for k in sorted(values))}",
            )
        return values[name]

    return tuple(_PLACEHOLDER.sub(one, a) for a in argv)


def flag_values(argv: tuple[str, ...], flag: str) -> list[str]:
    """Every value given to `flag` in argv, as `--flag v` or `--flag=v`."""
    out = []
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif a.startswith(flag + "="):
            out.append(a[len(flag) + 1 :])
    return out


def check_flags(argv: tuple[str, ...], expected: dict[str, str], where: str) -> None:
    """Refuse a command whose world flags say something else than the world shape."""
    for flag, want in expected.items():
        for got in flag_values(argv, flag):
            if got != want:
                raise ShapeError(
                    f"{where}: launch.command gives {flag} {got} but the world shape says {want}",
                    hint=f"write {flag} {{placeholder}} and let sparkfleet fill it from [world]",
                )


def check_env_extras(env: dict[str, str], where: str) -> None:
    restated = [k for k in env if k in DERIVED_KEYS]
    if restated:
        raise ShapeError(
            f"{where}: launch.env sets {', '.join(restated)}, which sparkfleet derives from [world], "
            "the hosts and fabric detection",
            hint="declare the shape once in [world]; per-node fabric values come from detection",
        )
    for k, v in env.items():
        if "\n" in v or "\0" in v:
            raise ShapeError(f"{where}: launch.env.{k} contains a newline or NUL")


def head_ip(inv: Inventory, recipe: LaunchRecipe, fabrics: dict[str, FabricFacts | None]) -> str:
    """The address ranks dial for the distributed init: the head's fabric IP when known."""
    head = inv.host(recipe.world.head)
    facts = fabrics.get(head.name)
    return head.fabric_ip or (facts.fabric_ip if facts else None) or head.address


def build_spec(
    inv: Inventory,
    recipe: LaunchRecipe,
    host_name: str,
    manifest: BindManifest,
    fabrics: dict[str, FabricFacts | None],
) -> LaunchSpec:
    """The launch spec of `host_name`'s rank. `fabrics[host]` is that node's detection (or None)."""
    lane = inv.lane(recipe.lane)
    where = str(lane.recipe_path)
    world = recipe.world
    check_world(world, lane.hosts, where)
    check_env_extras(recipe.env, where)
    if host_name not in world.ranks:
        raise ShapeError(
            f"host {host_name!r} is not in lane {lane.name!r}", hint=f"lane hosts: {', '.join(lane.hosts)}"
        )
    host = inv.host(host_name)
    rank = world.ranks[host_name]
    facts = fabrics.get(host_name)
    if recipe.fabric == "roce" and facts is None:
        raise ShapeError(
            f"lane {lane.name!r} needs RoCE fabric facts for {host_name}",
            hint="fabric detection runs on the node (sparkfleet doctor HOST shows why it failed)",
        )
    state_dir = state_dir_of(host)
    cache_dir = (recipe.cache_dir or "{state_dir}/cache/{lane}").format(state_dir=state_dir, lane=lane.name)
    in_container = recipe.runtime in ("docker", "podman")
    model_path = manifest.model_paths.get(recipe.model.repo, "") if recipe.model else ""
    dist_init_addr = f"{head_ip(inv, recipe, fabrics)}:{recipe.dist_port}"
    my_ip = host.fabric_ip or (facts.fabric_ip if facts else None)

    env: dict[str, str] = {}
    if world.launcher:
        env["DSV41_LAUNCHER"] = world.launcher
    env.update(
        TP_SIZE=str(world.tp),
        EP_SIZE=str(world.ep),
        DSV41_TP_PAD=str(world.pad),
        NNODES=str(world.nnodes),
        NODE_RANK=str(rank),
        DIST_INIT_ADDR=dist_init_addr,
        MODEL_PATH=model_path,
        SERVER_PORT=str(recipe.port),
    )
    if my_ip:
        env["SGLANG_HOST_IP"] = my_ip
    if facts is not None and recipe.fabric == "roce":
        env.update(facts.env())
    env.update(recipe.env)

    values = {
        "lane": lane.name,
        "tp": str(world.tp),
        "ep": str(world.ep),
        "pad": str(world.pad),
        "nnodes": str(world.nnodes),
        "node_rank": str(rank),
        "dist_init_addr": dist_init_addr,
        "port": str(recipe.port),
        # port + rank: only for ranks sharing one machine (the demo), where each needs its own port
        "rank_port": str(recipe.port + rank),
        "model_path": model_path,
        "served_model_name": recipe.served_model_name or lane.name,
        "host_ip": my_ip or host.address,
        "cache_dir": recipe.cache_mount if in_container else cache_dir,
    }
    if recipe.memory.mem_fraction is not None:
        values["mem_fraction"] = f"{recipe.memory.mem_fraction:g}"
    argv = _substitute(recipe.command, values, where)
    check_flags(
        argv,
        {
            "--tp": values["tp"],
            "--tp-size": values["tp"],
            "--tensor-parallel-size": values["tp"],
            "--ep": values["ep"],
            "--ep-size": values["ep"],
            "--expert-parallel-size": values["ep"],
            "--nnodes": values["nnodes"],
            "--node-rank": values["node_rank"],
            "--dist-init-addr": dist_init_addr,
            "--port": values["rank_port"] if "{rank_port}" in recipe.command else values["port"],
            **{flag: values["mem_fraction"] for flag in MEM_FRACTION_FLAGS if "mem_fraction" in values},
        },
        where,
    )

    receipts = []
    for root in recipe.receipt_roots:
        rel = (
            PurePosixPath(root).relative_to(recipe.cache_mount)
            if root.startswith(recipe.cache_mount)
            else None
        )
        if rel is None or ".." in rel.parts:
            raise ShapeError(
                f"{where}: receipt root {root} is not under cache_mount {recipe.cache_mount}",
                hint="receipt roots are container paths inside the lane's cache mount",
            )
        receipts.append(str(Path(cache_dir) / rel))

    binds = list(manifest.binds) if in_container else []
    if in_container:
        binds.append(BindMount(Path(cache_dir), recipe.cache_mount, False, "cache"))
    devices = []
    if in_container and recipe.fabric == "roce":
        devices.append("/dev/infiniband")
    if in_container and (recipe.gpus == "cdi" or (recipe.runtime == "podman" and recipe.gpus != "none")):
        devices.append("nvidia.com/gpu=all")
    if not in_container:
        env["SPARKFLEET_CACHE_DIR"] = cache_dir
    boot_key = cache_key(
        recipe.image.value if recipe.image else None,
        recipe.model.revision if recipe.model else None,
        world.tp, world.ep, world.pad, world.nnodes,
    )  # fmt: skip
    boot_dir = Path(state_dir) / "bootcache" / lane.name / boot_key
    if boot_dir.is_relative_to(host.nas_hub.parent):
        raise ShapeError(
            f"{where}: boot cache {boot_dir} would be on the NAS ({host.nas_hub.parent})",
            hint="boot caches are node-local: give the host a state_dir on its own disk",
        )
    cache_root = recipe.boot_cache.mount if in_container else str(boot_dir)
    for name in recipe.boot_cache.env:
        env.setdefault(name, f"{cache_root}/{env_subdir(name)}")
    if in_container:
        binds.append(BindMount(boot_dir, recipe.boot_cache.mount, False, "bootcache"))
    from ..engram.config import launch_wiring  # lazy: the node-side agent imports this module

    engram_env, engram_binds = launch_wiring(inv, lane.name, host_name, in_container)
    env.update(engram_env)
    binds.extend(engram_binds)
    return LaunchSpec(
        lane=lane.name,
        host=host_name,
        rank=rank,
        nnodes=world.nnodes,
        runtime=recipe.runtime,
        name=f"sparkfleet-{lane.name}-r{rank}",
        image=f"{recipe.image.source}@{recipe.image.value}" if (recipe.image and in_container) else None,
        argv=argv,
        env=env,
        binds=tuple(binds),
        devices=tuple(devices),
        port=recipe.port,
        gpus=recipe.gpus,
        shm_size=recipe.shm_size,
        state_dir=str(state_dir),
        cache_dir=cache_dir,
        receipt_roots=tuple(receipts),
        ready_signatures=recipe.ready_signatures if rank == 0 else (),
        weight_load_regex=recipe.weight_load_regex,
        stop_timeout_s=recipe.timeouts.stop_s,
        labels={"sparkfleet.lane": lane.name, "sparkfleet.rank": str(rank), "sparkfleet.host": host_name},
        boot_cache_dir=str(boot_dir),
        boot_cache_key=boot_key,
    )
