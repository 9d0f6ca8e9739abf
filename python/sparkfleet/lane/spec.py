"""Lane recipe + host → LaunchSpec: image, command, env, binds, devices, ports. Pure.

Why the env is derived here and nowhere else: the TP4 lane's adapters read the world shape from
env, not from sglang's flags. With `DSV41_LAUNCHER` unset every TP4 adapter was silently off, and
with `TP_SIZE` unset `tp3_pad.py` assumed 3 and padded 64 heads to 96. So tp/ep/pad/launcher are
declared once in `[world]`, nnodes and ranks come from the lane's hosts, and every rank's env and
every flag in the command are computed from that one shape; a recipe whose command or env says
otherwise is refused before anything starts.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from ..base.errors import SparkfleetError
from ..facts import apikeys
from ..facts.display import DisplayDevice
from ..fleet.cacheseed import CacheSeed
from ..fleet.inventory import state_dir_of
from .bootcache import cache_key, env_subdir
from .kitwire import model_binds, node_env, node_env_missing
from .limits import ContainerLimits
from .manifest import BindManifest, BindMount

if TYPE_CHECKING:  # the node-side agent imports this module; keep it free of jsonschema/TOML
    from ..facts.fabric import FabricFacts
    from ..fleet.inventory import Host, Inventory
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
# A key whose value is a secret, whatever else it is called: HF_AUTH, OPENAI_APIKEY, PASSPHRASE,
# AWS_SECRET_ACCESS_KEY, SESSION_ID, SENTRY_DSN. Over-matching hides a harmless value; missing one leaks.
_SECRET_KEY = re.compile(
    r"TOKEN|SECRET|PASS|CREDENTIAL|AUTH|COOKIE|KEY|PRIVATE|SESSION|SIGNATURE|(^|_)DSN$", re.IGNORECASE
)
# A value carrying credentials, whatever its key: scheme://user:password@host (DATABASE_URL, ...).
_URL_CREDENTIALS = re.compile(r"[a-z][a-z0-9+.-]*://[^/@\s:]*:([^/@\s]+)@", re.IGNORECASE)
MIN_SCRUB_CHARS = 6  # a shorter secret is hidden in env listings but not hunted in free text


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
    ulimits: tuple[str, ...] = ()  # container --ulimit values, "name=soft:hard" (the host's)
    boot_cache_dir: str = ""  # node-local JIT/autotune caches for this image x model x world
    boot_cache_key: str = ""
    entrypoint: str | None = None  # the image's entrypoint replaced (the kit's `--entrypoint`), or kept
    container: ContainerLimits = ContainerLimits()  # [launch.container]: limits and privileges
    display: DisplayDevice | None = None  # the host's DRM card at [launch.display] target, with its group
    cache_seed: CacheSeed | None = None  # [launch.cache_seed] on this host: copied into cache_dir first

    @property
    def is_head(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LaunchSpec:
        """A LaunchSpec from its JSON form (`to_jsonable(spec)`), as the agent receives it."""
        d = dict(d)
        d["binds"] = tuple(
            BindMount(Path(b["source"]), b["target"], b["read_only"], b["origin"], b.get("repo"))
            for b in d["binds"]
        )
        for key in ("argv", "devices", "receipt_roots", "ready_signatures", "ulimits"):
            d[key] = tuple(d.get(key) or ())
        d["container"] = ContainerLimits.from_dict(d.get("container") or {})
        d["display"] = DisplayDevice.from_dict(d["display"]) if d.get("display") else None
        d["cache_seed"] = CacheSeed.from_dict(d["cache_seed"]) if d.get("cache_seed") else None
        return cls(**d)


def is_secret(key: str) -> bool:
    return _SECRET_KEY.search(key) is not None


def is_secret_value(key: str, value: str) -> bool:
    """A secret-looking key, or a value with URL credentials in it (DATABASE_URL=postgres://u:p@h)."""
    return is_secret(key) or _URL_CREDENTIALS.search(value) is not None


def secret_values(env: dict[str, str]) -> set[str]:
    """The values to hunt for in free text (logs, dmesg, errors): every value of a secret-looking key
    or carrying URL credentials, and the password inside such a URL, when MIN_SCRUB_CHARS or longer."""
    found: set[str] = set()
    for key, value in env.items():
        if not isinstance(value, str) or not is_secret_value(key, value):
            continue
        found.add(value)
        found.update(m.group(1) for m in _URL_CREDENTIALS.finditer(value))
    return {v for v in found if len(v) >= MIN_SCRUB_CHARS}


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """The env as it may be printed: values of secret-looking keys, or with URL credentials, hidden."""
    return {k: ("<redacted>" if is_secret_value(k, v) else v) for k, v in env.items()}


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


ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env_key(key: str, where: str) -> None:
    """Refuse an env name a shell, an env file or `docker --env-file` could read as something else."""
    if not ENV_KEY.fullmatch(key):
        raise ShapeError(
            f"{where}: launch.env key {key!r} is not an environment variable name",
            hint="env names match [A-Za-z_][A-Za-z0-9_]* (no newline, '=', space or NUL)",
        )


def check_env_extras(env: dict[str, str], where: str) -> None:
    for k in env:
        check_env_key(k, where)
    derived = {d.upper() for d in DERIVED_KEYS}
    restated = [k for k in env if k.upper() in derived]
    if restated:
        raise ShapeError(
            f"{where}: launch.env sets {', '.join(restated)}, which sparkfleet derives from [world], "
            "the hosts and fabric detection",
            hint="declare the shape once in [world]; per-node fabric values come from detection",
        )
    for k, v in env.items():
        if "\n" in v or "\r" in v or "\0" in v:
            raise ShapeError(f"{where}: launch.env.{k} contains a newline or NUL")


def check_weight_load_regex(pattern: str, where: str) -> None:
    """Compile the recipe's weight-load regex now, not after the ranks started."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ShapeError(
            f"{where}: launch.weight_load_regex {pattern!r} is not a valid regex: {exc}"
        ) from None


def cache_dir_of(recipe: LaunchRecipe, host: Host) -> str:
    """The lane's node-local cache dir: absolute, normalised, strictly under the host's state dir.

    Receipt roots inside it are deleted before every serve, so it must never name `/usr` or `..`.
    """
    state_dir = state_dir_of(host)
    template = recipe.cache_dir or "{state_dir}/cache/{lane}"
    value = template.replace("{state_dir}", str(state_dir)).replace("{lane}", recipe.lane)
    path = PurePosixPath(value)
    normal = PurePosixPath(os.path.normpath(value))
    if not template.startswith("{state_dir}/") or value != str(normal) or ".." in path.parts or "{" in value:
        raise ShapeError(
            f"launch.cache_dir {template!r} on {host.name} gives {value!r}: not a normalised path "
            f"under the host's state dir {state_dir}",
            hint='write it as "{state_dir}/cache/{lane}" (a path below {state_dir}, no ..)',
        )
    if normal == PurePosixPath(state_dir) or PurePosixPath(state_dir) not in normal.parents:
        raise ShapeError(f"launch.cache_dir {value!r} is not under the state dir {state_dir} of {host.name}")
    return value


def display_of(recipe: LaunchRecipe, host: Host, where: str) -> DisplayDevice | None:
    """The DRM card `host` gives the lane's containers ([launch.display]), or None if it needs none."""
    if recipe.display is None or recipe.runtime not in ("docker", "podman"):
        return None
    if not host.drm_card:
        raise ShapeError(
            f"{where}: launch.display needs the DRM card of {host.name}, and hosts/fleet.toml gives "
            f"{host.name} no drm_card",
            hint='set drm_card = "/dev/dri/cardN" for the host (or in [defaults]); '
            "`ls -l /dev/dri` on the host shows its cards",
        )
    return recipe.display.on(host.drm_card)


def cache_seed_of(recipe: LaunchRecipe, host: Host) -> CacheSeed | None:
    """[launch.cache_seed] on `host`: the lock and roots file in its checkout of the kit's pin, the
    store under its state dir (None: the lane seeds nothing, or runs no container)."""
    need = recipe.cache_seed
    if need is None or recipe.runtime not in ("docker", "podman") or recipe.image is None:
        return None
    state_dir = Path(state_dir_of(host))
    checkout = next(t for t in recipe.trees if t.pin == need.pin).checkout(state_dir)
    return need.on(checkout, state_dir, recipe.runtime, recipe.image.ref)


def receipt_paths(recipe: LaunchRecipe, cache_dir: str, where: str) -> tuple[str, ...]:
    """Receipt roots (container paths inside cache_mount) as host paths inside `cache_dir`."""
    out = []
    for root in recipe.receipt_roots:
        rel = (
            PurePosixPath(root).relative_to(recipe.cache_mount)
            if PurePosixPath(recipe.cache_mount) in PurePosixPath(root).parents
            else None
        )
        if rel is None or ".." in rel.parts or root != os.path.normpath(root):
            raise ShapeError(
                f"{where}: receipt root {root} is not under cache_mount {recipe.cache_mount}",
                hint="receipt roots are container paths inside the lane's cache mount",
            )
        out.append(str(PurePosixPath(cache_dir) / rel))
    return tuple(out)


def _static_values(inv: Inventory, recipe: LaunchRecipe, host_name: str) -> dict[str, str]:
    """Placeholder values as far as the inventory alone decides them (no fabric facts, no manifest)."""
    world, host = recipe.world, inv.host(host_name)
    head = inv.host(world.head)
    rank = world.ranks[host_name]
    return {
        "lane": recipe.lane,
        "tp": str(world.tp),
        "ep": str(world.ep),
        "pad": str(world.pad),
        "nnodes": str(world.nnodes),
        "node_rank": str(rank),
        "dist_init_addr": f"{head.fabric_ip or head.address}:{recipe.dist_port}",
        "head_ip": head.fabric_ip or head.address,
        "dist_port": str(recipe.dist_port),
        "port": str(recipe.port),
        "rank_port": str(recipe.port + rank),
        "model_path": recipe.model_mounts.get(recipe.model.pin, "") if recipe.model else "",
        "served_model_name": recipe.served_model_name or recipe.lane,
        "host_ip": host.fabric_ip or host.address,
        "cache_dir": recipe.cache_mount,
        "api_key_config": api_key_config(recipe, state_dir_of(host)),
        "vllm_key_guard": KEY_GUARD,
        **mem_fraction_value(recipe),
    }


API_KEY_MOUNT = "/run/sparkfleet/api-key.yaml"  # where a container sees the lane's SGLang key config
# {vllm_key_guard}: the ASGI middleware vLLM's `--middleware` imports (lane/keyguard/): the lane's
# key on every path but /health and /metrics, where vLLM's own key guards only /v1... paths.
KEY_GUARD = "sparkfleet_keyguard.RequireKey"
KEY_GUARD_DIR = Path(__file__).parent / "keyguard"  # holds that module alone: put first on PYTHONPATH
KEY_GUARD_MOUNT = "/run/sparkfleet/keyguard"  # where a container sees that folder (read-only)


def key_guard_wiring(recipe: LaunchRecipe, in_container: bool) -> tuple[dict[str, str], list[BindMount]]:
    """For a command that names {vllm_key_guard}: PYTHONPATH with the guard's folder before the
    recipe's own (a recipe whose image sets PYTHONPATH states it in [launch.env], as the EXL3 lane
    does), and, in a container, that folder bound read-only."""
    if "{vllm_key_guard}" not in " ".join(recipe.command):
        return {}, []
    folder = KEY_GUARD_MOUNT if in_container else str(KEY_GUARD_DIR)
    env = {"PYTHONPATH": ":".join(filter(None, (folder, recipe.env.get("PYTHONPATH"))))}
    return env, [BindMount(KEY_GUARD_DIR, KEY_GUARD_MOUNT, True, "keyguard")] if in_container else []


def api_key_config(recipe: LaunchRecipe, state_dir: Path) -> str:
    """{api_key_config}: the 0600 `api-key: KEY` YAML an SGLang rank takes with `--config` (apikeys)."""
    in_container = recipe.runtime in ("docker", "podman")
    return API_KEY_MOUNT if in_container else str(apikeys.config_path(state_dir, recipe.lane))


def mem_fraction_value(recipe: LaunchRecipe) -> dict[str, str]:
    """{mem_fraction} for the command, from the recipe's [launch.memory] (declared once)."""
    fraction = recipe.memory.mem_fraction
    return {} if fraction is None else {"mem_fraction": f"{fraction:g}"}


def recipe_problems(inv: Inventory, recipe: LaunchRecipe) -> list[tuple[str, SparkfleetError]]:
    """Every check `launch` runs before touching a node, each as (key path, error); none stops the rest.

    `inventory check` lists them all; `launch` refuses on the first (lane.check_shape).
    """
    lane = inv.lane(recipe.lane)
    where = str(lane.recipe_path)
    problems: list[tuple[str, SparkfleetError]] = []

    def run(key: str, check, *args) -> bool:
        try:
            check(*args)
        except SparkfleetError as exc:
            problems.append((key, exc))
            return False
        return True

    world_ok = run("world", check_world, recipe.world, lane.hosts, where)
    run("launch.env", check_env_extras, recipe.env, where)
    run("launch.weight_load_regex", check_weight_load_regex, recipe.weight_load_regex, where)
    for name in lane.hosts:
        if not run("launch.cache_dir", cache_dir_of, recipe, inv.host(name)):
            break
    for name in lane.hosts:
        if not run("launch.display", display_of, recipe, inv.host(name), where):
            break
    run("launch.receipt_roots", receipt_paths, recipe, "/", where)
    if world_ok:
        for name in recipe.world.by_rank():
            argv_ok = run(
                "launch.command",
                lambda n=name: check_flags(
                    _substitute(recipe.command, _static_values(inv, recipe, n), where),
                    _world_flags(_static_values(inv, recipe, n), recipe),
                    where,
                ),
            )
            if not argv_ok:
                break
    return problems


def _world_flags(values: dict[str, str], recipe: LaunchRecipe) -> dict[str, str]:
    """Flags whose values the world shape decides, for check_flags."""
    return {
        "--tp": values["tp"],
        "--tp-size": values["tp"],
        "--tensor-parallel-size": values["tp"],
        "--ep": values["ep"],
        "--ep-size": values["ep"],
        "--expert-parallel-size": values["ep"],
        "--nnodes": values["nnodes"],
        "--node-rank": values["node_rank"],
        "--dist-init-addr": values["dist_init_addr"],
        "--port": values["rank_port"] if "{rank_port}" in recipe.command else values["port"],
        # the recipe's [launch.memory] mem_fraction, declared once: a command restating another refuses
        **{flag: values["mem_fraction"] for flag in MEM_FRACTION_FLAGS if "mem_fraction" in values},
    }


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
    built_image: str | None = None,
    fabric_unknown_ok: bool = False,
) -> LaunchSpec:
    """The launch spec of `host_name`'s rank. `fabrics[host]` is that node's detection (or None).

    `built_image`: the image ID `sparkfleet image load` recorded for a lane with `image_build`.
    `fabric_unknown_ok`: plan without the node (`--offline`, `--dry-run`, an unreachable host):
    a RoCE lane's node-detected keys are left out for the caller to mark unknown.
    """
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
    if recipe.fabric == "roce" and facts is None and not fabric_unknown_ok:
        raise ShapeError(
            f"lane {lane.name!r} needs RoCE fabric facts for {host_name}",
            hint="fabric detection runs on the node (`sparkfleet doctor HOST` shows why it failed)",
        )
    state_dir = state_dir_of(host)
    check_weight_load_regex(recipe.weight_load_regex, where)
    cache_dir = cache_dir_of(recipe, host)
    display = display_of(recipe, host, where)
    in_container = recipe.runtime in ("docker", "podman")
    manifest_binds = model_binds(manifest, recipe.model_mounts, inv) if in_container else ()
    model_path = manifest.model_paths.get(recipe.model.repo, "") if recipe.model else ""
    if recipe.model and in_container and recipe.model.pin in recipe.model_mounts and model_path:
        model_path = recipe.model_mounts[recipe.model.pin]
    head = head_ip(inv, recipe, fabrics)
    dist_init_addr = f"{head}:{recipe.dist_port}"
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
    elif recipe.fabric == "roce":
        from ..facts.fabric import FIXED_ENV

        env.update(FIXED_ENV)
    env.update(recipe.env)
    missing = node_env_missing(recipe.node_env, facts, my_ip)
    if missing and not fabric_unknown_ok:  # a kit told nothing would pick its own (wrong) rail
        key, fields = next(iter(missing.items()))
        raise ShapeError(
            f"lane {lane.name!r}: launch.node_env.{key} needs "
            + ", ".join(f"`{f}` of {host_name}" for f in fields)
            + ", which is not known",
            hint="{host_ip} is the host's fabric_ip (hosts/fleet.toml); {hca} {hcas} {gid_index} {netdev} "
            "come from the fabric probe of a RoCE lane (`sparkfleet doctor HOST`)",
        )
    env.update(node_env(recipe.node_env, facts, my_ip))

    values = {
        "lane": lane.name,
        "tp": str(world.tp),
        "ep": str(world.ep),
        "pad": str(world.pad),
        "nnodes": str(world.nnodes),
        "node_rank": str(rank),
        "dist_init_addr": dist_init_addr,
        "head_ip": head,
        "dist_port": str(recipe.dist_port),
        "port": str(recipe.port),
        # port + rank: only for ranks sharing one machine (the demo), where each needs its own port
        "rank_port": str(recipe.port + rank),
        "model_path": model_path,
        "served_model_name": recipe.served_model_name or lane.name,
        "host_ip": my_ip or host.address,
        "cache_dir": recipe.cache_mount if in_container else cache_dir,
        "api_key_config": api_key_config(recipe, Path(state_dir)),
        "vllm_key_guard": KEY_GUARD,
    }
    values.update(mem_fraction_value(recipe))
    argv = _substitute(recipe.command, values, where)
    if rank != 0:  # the kit's worker-only flags (EXL3: `--headless` on node rank 1)
        argv += _substitute(recipe.worker_args, values, where)
    check_flags(argv, _world_flags({**values, "dist_init_addr": dist_init_addr}, recipe), where)
    receipts = receipt_paths(recipe, cache_dir, where)

    binds = list(manifest_binds)
    if in_container:  # a kit's pinned files ([[launch.trees]]), read-only from the host's checkout
        binds += [BindMount(t.host_dir(state_dir), t.target, True, "kit") for t in recipe.trees]
    if in_container:
        binds.append(BindMount(Path(cache_dir), recipe.cache_mount, False, "cache"))
    if in_container and "{api_key_config}" in " ".join(recipe.command):
        key_config = apikeys.config_path(Path(state_dir), lane.name)
        binds.append(BindMount(key_config, API_KEY_MOUNT, True, "apikey"))
    guard_env, guard_binds = key_guard_wiring(recipe, in_container)
    env.update(guard_env)
    binds += guard_binds
    devices = []
    if in_container and recipe.fabric == "roce":
        devices.append("/dev/infiniband")
    # `--gpus all` needs the NVIDIA runtime hook (DGX OS); CDI is the only way on NixOS and podman.
    gpus = recipe.gpus
    if gpus != "none" and (host.gpu_access == "cdi" or recipe.runtime == "podman"):
        gpus = "cdi"
    if in_container and gpus == "cdi":
        devices.append("nvidia.com/gpu=all")
    if not in_container:
        env["SPARKFLEET_CACHE_DIR"] = cache_dir
    boot_key = cache_key(  # the image the rank runs: a registry pin's digest, or the Nix build's ID
        recipe.image.value if recipe.image else built_image,
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

    engram_env, engram_mounts = launch_wiring(inv, lane.name, host_name, in_container, model_path)
    env.update(engram_env)
    binds.extend(BindMount(m.source, m.target, True, "engram") for m in engram_mounts)
    return LaunchSpec(
        lane=lane.name,
        host=host_name,
        rank=rank,
        nnodes=world.nnodes,
        runtime=recipe.runtime,
        name=f"sparkfleet-{lane.name}-r{rank}",
        image=(recipe.image.ref if recipe.image else built_image)
        if in_container
        else None,
        argv=argv,
        env=env,
        binds=tuple(binds),
        devices=tuple(devices),
        port=recipe.port,
        gpus=gpus,
        shm_size=recipe.shm_size,
        state_dir=str(state_dir),
        cache_dir=cache_dir,
        receipt_roots=receipts,
        ready_signatures=recipe.ready_signatures if rank == 0 else (),
        weight_load_regex=recipe.weight_load_regex,
        stop_timeout_s=recipe.timeouts.stop_s,
        labels={"sparkfleet.lane": lane.name, "sparkfleet.rank": str(rank), "sparkfleet.host": host_name},
        ulimits=ulimit_args(host.ulimits),
        boot_cache_dir=str(boot_dir),
        boot_cache_key=boot_key,
        entrypoint=recipe.entrypoint if in_container else None,
        container=recipe.container,
        display=display,
        cache_seed=cache_seed_of(recipe, host),
    )


def ulimit_args(ulimits: tuple[tuple[str, int | str], ...]) -> tuple[str, ...]:
    """The host's container ulimits as `--ulimit` values: soft = hard, "unlimited" = -1."""
    return tuple(f"{k}={-1 if v == 'unlimited' else v}:{-1 if v == 'unlimited' else v}" for k, v in ulimits)

