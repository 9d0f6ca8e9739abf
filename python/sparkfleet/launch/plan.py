"""The lane's plan: probe every node, compute every rank's spec, refuse a bad shape before anything starts.

Facts → plan: `prepare` asks each node (fabric, staged/verified models, memory, busy ports, the
image it holds) through the agent and computes every rank's LaunchSpec with pure code (`build_spec`,
`build_manifest`); `dry_run` does the same from the inventory and recipe alone. Nothing here
starts, stops or records anything: that is the lifecycle's (`lane.py`), which runs on a plan.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from ..base.errors import ExitCode, SparkfleetError
from ..base.jsonable import to_jsonable
from ..facts.fabric import NODE_ENV_KEYS, FabricFacts
from ..fleet.inventory import Host, Inventory, state_dir_of
from ..fleet.kittrees import KitVerdict, kit_checkouts
from ..images.record import built_image_id, planned_image
from ..lane.kitwire import node_env_missing
from ..lane.manifest import BindManifest, ModelState, build_manifest
from ..lane.recipe import LaunchRecipe, launch_recipe, ports_for_probe
from ..lane.replicas import replica_flag
from ..lane.spec import LaunchSpec, ShapeError, build_spec, cache_seed_of, display_of, recipe_problems
from ..node import records
from ..node.protocol import (
    FabricProbe,
    ImageStateRequest,
    KitsRequest,
    ModelRequest,
    ProbeAnswer,
    ProbeRequest,
)
from ..node.runtimes import container_run_argv
from ..remote.hosts import HostUnreachable, fan_out
from ..remote.nodecall import ask_host


@dataclass
class NodeFacts:
    """What one node told us: fabric detection and model states (or why not)."""

    host: str
    fabric: FabricFacts | None
    fabric_error: str | None
    models: list[ModelState]
    model_errors: list[str] = field(default_factory=list)
    not_probed: str | None = None  # why the node was not asked (offline, dry run, unreachable)
    memory: dict | None = None  # MemoryFacts fields (sparkfleet.facts.memory)
    memory_error: str | None = None
    ports_in_use: list[int] = field(default_factory=list)
    kits: list[dict] = field(default_factory=list)  # [[launch.trees]] checkouts: KitVerdict fields
    display: dict | None = None  # [launch.display] on the node: DisplayFacts fields + "problems"
    cache_seed: dict | None = None  # [launch.cache_seed] on the node: seedprep.seed_facts


@dataclass
class LanePlan:
    """Every rank's spec and manifest, computed before anything starts.

    A plan made without some node (`--offline`, `--dry-run`, or the host did not answer) holds
    every value the inventory and recipe decide; what only the node can tell (fabric HCA/GID/
    interfaces, which model entries are staged and verify) is listed in `unknown[host]` with
    the reason, never guessed.
    """

    lane: str
    recipe: LaunchRecipe
    facts: dict[str, NodeFacts]
    manifests: dict[str, BindManifest]
    specs: dict[str, LaunchSpec]  # host -> spec
    unknown: dict[str, dict[str, str]] = field(default_factory=dict)  # host -> {value: why unknown}
    unreachable: dict[str, str] = field(default_factory=dict)  # host -> the ssh error
    image_note: str = ""  # dry run of a Nix-built image: what the operator record says of it

    def by_rank(self) -> list[LaunchSpec]:
        return sorted(self.specs.values(), key=lambda s: s.rank)

    def start_order(self) -> list[LaunchSpec]:
        """Workers first, head last: the head's dist-init listener must find every worker dialling in."""
        return list(reversed(self.by_rank()))


def kits_request(inv: Inventory, recipe: LaunchRecipe, host: Host) -> KitsRequest:
    """The kit checkouts the lane binds ([[launch.trees]]), for the node's agent to judge as verify
    does: in the probe (launch and doctor) and again in each rank's start, just before they run."""
    return KitsRequest(
        host=host.name,
        state_dir=str(state_dir_of(host)),
        lane=recipe.lane,
        checkouts=to_jsonable(kit_checkouts([inv.lane(recipe.lane)], inv)) if recipe.trees else [],
    )


