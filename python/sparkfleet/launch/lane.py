"""The controller side of a lane: probe every node, compute specs, start, wait, stop, report.

Facts → plan → action → record: `prepare` probes each node (fabric, staged/verified models)
through the agent and computes every rank's LaunchSpec with pure code, refusing a bad shape
before any node is touched; `launch` starts workers first and the head last (the head's
dist-init listener must find every worker dialling in), then waits for readiness and stops
the whole lane if it does not come up. Nodes are reached only through hosts.connect().
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ExitCode, SparkfleetError
from ..fabric import FabricFacts
from ..hosts import HostUnreachable, LocalHost, check_reachable, connect, fan_out, remote_sparkfleet
from ..inventory import Host, Inventory
from ..jsonable import to_jsonable
from ..lanekeys import ensure as ensure_lane_key
from .manifest import BindManifest, ModelState, SnapshotFile, build_manifest
from .preflight import PreflightReport, ports_for_probe, preflight
from .readiness import BootWatch, RankExit, RankProgress, ReadyReport, wait_ready
from .recipe import LaunchRecipe, launch_recipe
from .spec import LaunchSpec, ShapeError, build_spec, recipe_problems, state_dir_of


class AgentError(SparkfleetError):
    """The node-side agent refused or failed."""


def agent_argv(runner) -> list[str]:
    """The agent command on a node: this interpreter locally, else `<$SPARKFLEET_REMOTE> agent`."""
    if isinstance(runner, LocalHost):
        return [sys.executable, "-m", "sparkfleet.launch.agent"]
    return [*remote_sparkfleet(), "agent"]


def call_agent(runner, action: str, request: dict, timeout: float = 120) -> dict:
    """Run one agent action on a node and return its JSON answer (raising on ssh or agent errors)."""
    res = check_reachable(
        runner.run([*agent_argv(runner), action], input=json.dumps(request), timeout=timeout)
    )
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict) and res.returncode == 127:  # the remote shell found no such command
        raise AgentError(
            f"{runner.name}: sparkfleet is not installed there ({agent_argv(runner)[0]}: command not found)",
            hint=f"deploy it first: `sparkfleet bootstrap {runner.name}` once, then `deploy .#{runner.name}` "
            "(or set SPARKFLEET_REMOTE to how sparkfleet starts on the hosts)",
        )
    if not isinstance(answer, dict):
        err = (res.stderr.strip().splitlines() or ["no output"])[-1]
        if "Traceback" in res.stderr:
            raise AgentError(
                f"{runner.name}: sparkfleet agent {action} crashed: {err}",
                hint="a sparkfleet bug, or different sparkfleet versions on controller and node",
            )
        raise AgentError(
            f"{runner.name}: sparkfleet agent {action} failed (exit {res.returncode}): {err}",
            hint="is sparkfleet installed on the node? $SPARKFLEET_REMOTE names the remote command",
        )
    if not answer.get("ok"):
        raise AgentError(
            f"{runner.name}: {answer.get('error')}",
            hint=answer.get("hint"),
            exit_code=answer.get("exit_code"),
        )
    return answer


@dataclass
class NodeFacts:
    """What one node told us: fabric detection and model states (or why not)."""

    host: str
    fabric: FabricFacts | None
    fabric_error: str | None
    models: list[ModelState]
    model_errors: list[str] = field(default_factory=list)
    not_probed: str | None = None  # why the node was not asked (offline, dry run, unreachable)
    memory: dict | None = None  # MemoryFacts fields (sparkfleet.memory)
    memory_error: str | None = None
    ports_in_use: list[int] = field(default_factory=list)


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


def probe_request(inv: Inventory, recipe: LaunchRecipe, host: Host) -> dict:
    lane = inv.lane(recipe.lane)
    rank = recipe.world.ranks.get(host.name, 0)
    return {
        "memory": True,
        "ports": ports_for_probe(recipe, rank, recipe.world.nnodes),
        "fabric": {"needed": recipe.fabric == "roce", "fabric_ip": host.fabric_ip},
        "models": [
            {"repo": m.repo, "revision": m.revision, "include": list(m.include), "exclude": list(m.exclude)}
            for m in lane.models
        ],
        "local_hub": str(host.local_hub),
        "nas_hub": str(host.nas_hub),
    }


def node_facts(host: str, answer: dict) -> NodeFacts:
    """NodeFacts from an agent `probe` (or `doctor`) answer: shared by launch and doctor."""
    fabric = None
    if answer.get("fabric"):
        f = answer["fabric"]
        fabric = FabricFacts(f["fabric_ip"], tuple(f["hcas"]), int(f["gid_index"]), f["netdev"])
    err = answer.get("fabric_error")
    models, errors = [], []
    for m in answer.get("models", []):
        if "error" in m:
            errors.append(f"{m['repo']}: {m['error']}")
            continue
        models.append(
            ModelState(
                repo=m["repo"],
                commit=m["commit"],
                files=tuple(SnapshotFile(f["path"], f["excluded"]) for f in m["files"]),
                local_verified=m["local_verified"],
                bad_paths=tuple(m.get("bad_paths", ())),
                problems=tuple(m.get("problems", ())),
            )
        )
    return NodeFacts(
        host, fabric, f"{err['error']} ({err.get('hint')})" if err else None, models, errors,
        memory=answer.get("memory"), memory_error=answer.get("memory_error"),
        ports_in_use=list(answer.get("ports_in_use", [])),
    )  # fmt: skip


def check_shape(inv: Inventory, recipe: LaunchRecipe) -> None:
    """The checks that need no node: run before any ssh."""
    lane = inv.lane(recipe.lane)
    problems = recipe_problems(inv, recipe)
    if problems:
        raise problems[0][1]
    if recipe.runtime in ("docker", "podman") and recipe.image is not None and not recipe.image.resolved:
        raise ShapeError(
            f"lane {lane.name}: image pin {recipe.image.name} is not resolved "
            f"({recipe.image.value or f'tag {recipe.image.tag}, no digest'})",
            hint="a launch names images by full digest: run `sparkfleet pins resolve` first",
        )


def not_probed(host: str, why: str) -> NodeFacts:
    """The facts of a node we did not (or could not) ask: nothing known, and why."""
    return NodeFacts(host, None, None, [], not_probed=why)


def unknowns(inv: Inventory, recipe: LaunchRecipe, facts: dict[str, NodeFacts], host_name: str) -> dict:
    """{value: why} for what `host_name`'s spec lacks because a node was not probed."""
    from ..fabric import NODE_ENV_KEYS

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
    if nf.not_probed is None:
        return out
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
    return out


