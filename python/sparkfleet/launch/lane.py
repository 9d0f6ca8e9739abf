"""The controller side of a lane: probe every node, compute specs, start, wait, stop, report.

Facts → plan → action → record: `prepare` probes each node (fabric, staged/verified models)
through the agent and computes every rank's LaunchSpec with pure code, refusing a bad shape
before any node is touched; `launch` starts workers first and the head last (the head's
dist-init listener must find every worker dialling in), then waits for readiness and stops
the whole lane if it does not come up. Nodes are reached only through hosts.connect().
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SparkfleetError
from ..fabric import FabricFacts
from ..hosts import HostUnreachable, LocalHost, check_reachable, connect, remote_sparkfleet
from ..inventory import Host, Inventory
from ..jsonable import to_jsonable
from .manifest import BindManifest, ModelState, SnapshotFile, build_manifest
from .preflight import PreflightReport, ports_for_probe, preflight
from .readiness import RankExit, ReadyReport, wait_ready
from .recipe import LaunchRecipe, launch_recipe
from .spec import LaunchSpec, ShapeError, build_spec, check_env_extras, check_world, state_dir_of


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
        raise AgentError(f"{runner.name}: {answer.get('error')}", hint=answer.get("hint"))
    return answer


def _parallel(fn: Callable, items: list) -> list:
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(items)))) as pool:
        return list(pool.map(fn, items))


@dataclass
class NodeFacts:
    """What one node told us: fabric detection and model states (or why not)."""

    host: str
    fabric: FabricFacts | None
    fabric_error: str | None
    models: list[ModelState]
    model_errors: list[str] = field(default_factory=list)
    memory: dict | None = None  # MemoryFacts fields (sparkfleet.memory)
    memory_error: str | None = None
    ports_in_use: list[int] = field(default_factory=list)


@dataclass
class LanePlan:
    """Every rank's spec and manifest, computed before anything starts."""

    lane: str
    recipe: LaunchRecipe
    facts: dict[str, NodeFacts]
    manifests: dict[str, BindManifest]
    specs: dict[str, LaunchSpec]  # host -> spec

    def by_rank(self) -> list[LaunchSpec]:
        return sorted(self.specs.values(), key=lambda s: s.rank)


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


def _facts(host: str, answer: dict) -> NodeFacts:
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
    check_world(recipe.world, lane.hosts, str(lane.recipe_path))
    check_env_extras(recipe.env, str(lane.recipe_path))
    if recipe.runtime in ("docker", "podman") and recipe.image is not None and not recipe.image.resolved:
        raise ShapeError(
            f"lane {lane.name}: image pin {recipe.image.name} is not resolved ({recipe.image.value})",
            hint="a launch names images by full digest: run `sparkfleet pins resolve` first",
        )


def prepare(inv: Inventory, lane_name: str, hosts: list[str] | None = None) -> LanePlan:
    """Probe the lane's nodes (all, or `hosts`) and compute their specs; raise before starting anything."""
    recipe = launch_recipe(inv, lane_name)
    check_shape(inv, recipe)
    lane = inv.lane(lane_name)
    names = hosts or list(lane.hosts)
    in_container = recipe.runtime in ("docker", "podman")

    def probe_one(name: str) -> NodeFacts:
        host = inv.host(name)
        return _facts(name, call_agent(connect(host), "probe", probe_request(inv, recipe, host), timeout=600))

    facts = {f.host: f for f in _parallel(probe_one, names)}
    manifests, specs = {}, {}
    for name in names:
        nf = facts[name]
        if nf.model_errors:
            raise SparkfleetError(
                f"{name}: cannot read the lane's models: {'; '.join(nf.model_errors)}",
                hint="is the NAS hub mounted on the node? (sparkfleet doctor " + name + ")",
            )
        if recipe.fabric == "roce" and nf.fabric is None:
            raise SparkfleetError(f"{name}: fabric detection failed: {nf.fabric_error}")
        host = inv.host(name)
        manifests[name] = build_manifest(
            name, host.local_hub, host.nas_hub, nf.models, recipe.hub_mount if in_container else None
        )
    fabrics = {n: f.fabric for n, f in facts.items()}
    for name in names:
        specs[name] = build_spec(inv, recipe, name, manifests[name], fabrics)
    return LanePlan(lane_name, recipe, facts, manifests, specs)


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
            return [{"host": name, "stopped": False, "detail": exc.message}]

    return [r for rs in _parallel(stop_one, list(lane.hosts)) for r in rs]


def _exited_workers(inv: Inventory, plan: LanePlan) -> list[RankExit]:
    def check(spec: LaunchSpec) -> list[RankExit]:
        ans = call_agent(connect(inv.host(spec.host)), "status", _state_request(inv, plan.lane, spec.host))
        return [
            RankExit(spec.host, spec.rank, r["returncode"])
            for r in ans["ranks"]
            if r["record"]["rank"] == spec.rank and not r["running"]
        ]

    return [g for gs in _parallel(check, plan.by_rank()[1:]) for g in gs]