def probe_request(inv: Inventory, recipe: LaunchRecipe, host: Host) -> ProbeRequest:
    """What launch and doctor ask a node first. [launch.cache_seed]: doctor asks whether the tree is
    there; launch's probe also makes it (`ProbeRequest.preparing_seed`)."""
    lane = inv.lane(recipe.lane)
    rank = recipe.world.ranks.get(host.name, 0)
    return ProbeRequest(
        memory=True,
        ports=ports_for_probe(recipe, rank, recipe.world.nnodes),
        fabric=FabricProbe(needed=recipe.fabric == "roce", fabric_ip=host.fabric_ip),
        models=[ModelRequest(m.repo, m.revision, list(m.include), list(m.exclude)) for m in lane.models],
        local_hub=str(host.local_hub),
        nas_hub=str(host.nas_hub),
        kits=kits_request(inv, recipe, host),
        display=to_jsonable(dev) if (dev := display_of(recipe, host, str(lane.recipe_path))) else None,
        cache_seed=to_jsonable(seed) if (seed := cache_seed_of(recipe, host)) else None,
    )


def node_facts(host: str, answer: dict) -> NodeFacts:
    """NodeFacts from an agent `probe` (or `doctor`) answer: shared by launch and doctor."""
    a = ProbeAnswer.decode(answer)
    return NodeFacts(
        host, a.fabric, a.fabric_error, a.models, a.model_errors, memory=a.memory,
        memory_error=a.memory_error, ports_in_use=a.ports_in_use, kits=a.kits, display=a.display,
        cache_seed=a.cache_seed,
    )  # fmt: skip


def check_shape(inv: Inventory, recipe: LaunchRecipe, preview: bool = False) -> None:
    """The checks that need no node: run before any ssh.

    `preview` (a dry run, an offline plan): an image pin not yet resolved to a digest is shown, not
    refused; the preview is what an operator reads before `pins resolve`, and launch still refuses."""
    lane = inv.lane(recipe.lane)
    problems = recipe_problems(inv, recipe)
    if problems:
        raise problems[0][1]
    if preview:
        return
    if unresolved_image(recipe):
        raise ShapeError(
            f"lane {lane.name}: image pin {recipe.image.name} is not resolved "
            f"({recipe.image.value or f'tag {recipe.image.tag}, no digest'})",
            hint="a launch names images by full digest: run `sparkfleet pins resolve` first",
        )


def unresolved_image(recipe: LaunchRecipe) -> bool:
    """Whether the lane runs a container image whose pin names no digest yet (a tag only)."""
    in_container = recipe.runtime in ("docker", "podman")
    return in_container and recipe.image is not None and not recipe.image.resolved


def previewed_image(recipe: LaunchRecipe) -> tuple[str, str]:
    """For a preview of a lane whose image pin is a tag only: the placeholder a rank's argv shows
    and the line that says why, e.g. `aidendle94/…:production-1.2 (pin aiden-production not
    resolved …)`. The tag is the operator's word, never the digest it stands for today."""
    pin = recipe.image
    assert pin is not None
    named = f"{pin.source}:{pin.tag}" if pin.tag else pin.ref
    return (
        f"<{named}: not resolved>",
        f"{named} (pin {pin.name} not resolved to a digest: `sparkfleet pins resolve` names it; "
        "launch refuses until then)",
    )


def check_kits(recipe: LaunchRecipe, nf: NodeFacts) -> None:
    """Refuse (exit 5) a node whose kit checkout ([[launch.trees]]) is not the pinned one: absent,
    at another commit, changed in place, or lacking a file the recipe names (the node's agent judged
    it as `verify` does). The kit refuses the same: its preflight checks every file of its runtime
    against its own manifest ("Runtime kit differs from the independent public digest"), and a
    container that cannot find serve.py only shows up minutes later as a crash loop."""
    bad = [KitVerdict(**d) for d in nf.kits if not d.get("ok")]
    if not bad:
        return
    raise SparkfleetError(
        f"{nf.host}: the kit is not there as pinned; "
        + "; ".join(v.summary() for v in bad)
        + "; the container would run other code than the kit's",
        hint=bad[0].fix,
        exit_code=ExitCode.REFUSED,
    )