def prepare(
    inv: Inventory,
    lane_name: str,
    hosts: list[str] | None = None,
    offline: str | None = None,
    tolerate_unreachable: bool = False,
) -> LanePlan:
    """Probe the lane's nodes (all, or `hosts`) and compute their specs; raise before starting anything.

    `offline`: contact no node; the reason is what `unknown` says. `tolerate_unreachable`: a node
    that ssh cannot reach is planned as if offline and named in `unreachable` (the caller exits
    with ExitCode.UNREACHABLE after showing what could be derived).
    """
    recipe = launch_recipe(inv, lane_name)
    check_shape(inv, recipe)
    lane = inv.lane(lane_name)
    names = hosts or list(lane.hosts)
    for name in names:
        inv.host(name)
    in_container = recipe.runtime in ("docker", "podman")
    unreachable: dict[str, str] = {}
    built = None
    if in_container and recipe.image_build and offline is None:
        from ..images.load import built_image_id  # lazy: the images module imports this one

        built = built_image_id(recipe)
    answers: dict[str, dict] = {}

    def probe_one(name: str) -> NodeFacts:
        if offline is not None:
            return not_probed(name, offline)
        host = inv.host(name)
        req = probe_request(inv, recipe, host)
        if built:
            req["built_image"] = image_request(recipe, host, built)
        try:
            answers[name] = call_agent(connect(host), "probe", req, timeout=600)
        except HostUnreachable as exc:
            if not tolerate_unreachable:
                raise
            unreachable[name] = exc.message
            return not_probed(name, f"unreachable: {exc.message}")
        return node_facts(name, answers[name])

    facts = {f.host: f for f in fan_out(probe_one, names)}
    if built:
        check_built_image(recipe, built, {n: answers[n].get("image_state") or {} for n in answers})
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
    loaded (from the operator's record), never a reason to refuse the preview."""
    plan = prepare(inv, lane_name, offline=DRY_RUN_WHY)
    if plan.recipe.image_build and plan.recipe.runtime in ("docker", "podman"):
        from ..images.load import planned_image  # lazy: the images module imports this one

        ref, plan.image_note = planned_image(plan.recipe, list(plan.specs))
        plan.specs = {h: dataclasses.replace(s, image=s.image or ref) for h, s in plan.specs.items()}
    return plan


def planned_argv(spec: LaunchSpec) -> list[str]:
    """The full argv the rank's runtime would run: `docker|podman run ...`, else the serve command."""
    if spec.runtime not in ("docker", "podman"):
        return list(spec.argv)
    from . import records
    from .runtimes import container_run_argv

    env_file = records.log_path(Path(spec.state_dir), spec.lane, spec.rank).with_suffix(".env")
    return container_run_argv(spec, spec.runtime, env_file)


def image_request(recipe: LaunchRecipe, host: Host, built: str) -> dict:
    """What the agent needs to say which image ID `host` holds for the lane."""
    return {
        "lane": recipe.lane,
        "state_dir": str(state_dir_of(host)),
        "engine": recipe.runtime,
        "expect": built,
    }


def image_mismatch(built: str, state: dict) -> str | None:
    """Why a host's image is not the build's (None when it is, and the engine still holds it)."""
    held = state.get("recorded")
    if held != built:
        return f"holds {held or 'no recorded image'}, the build is {built}"
    if not state.get("present"):
        return f"recorded {held} but the engine no longer has it"
    return None


def check_built_image(recipe: LaunchRecipe, built: str, states: dict[str, dict]) -> None:
    """Refuse (before anything starts) when a host's recorded image ID is not the build's."""
    bad = {h: why for h, st in states.items() if (why := image_mismatch(built, st))}
    if bad:
        raise SparkfleetError(
            f"lane {recipe.lane}: image differs from the build of {recipe.image_build} on "
            + "; ".join(f"{h}: {why}" for h, why in sorted(bad.items())),
            hint=f"sparkfleet image load {recipe.lane}",
            exit_code=ExitCode.REFUSED,
        )


def _state_request(inv: Inventory, lane: str, host: str, **extra: Any) -> dict:
    return {"lane": lane, "state_dir": str(state_dir_of(inv.host(host))), **extra}


@dataclass
class StartedRank:
    host: str
    rank: int
    name: str
    pid: int | None
    container_id: str | None
    log_path: str
    receipts_cleared: list[str]


@dataclass
class LaunchReport:
    lane: str
    started: list[StartedRank]
    ready: ReadyReport | None
    stopped_after_failure: bool = False
    preflight: PreflightReport | None = None
    boot_cache: dict[str, dict] = field(default_factory=dict)  # host -> warm/cold, key, dir
    generation: dict | None = None  # the lane generation this launch recorded (launch/generations)
    nas_weights: dict[str, dict] = field(default_factory=dict)  # host -> non-optional NAS files (allowed)

    def weights_note(self) -> str:
        """The line "weights from NAS on dgx2 (10 files)" when --allow-nas-weights let such a rank through."""
        from .weights import weights_note

        return weights_note(self.nas_weights)


def stop(inv: Inventory, lane_name: str, timeout: float | None = None) -> list[dict]:
    """Stop what sparkfleet started for the lane on every host (all hosts at once)."""
    lane = inv.lane(lane_name)
    wait = timeout or 30.0

    def stop_one(name: str) -> list[dict]:
        try:
            req = _state_request(inv, lane_name, name, timeout=wait)
            ans = call_agent(connect(inv.host(name)), "stop", req, timeout=wait + 60)
            return [{"host": name, **s} for s in ans["stopped"]]
        except HostUnreachable as exc:
            return [{"host": name, "stopped": False, "unreachable": True, "detail": exc.message}]

    results = [r for rs in fan_out(stop_one, list(lane.hosts)) for r in rs]
    if any(r.get("was_running") for r in results) and all(r["stopped"] for r in results):
        from .generations import mark_stopped

        mark_stopped(inv.root, lane_name)  # history: this generation was stopped, not still "ready"
    return results


def _exited_workers(inv: Inventory, plan: LanePlan, boot: BootWatch, clock=time.monotonic) -> list[RankExit]:
    """Workers that stopped running; each worker's new log lines go to `boot` on the way."""

    def check(spec: LaunchSpec) -> list[RankExit]:
        req = _state_request(inv, plan.lane, spec.host, rank=spec.rank, offset=boot.offsets[spec.rank])
        ans = call_agent(connect(inv.host(spec.host)), "watch", req)
        if not ans.get("found", True):
            return [RankExit(spec.host, spec.rank, None)]
        boot.feed(spec.rank, ans, clock())
        return [] if ans.get("running", True) else [RankExit(spec.host, spec.rank, ans.get("returncode"))]

    return [g for gs in fan_out(check, plan.by_rank()[1:]) for g in gs]


class LaunchInterrupted(SparkfleetError):
    """Ctrl-C during a launch: which ranks still run, and how to stop them (or that they were stopped)."""

    exit_code = ExitCode.INTERRUPTED


def _interrupted(inv: Inventory, lane_name: str, stop_on_interrupt: bool, stop_s: float) -> LaunchInterrupted:
    if stop_on_interrupt:
        results = stop(inv, lane_name, stop_s)
        left = [r for r in results if not r["stopped"]]
        if not left:
            return LaunchInterrupted(f"interrupted: {lane_name} stopped (--stop-on-interrupt)")
        where = ", ".join(f"rank {r.get('rank', '?')} on {r['host']}" for r in left)
        return LaunchInterrupted(
            f"interrupted: {lane_name} did not stop everywhere: {where}", hint=f"sparkfleet stop {lane_name}"
        )
    running = [r for r in status(inv, lane_name)["ranks"] if r["running"]]
    if not running:
        return LaunchInterrupted(f"interrupted: no rank of {lane_name} is running")
    where = ", ".join(
        f"rank {r['rank']} on {r['host']} ({'pid ' + str(r['pid']) if r['pid'] else r['container_id']})"
        for r in running
    )
    return LaunchInterrupted(
        f"interrupted: {lane_name} ranks still running: {where}",
        hint=f"sparkfleet stop {lane_name} (or launch with --stop-on-interrupt)",
    )


def occupants(inv: Inventory, lane_name: str) -> dict[str, list[dict]]:
    """Other lanes with ranks running on this lane's hosts: other lane -> [{host, rank, name}]."""
    lane = inv.lane(lane_name)

    def ask(name: str) -> list[dict]:
        req = {"state_dir": str(state_dir_of(inv.host(name)))}
        return [{"host": name, **r} for r in call_agent(connect(inv.host(name)), "occupancy", req)["running"]]

    out: dict[str, list[dict]] = {}
    for r in (r for rs in fan_out(ask, list(lane.hosts)) for r in rs):
        if r["lane"] != lane_name:
            out.setdefault(r["lane"], []).append(r)
    return out


def check_occupancy(
    inv: Inventory, lane_name: str, replace: bool, on_event: Callable[[str], None] = lambda _m: None
) -> list[str]:
    """Refuse (REFUSED) when another lane's ranks run on this lane's hosts, naming that lane; with
    `replace`, stop those lanes first. Returns the lanes stopped."""
    taken = occupants(inv, lane_name)
    if taken and not replace:
        lines = "; ".join(
            f"lane {other} (" + ", ".join(f"rank {r['rank']} on {r['host']}" for r in rs) + ")"
            for other, rs in sorted(taken.items())
        )
        first = sorted(taken)[0]
        raise SparkfleetError(
            f"{lane_name}'s hosts are occupied by {lines}",
            hint=f"sparkfleet stop {first}, or sparkfleet launch {lane_name} --replace",
            exit_code=ExitCode.REFUSED,
        )
    for other in sorted(taken):
        if other in inv.lanes:
            results = stop(inv, other)
        else:  # a lane no longer in the inventory: stop it where its records are
            results = []
            for host in sorted({r["host"] for r in taken[other]}):
                req = _state_request(inv, other, host)
                results += call_agent(connect(inv.host(host)), "stop", req, timeout=120)["stopped"]
        if not all(r["stopped"] for r in results):
            raise SparkfleetError(
                f"--replace: lane {other} did not stop", hint=f"sparkfleet status {other}",
                exit_code=ExitCode.REFUSED,
            )  # fmt: skip
        on_event(f"replaced lane {other}: stopped its ranks on this lane's hosts")
    return sorted(taken)


def launch(
    inv: Inventory,
    lane_name: str,
    wait: bool = True,
    keep_on_failure: bool = False,
    timeout_s: float | None = None,
    on_event: Callable[[str], None] = lambda _msg: None,
    replace: bool = False,
    on_progress: Callable[[list[RankProgress]], None] = lambda _p: None,
    stop_on_interrupt: bool = False,
    canary: bool = True,
    allow_drift: bool = False,
    generations_root: Path | None = None,
    allow_nas_weights: bool = False,
) -> LaunchReport:
    """Prepare, pass the gates (occupancy, memory, ports, drift, canary), start workers then head,
    wait for readiness, record the lane generation; on failure stop the lane (unless kept).

    Another lane's ranks on these hosts refuse the launch, naming it, unless `replace`.
    `on_progress` gets every rank's boot stage, elapsed time, weight-load progress and last log
    line at each poll. Ctrl-C raises LaunchInterrupted naming the ranks still running (or stops
    them first with `stop_on_interrupt`)."""
    gates = Gates(replace, canary, allow_drift, generations_root, allow_nas_weights)
    try:
        return _launch(inv, lane_name, wait, keep_on_failure, timeout_s, on_event, gates, on_progress)
    except KeyboardInterrupt:
        recipe = launch_recipe(inv, lane_name)
        raise _interrupted(inv, lane_name, stop_on_interrupt, recipe.timeouts.stop_s) from None


@dataclass(frozen=True)
class Gates:
    """What a launch checks before it starts a rank, and where it records the generation."""

    replace: bool = False  # stop another lane occupying these hosts instead of refusing
    canary: bool = True  # run the fabric canary
    allow_drift: bool = False  # launch on a host whose stack drifted from fleet.toml
    generations_root: Path | None = None
    allow_nas_weights: bool = False  # serve a rank whose non-optional weights bind from the NAS


def _launch(
    inv: Inventory,
    lane_name: str,
    wait: bool,
    keep_on_failure: bool,
    timeout_s: float | None,
    on_event: Callable[[str], None],
    gates: Gates,
    on_progress: Callable[[list[RankProgress]], None],
) -> LaunchReport:
    plan = prepare(inv, lane_name)
    on_event(f"plan ok: {len(plan.specs)} ranks, runtime {plan.recipe.runtime}")
    from .weights import check_local_weights, host_weights

    weights = {h: host_weights(m, plan.facts[h].models) for h, m in plan.manifests.items()}
    nas_weights = check_local_weights(lane_name, weights, gates.allow_nas_weights, on_event)
    running = [r for r in status(inv, lane_name)["ranks"] if r["running"] or r.get("orphan_pid")]
    if running:  # refuse before starting anything: a half-started relaunch would stop the live ranks
        where = ", ".join(
            f"rank {r['rank']} on {r['host']}" + (f": {r['detail']}" if r.get("orphan_pid") else "")
            for r in running
        )
        if not gates.replace:
            raise SparkfleetError(
                f"lane {lane_name} is already running ({where})",
                hint=f"sparkfleet stop {lane_name}, or sparkfleet launch {lane_name} --replace (relaunch)",
            )
        # --replace relaunches the lane itself too (after a recipe edit: one command)
        if not all(r["stopped"] for r in stop(inv, lane_name, plan.recipe.timeouts.stop_s)):
            raise SparkfleetError(
                f"--replace: lane {lane_name} did not stop", hint=f"sparkfleet status {lane_name}"
            )
        on_event(f"replaced the running {lane_name} ({where}): stopped it to relaunch")
        plan = prepare(inv, lane_name)  # its ports and memory are free now: probe again
    check_occupancy(inv, lane_name, gates.replace, on_event)
    checks = preflight(
        inv, plan, call_agent, canary=gates.canary, allow_drift=gates.allow_drift, on_event=on_event
    )
    if ensure_lane_key(inv, lane_name, call_agent).created:  # no lane serves without a key
        on_event(f"API key created for {lane_name} on {', '.join(inv.lane(lane_name).hosts)}")
    started: list[StartedRank] = []
    boot_cache: dict[str, dict] = {}
    watchdog = {"floor": plan.recipe.memory.floor, "interval": plan.recipe.memory.interval_s}
    try:
        for spec in reversed(plan.by_rank()):  # workers first, head last
            req = {"spec": to_jsonable(spec), "watchdog": watchdog}
            ans = call_agent(connect(inv.host(spec.host)), "start", req)
            if ans.get("boot_cache"):
                boot_cache[spec.host] = ans["boot_cache"]
            rec = ans["record"]
            cleared = [r["path"] for r in ans["receipts"] if r["existed"]]
            started.append(
                StartedRank(
                    spec.host,
                    spec.rank,
                    spec.name,
                    rec.get("pid"),
                    rec.get("container_id"),
                    rec["log_path"],
                    cleared,
                )
            )
            on_event(f"started rank {spec.rank} on {spec.host} ({spec.name})")
    except SparkfleetError:
        if started:
            stop(inv, lane_name, plan.recipe.timeouts.stop_s)
        raise
    from .generations import record_launch

    if not wait:
        report = LaunchReport(
            lane_name, started, None, preflight=checks, boot_cache=boot_cache, nas_weights=nas_weights
        )
        report.generation = record_launch(inv, plan, report, gates.generations_root or inv.root)
        return report
    head = plan.by_rank()[0]
    head_runner = connect(inv.host(head.host))
    boot = BootWatch(
        [(s.host, s.rank) for s in plan.by_rank()], plan.recipe.ready_signatures, time.monotonic()
    )

    def poll_head(offset: int) -> dict:
        req = _state_request(inv, lane_name, head.host, rank=0, offset=offset, port=head.port)
        ans = call_agent(head_runner, "watch", req)
        boot.feed(0, ans, time.monotonic())
        on_progress(boot.snapshot(time.monotonic()))
        return ans

    def exited() -> list[RankExit]:
        gone = _exited_workers(inv, plan, boot)
        on_progress(boot.snapshot(time.monotonic()))
        return gone

    ready = wait_ready(
        lane=lane_name,
        signatures=plan.recipe.ready_signatures,
        weight_load_regex=plan.recipe.weight_load_regex,
        served_model_name=plan.recipe.served_model_name,
        poll_head=poll_head,
        exited_ranks=exited,
        timeout_s=timeout_s or plan.recipe.timeouts.ready_s,
        poll_s=plan.recipe.timeouts.poll_s,
        head_host=head.host,
    )
    if not ready.ok and ready.failed is not None and ready.failed.rank != 0:
        tail = logs(inv, lane_name, ready.failed.host, lines=40).get(ready.failed.host, {})
        ready.tail = str(tail.get(str(ready.failed.rank), "")).splitlines()
    stopped = False
    if not ready.ok and not keep_on_failure:
        stop(inv, lane_name, plan.recipe.timeouts.stop_s)
        stopped = True
    report = LaunchReport(lane_name, started, ready, stopped, checks, boot_cache, nas_weights=nas_weights)
    report.generation = record_launch(inv, plan, report, gates.generations_root or inv.root)
    return report


def status(inv: Inventory, lane_name: str, generations_root: Path | None = None) -> dict:
    """Per rank: running or not (and how it ended), plus the head's /health and /v1/models, and
    "weights from NAS on HOST (N files)" when the serving generation was let through that way."""
    lane = inv.lane(lane_name)
    recipe = launch_recipe(inv, lane_name)
    ranks, errors = [], []

    def ask(name: str) -> dict:
        try:
            return call_agent(connect(inv.host(name)), "status", _state_request(inv, lane_name, name))
        except HostUnreachable as exc:  # a Spark that is off looks like this too
            return {"error": f"powered off or unreachable: {exc.message}", "code": int(exc.exit_code)}
        except SparkfleetError as exc:
            return {"error": exc.message, "code": int(exc.exit_code)}

    for name, ans in zip(lane.hosts, fan_out(ask, list(lane.hosts)), strict=True):
        if "error" in ans:
            errors.append({"host": name, "error": ans["error"], "code": ans["code"]})
            continue
        if ans.get("memstop"):
            errors.append({"host": name, "error": "memory watchdog: " + ans["memstop"]["reason"]})
        for r in ans["ranks"]:
            ranks.append({"host": name, "rank": r["record"]["rank"], "name": r["record"]["name"],
                          "running": r["running"], "returncode": r["returncode"], "detail": r["detail"],
                          "orphan_pid": r.get("orphan_pid"),
                          "pid": r["record"].get("pid"), "container_id": r["record"].get("container_id"),
                          "started_at": r["record"]["started_at"]})  # fmt: skip
    head = recipe.world.head
    health = None
    if any(r["rank"] == 0 and r["running"] for r in ranks):
        try:
            ans = call_agent(
                connect(inv.host(head)), "watch", _state_request(inv, lane_name, head, rank=0, offset=0,
                                                                max_bytes=0, port=recipe.port)
            )  # fmt: skip
            health = {"health": ans.get("health"), "models_status": ans.get("models_status"),
                      "models": ans.get("models", [])}  # fmt: skip
        except SparkfleetError as exc:
            errors.append({"host": head, "error": exc.message, "code": int(exc.exit_code)})
    running = sum(1 for r in ranks if r["running"])
    from .generations import current
    from .weights import weights_note

    gen = current(generations_root or inv.root, lane_name) if running else None
    return {
        "weights": weights_note((gen or {}).get("nas_weights")),
        "lane": lane_name,
        "ok": running == len(lane.hosts) and not errors,
        "ranks": sorted(ranks, key=lambda r: r["rank"]),
        "running": running,
        "expected": len(lane.hosts),
        "head": head,
        "port": recipe.port,
        "endpoints": health,
        "errors": errors,
    }


def logs(
    inv: Inventory, lane_name: str, host: str | None = None, lines: int = 50, answers: bool = False
) -> dict[str, dict]:
    """host -> {rank: last lines} for the lane's ranks (on one host, or all): the running run's, else
    the last stopped run's. `answers`: host -> the agent's whole answer (`logs`, `stopped`, `log_paths`)."""
    lane = inv.lane(lane_name)
    names = [host] if host else list(lane.hosts)
    if host and host not in lane.hosts:
        raise SparkfleetError(
            f"{host} is not in lane {lane_name}", hint=f"lane hosts: {', '.join(lane.hosts)}"
        )
    out = {}
    for name in names:
        ans = call_agent(connect(inv.host(name)), "logs", _state_request(inv, lane_name, name, lines=lines))
        out[name] = ans if answers else ans["logs"]
    return out


def follow(inv: Inventory, lane_name: str, host: str, lines: int = 20):
    """Context manager yielding the live log lines of `host`'s rank (tail -F / docker logs -f)."""
    lane = inv.lane(lane_name)
    if host not in lane.hosts:
        raise SparkfleetError(
            f"{host} is not in lane {lane_name}", hint=f"lane hosts: {', '.join(lane.hosts)}"
        )
    runner = connect(inv.host(host))
    ans = call_agent(runner, "status", _state_request(inv, lane_name, host))
    if not ans["ranks"]:
        last = call_agent(runner, "logs", _state_request(inv, lane_name, host, lines=0))
        if last.get("stopped"):
            raise SparkfleetError(
                f"{lane_name} is not running on {host}: nothing to follow",
                hint=f"`sparkfleet logs {lane_name} {host}` shows the last run's log",
                exit_code=ExitCode.SHORTFALL,
            )
        raise SparkfleetError(
            f"no rank of {lane_name} recorded on {host}", hint=f"sparkfleet launch {lane_name}"
        )
    rec = ans["ranks"][0]["record"]
    if rec["runtime"] == "process":
        argv = ["tail", "-n", str(lines), "-F", rec["log_path"]]
    else:
        argv = [rec["runtime"], "logs", "--tail", str(lines), "-f", rec["container_id"]]
    return runner.stream(argv)


# Public name for the other controller rooms (watch, generations) that ask a lane's hosts.
state_request = _state_request