def launch(
    inv: Inventory,
    lane_name: str,
    wait: bool = True,
    keep_on_failure: bool = False,
    timeout_s: float | None = None,
    on_event: Callable[[str], None] = lambda _msg: None,
    canary: bool = True,
    allow_drift: bool = False,
    generations_root: Path | None = None,
) -> LaunchReport:
    """Prepare, pass the gates (memory, ports, drift, canary), start workers then head, wait for
    readiness, record the lane generation; on failure stop the lane (unless kept)."""
    plan = prepare(inv, lane_name)
    on_event(f"plan ok: {len(plan.specs)} ranks, runtime {plan.recipe.runtime}")
    running = [r for r in status(inv, lane_name)["ranks"] if r["running"]]
    if running:  # refuse before starting anything: a half-started relaunch would stop the live ranks
        where = ", ".join(f"rank {r['rank']} on {r['host']}" for r in running)
        raise SparkfleetError(
            f"lane {lane_name} is already running ({where})", hint=f"sparkfleet stop {lane_name}"
        )
    checks = preflight(inv, plan, call_agent, canary=canary, allow_drift=allow_drift, on_event=on_event)
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
        report = LaunchReport(lane_name, started, None, preflight=checks, boot_cache=boot_cache)
        report.generation = record_launch(inv, plan, report, generations_root or inv.root)
        return report
    head = plan.by_rank()[0]
    head_runner = connect(inv.host(head.host))

    def poll_head(offset: int) -> dict:
        req = _state_request(inv, lane_name, head.host, rank=0, offset=offset, port=head.port)
        return call_agent(head_runner, "watch", req)

    ready = wait_ready(
        lane=lane_name,
        signatures=plan.recipe.ready_signatures,
        weight_load_regex=plan.recipe.weight_load_regex,
        served_model_name=plan.recipe.served_model_name,
        poll_head=poll_head,
        exited_ranks=lambda: _exited_workers(inv, plan),
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
    report = LaunchReport(lane_name, started, ready, stopped, checks, boot_cache)
    report.generation = record_launch(inv, plan, report, generations_root or inv.root)
    return report


def status(inv: Inventory, lane_name: str) -> dict:
    """Per rank: running or not (and how it ended), plus the head's /health and /v1/models."""
    lane = inv.lane(lane_name)
    recipe = launch_recipe(inv, lane_name)
    ranks, errors = [], []

    def ask(name: str) -> dict:
        try:
            return call_agent(connect(inv.host(name)), "status", _state_request(inv, lane_name, name))
        except SparkfleetError as exc:
            return {"error": exc.message}

    for name, ans in zip(lane.hosts, _parallel(ask, list(lane.hosts)), strict=True):
        if "error" in ans:
            errors.append({"host": name, "error": ans["error"]})
            continue
        if ans.get("memstop"):
            errors.append({"host": name, "error": "memory watchdog: " + ans["memstop"]["reason"]})
        for r in ans["ranks"]:
            ranks.append({"host": name, "rank": r["record"]["rank"], "name": r["record"]["name"],
                          "running": r["running"], "returncode": r["returncode"], "detail": r["detail"],
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
            errors.append({"host": head, "error": exc.message})
    running = sum(1 for r in ranks if r["running"])
    return {
        "lane": lane_name,
        "ranks": sorted(ranks, key=lambda r: r["rank"]),
        "running": running,
        "expected": len(lane.hosts),
        "head": head,
        "port": recipe.port,
        "endpoints": health,
        "errors": errors,
    }


def logs(inv: Inventory, lane_name: str, host: str | None = None, lines: int = 50) -> dict[str, dict]:
    """host -> {rank: last lines} for the lane's ranks (on one host, or all)."""
    lane = inv.lane(lane_name)
    names = [host] if host else list(lane.hosts)
    if host and host not in lane.hosts:
        raise SparkfleetError(
            f"{host} is not in lane {lane_name}", hint=f"lane hosts: {', '.join(lane.hosts)}"
        )
    out = {}
    for name in names:
        ans = call_agent(connect(inv.host(name)), "logs", _state_request(inv, lane_name, name, lines=lines))
        out[name] = ans["logs"]
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
        raise SparkfleetError(
            f"no rank of {lane_name} recorded on {host}", hint=f"sparkfleet launch {lane_name}"
        )
    rec = ans["ranks"][0]["record"]
    if rec["runtime"] == "process":
        argv = ["tail", "-n", str(lines), "-F", rec["log_path"]]
    else:
        argv = [rec["runtime"], "logs", "--tail", str(lines), "-f", rec["container_id"]]
    return runner.stream(argv)


# Public names for the other controller rooms (watch, generations) that fan out over a lane's hosts.
parallel = _parallel
state_request = _state_request