def check_display(recipe: LaunchRecipe, nf: NodeFacts) -> None:
    """Refuse (exit 5) a node that cannot give a rank its display-memory KV pool ([launch.display]):
    no DRM card at the host's drm_card, or nvidia_drm not loaded as the lane needs. sparkfleet, like
    the kit, never changes a module parameter: the fix is the host's configuration."""
    problems = (nf.display or {}).get("problems") or []
    if recipe.display is None or not problems:
        return
    raise SparkfleetError(
        f"{nf.host}: lane {recipe.lane} keeps its KV cache in display memory, and this node cannot "
        f"give a rank its DRM card: {'; '.join(problems)}",
        hint=recipe.display.fix(nf.host),
        exit_code=ExitCode.REFUSED,
    )


def check_cache_seed(inv: Inventory, recipe: LaunchRecipe, nf: NodeFacts) -> None:
    """Refuse (exit 5) a node where the kit's kernel cache cannot be had ([launch.cache_seed]): the
    image lacks it, it is not the asset the kit's lock pins, or the lock cannot be read. A rank
    started with an unseeded /cache recompiles every JIT kernel (minutes), and its compilers
    would not run from the inputs the kit qualified."""
    facts = nf.cache_seed or {}
    seed = cache_seed_of(recipe, inv.host(nf.host))
    if seed is None or facts.get("ok", True):
        return
    raise SparkfleetError(
        f"{nf.host}: lane {recipe.lane} seeds /cache from the kit's {seed.asset}, which cannot be had "
        f"here: {facts.get('problem')}",
        hint=seed.fix(nf.host, recipe.lane),
        exit_code=ExitCode.REFUSED,
    )


def not_probed(host: str, why: str) -> NodeFacts:
    """The facts of a node we did not (or could not) ask: nothing known, and why."""
    return NodeFacts(host, None, None, [], not_probed=why)


def unknowns(inv: Inventory, recipe: LaunchRecipe, facts: dict[str, NodeFacts], host_name: str) -> dict:
    """{value: why} for what `host_name`'s spec lacks because a node was not probed."""
    out: dict[str, str] = {}
    nf = facts[host_name]
    head = recipe.world.head
    head_facts = facts.get(head)
    if (
        recipe.fabric == "roce"
        and not inv.host(head).fabric_ip
        and (head_facts is None or head_facts.fabric is None)
    ):
        out["DIST_INIT_ADDR"] = f"the head {head}'s fabric IP: not in hosts/fleet.toml and not detected"
    if nf.not_probed is not None:
        if nf.fabric is None and recipe.fabric == "roce":
            why = f"detected from {host_name}'s sysfs (the RoCE GID of its fabric IP); {nf.not_probed}"
            out.update({k: why for k in NODE_ENV_KEYS})
            if not inv.host(host_name).fabric_ip:
                out["SGLANG_HOST_IP"] = f"{host_name} has no fabric_ip in hosts/fleet.toml; " + why
        lane = inv.lane(recipe.lane)
        if lane.models:
            why = (
                f"staged state on {host_name}: each snapshot directory binds from its local hub when "
                f"staged and verified there, else from the NAS read-only; {nf.not_probed}"
            )
            out["MODEL_PATH"] = why
            out["model binds"] = why
    # after the fabric keys: a kit-spelled key (NCCL_IB_HCA "={hca}:1") names the fact it lacks
    out.update(node_env_unknowns(inv, recipe, nf))
    return out


def node_env_unknowns(inv: Inventory, recipe: LaunchRecipe, nf: NodeFacts) -> dict[str, str]:
    """{[launch.node_env] key: why unknown} for the keys `nf.host`'s facts cannot fill, naming
    each missing host fact (`hca` of dgx2) and where it would come from."""
    host = inv.host(nf.host)
    my_ip = host.fabric_ip or (nf.fabric.fabric_ip if nf.fabric else None)
    out = {}
    for key, fields in node_env_missing(recipe.node_env, nf.fabric, my_ip).items():
        whence = []
        for f in fields:
            if f == "host_ip":
                whence.append(
                    f"`host_ip` of {nf.host} (its fabric_ip: not in hosts/fleet.toml and not detected)"
                )
            else:
                whence.append(f"`{f}` of {nf.host} (detected from its sysfs by the fabric probe)")
        why = f"[launch.node_env] {recipe.node_env[key]!r} needs " + ", ".join(whence)
        out[key] = f"{why}; {nf.not_probed}" if nf.not_probed else why
    return out


def prepare(
    inv: Inventory,
    lane_name: str,
    hosts: list[str] | None = None,
    offline: str | None = None,
    tolerate_unreachable: bool = False,
    recipe: LaunchRecipe | None = None,
) -> LanePlan:
    """Probe the lane's nodes (all, or `hosts`) and compute their specs; raise before starting anything.

    `offline`: contact no node; the reason is what `unknown` says. `tolerate_unreachable`: a node
    that ssh cannot reach is planned as if offline and named in `unreachable` (the caller exits
    with ExitCode.UNREACHABLE after showing what could be derived). `recipe`: the lane's, when the
    caller read it already (launch reads it once for every step).
    """
    lane = inv.lane(lane_name)
    recipe = recipe or launch_recipe(inv, lane_name)
    check_shape(inv, recipe, preview=offline is not None)
    names = hosts or list(lane.hosts)
    for name in names:
        inv.host(name)
    in_container = recipe.runtime in ("docker", "podman")
    unreachable: dict[str, str] = {}
    built = None
    if in_container and recipe.image_build and offline is None:
        built = built_image_id(recipe)
    images: dict[str, dict] = {}  # host -> its image state (a Nix-built image's lane)

    def probe_one(name: str) -> NodeFacts:
        if offline is not None:
            return not_probed(name, offline)
        host = inv.host(name)
        req = probe_request(inv, recipe, host).preparing_seed()  # doctor only reads the seed
        if built:
            req = dataclasses.replace(req, built_image=image_request(recipe, host, built))
        try:
            answer = ask_host(inv, name, req, timeout=600)
        except HostUnreachable as exc:
            if not tolerate_unreachable:
                raise
            unreachable[name] = exc.message
            return not_probed(name, f"unreachable: {exc.message}")
        images[name] = ProbeAnswer.decode(answer).image_state or {}
        return node_facts(name, answer)

    facts = {f.host: f for f in fan_out(probe_one, names)}
    if built:
        states = dict(images)
        check_built_image(recipe, built, states, replica_flag(lane))
    if offline is not None or unreachable:  # the head's facts decide DIST_INIT_ADDR for every rank
        head = recipe.world.head
        facts.setdefault(head, not_probed(head, offline or "not probed (not one of the hosts asked)"))
    manifests, specs = {}, {}
    for name in names:
        nf = facts[name]
        if nf.model_errors:
            raise SparkfleetError(
                f"{name}: cannot read the lane's models: {'; '.join(nf.model_errors)}",
                hint="is the NAS hub mounted on the node? (sparkfleet doctor " + name + ")",
            )
        probed = offline is None and name not in unreachable
        if recipe.fabric == "roce" and nf.fabric is None and probed:
            raise SparkfleetError(f"{name}: fabric detection failed: {nf.fabric_error}")
        if probed and in_container:
            check_kits(recipe, nf)
            check_display(recipe, nf)
            check_cache_seed(inv, recipe, nf)
        host = inv.host(name)
        manifests[name] = build_manifest(
            name, host.local_hub, host.nas_hub, nf.models, recipe.hub_mount if in_container else None
        )
    fabrics = {n: f.fabric for n, f in facts.items()}
    partial = offline is not None or bool(unreachable)
    for name in names:
        specs[name] = build_spec(
            inv, recipe, name, manifests[name], fabrics, built, fabric_unknown_ok=partial
        )
    unknown = {name: unknowns(inv, recipe, facts, name) for name in names} if partial else {}
    for name, missing in unknown.items():  # the command must not show a guess as a value either
        specs[name] = dataclasses.replace(specs[name], argv=_mark_unknown(specs[name], missing))
    return LanePlan(lane_name, recipe, facts, manifests, specs, unknown, unreachable)


def _mark_unknown(spec: LaunchSpec, missing: dict[str, str]) -> tuple[str, ...]:
    """argv with every value taken from an unknown env key written as `<KEY unknown>`."""
    argv = list(spec.argv)
    for key in missing:
        value = spec.env.get(key)
        if value is None:
            continue
        mark = f"<{key} unknown>"
        if value == "":
            argv = [mark if a == "" else a for a in argv]
        else:
            argv = [a.replace(value, mark) for a in argv]
    return tuple(argv)


DRY_RUN_WHY = "dry run: no host contacted"


def dry_run(inv: Inventory, lane_name: str) -> LanePlan:
    """The lane's plan from the inventory and recipe alone: every check `launch` runs first, no ssh.

    A lane whose image is a Nix build previews before any `image load`: the image is shown as not
    loaded (from the operator's record), never a reason to refuse the preview. So does a lane whose
    image pin is still a tag: shown as not resolved."""
    plan = prepare(inv, lane_name, offline=DRY_RUN_WHY)
    if plan.recipe.image_build and plan.recipe.runtime in ("docker", "podman"):
        ref, plan.image_note = planned_image(plan.recipe, list(plan.specs))
        plan.specs = {h: dataclasses.replace(s, image=s.image or ref) for h, s in plan.specs.items()}
    elif unresolved_image(plan.recipe):
        ref, plan.image_note = previewed_image(plan.recipe)
        plan.specs = {h: dataclasses.replace(s, image=ref) for h, s in plan.specs.items()}
    return plan


def planned_argv(spec: LaunchSpec) -> list[str]:
    """The full argv the rank's runtime would run: `docker|podman run ...`, else the serve command."""
    if spec.runtime not in ("docker", "podman"):
        return list(spec.argv)
    env_file = records.log_path(Path(spec.state_dir), spec.lane, spec.rank).with_suffix(".env")
    return container_run_argv(spec, spec.runtime, env_file)


def image_request(recipe: LaunchRecipe, host: Host, built: str) -> ImageStateRequest:
    """What the agent needs to say which image ID `host` holds for the lane."""
    return ImageStateRequest(lane=recipe.lane, state_dir=str(state_dir_of(host)), engine=recipe.runtime,
                             expect=built)  # fmt: skip


def lost_digest(built: str, state: dict) -> str | None:
    """The RepoDigest a host's engine lost while keeping the build's ID (None: not that case).

    `docker rmi REPO@DIGEST`, or a `docker load` of the same ID, leaves the ID and drops the digest
    the fleet registry gave it; `image load` pulls that digest again and no layer moves."""
    if state.get("recorded") == built and state.get("repo_digest_present") is False:
        return (state.get("record") or {}).get("repo_digest") or "(unrecorded)"
    return None


def image_mismatch(built: str, state: dict) -> str | None:
    """Why a host's image is not the build's (None when it is, and the engine still holds it)."""
    held = state.get("recorded")
    if held != built:
        return f"holds {held or 'no recorded image'}, the build is {built}"
    digest = lost_digest(built, state)
    if digest:
        return f"holds {held} but no longer its RepoDigest {digest} (the registry's name for it)"
    if not state.get("present"):
        return f"recorded {held} but the engine no longer has it"
    return None


def image_fix(lane: str, digest_lost: bool, again: str = "") -> str:
    """The command that makes a host hold the build again (doctor and launch name the same one);
    `again` names a replica (` --replica N`, replicas.replica_flag)."""
    fix = f"sparkfleet image load {lane}{again}"
    return f"{fix} (pulls the lost digest again: no layer moves)" if digest_lost else fix


def check_built_image(recipe: LaunchRecipe, built: str, states: dict[str, dict], again: str = "") -> None:
    """Refuse (before anything starts) when a host does not hold the build: another recorded ID,
    an image the engine dropped, or the build's ID without its registry RepoDigest (each named)."""
    bad = {h: why for h, st in states.items() if (why := image_mismatch(built, st))}
    if bad:
        lost = any(lost_digest(built, states[h]) for h in bad)
        raise SparkfleetError(
            f"lane {recipe.lane}: not every host holds the build of {recipe.image_build}: "
            + "; ".join(f"{h}: {why}" for h, why in sorted(bad.items())),
            hint=image_fix(recipe.lane, lost, again),
            exit_code=ExitCode.REFUSED,
        )
