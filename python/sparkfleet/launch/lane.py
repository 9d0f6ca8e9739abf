"""The lane's lifecycle: launch, stop, status, logs — on a plan, through the node agent.

Plan → gates → action → record: `launch` takes the plan (`plan.prepare`), passes the gates
(`preflight`), starts workers first and the head last (the head's dist-init listener must find
every worker dialling in), then waits for readiness and stops the whole lane if it does not come
up; the generation is recorded either way. Nodes are reached only through hosts.connect() and
the agent client (`nodecall`).

Each step works on the lane resolved once (`LaneRun`: `launch_lane`, `stop_lane`, `lane_status`,
`lane_logs`, `follow_lane`); `launch`, `stop`, `status`, `logs` and `follow` resolve it for a caller
that holds the inventory and a lane's name, and hand it down.
"""

from __future__ import annotations

import getpass
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import ExitCode, SparkfleetError
from ..base.jsonable import to_jsonable
from ..base.lock import exclusive
from ..fleet.inventory import Inventory, state_dir_of
from ..lane.readiness import BootWatch, RankExit, RankProgress, wait_ready
from ..lane.spec import LaunchSpec
from ..lane.weights import check_local_weights, host_weights, weights_note
from ..node.protocol import (
    LogsRequest,
    OccupancyRequest,
    StartRequest,
    StatusRequest,
    StopRequest,
    WatchdogSettings,
    WatchRequest,
)
from ..remote.hosts import HostUnreachable, connect, fan_out
from ..remote.nodecall import ask, ask_host, call_agent, lane_request
from ..remote.wire import ErrorKind
from .generations import current, generations_dir, mark_stopped, record_launch
from .lanekeys import ensure as ensure_lane_key
from .lanerun import LaneRun, lane_run
from .plan import LanePlan, kits_request, prepare
from .preflight import preflight
from .report import LaneStatus, LaunchReport, RankStatus, StartedRank

LAUNCH_LOCK = ".launch.lock"  # in the lane's generations folder, beside the generations' own .lock
BUSY_HINT = "wait for it to finish (`sparkfleet status LANE` shows its ranks as they start)"


def stopped_by(verb: str) -> str:
    """Who stops a lane, as `status` says it later: the verb and the user on this machine."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's uid)
        user = str(os.getuid())
    return f"{verb} ({user}@{socket.gethostname().split('.')[0]})"


def stop(
    inv: Inventory,
    lane_name: str,
    timeout: float | None = None,
    generations_root: Path | None = None,
    by: str = "sparkfleet",
) -> list[dict]:
    """`stop_lane` of the lane as `inv` has it (its generations under `generations_root`)."""
    run = lane_run(inv, lane_name, generations_root)
    return stop_lane(run, timeout, by)


def stop_lane(run: LaneRun, timeout: float | None = None, by: str = "sparkfleet") -> list[dict]:
    """Stop what sparkfleet started for the lane on every host (all hosts at once); its newest
    generation (in `run.home`, a replica's own) is marked stopped. `by` names the verb that stopped
    it, for `status` to say (with the user and machine)."""
    inv, lane_name = run.inv, run.name
    wait = timeout or 30.0
    who = stopped_by(by)

    def stop_one(name: str) -> list[dict]:
        try:
            req = lane_request(StopRequest, inv, lane_name, name, timeout=wait, by=who)
            ans = ask_host(inv, name, req, timeout=wait + 60)
            return [{"host": name, **s} for s in ans["stopped"]]
        except HostUnreachable as exc:
            return [{"host": name, "stopped": False, "unreachable": True, "detail": exc.message}]

    results = [r for rs in fan_out(stop_one, list(run.hosts)) for r in rs]
    if results and all(r["stopped"] for r in results):
        # history: this generation was stopped, not still "ready" (a replica's in its own folder);
        # a lane whose ranks had crashed is stopped too: the operator no longer wants it running,
        # and the fleet view's lane-down alert (wanted and not up) must hear that
        mark_stopped(run.home, lane_name)
    return results


def _exited_workers(run: LaneRun, plan: LanePlan, boot: BootWatch, clock=time.monotonic) -> list[RankExit]:
    """Workers that stopped running; each worker's new log lines go to `boot` on the way."""
    inv = run.inv

    def check(spec: LaunchSpec) -> list[RankExit]:
        offset = boot.offsets[spec.rank]
        req = lane_request(WatchRequest, inv, plan.lane, spec.host, rank=spec.rank, offset=offset)
        ans = ask_host(inv, spec.host, req)
        if not ans.get("found", True):
            return [RankExit(spec.host, spec.rank, None)]
        boot.feed(spec.rank, ans, clock())
        return [] if ans.get("running", True) else [RankExit(spec.host, spec.rank, ans.get("returncode"))]

    return [g for gs in fan_out(check, plan.by_rank()[1:]) for g in gs]


class LaunchInterrupted(SparkfleetError):
    """Ctrl-C during a launch: which ranks still run, and how to stop them (or that they were stopped)."""

    exit_code = ExitCode.INTERRUPTED


def _interrupted(run: LaneRun, stop_on_interrupt: bool) -> LaunchInterrupted:
    lane_name = run.name
    if stop_on_interrupt:
        results = stop_lane(run, run.recipe.timeouts.stop_s, by="sparkfleet launch (Ctrl-C)")
        left = [r for r in results if not r["stopped"]]
        if not left:
            return LaunchInterrupted(f"interrupted: {lane_name} stopped (--stop-on-interrupt)")
        where = ", ".join(f"rank {r.get('rank', '?')} on {r['host']}" for r in left)
        return LaunchInterrupted(
            f"interrupted: {lane_name} did not stop everywhere: {where}", hint=f"sparkfleet stop {lane_name}"
        )
    running = [r for r in lane_status(run).ranks if r.running]
    if not running:
        return LaunchInterrupted(f"interrupted: no rank of {lane_name} is running")
    where = ", ".join(
        f"rank {r.rank} on {r.host} ({'pid ' + str(r.pid) if r.pid else r.container_id})" for r in running
    )
    return LaunchInterrupted(
        f"interrupted: {lane_name} ranks still running: {where}",
        hint=f"sparkfleet stop {lane_name} (or launch with --stop-on-interrupt)",
    )


def occupants(run: LaneRun) -> dict[str, list[dict]]:
    """Other lanes with ranks running on this lane's hosts: other lane -> [{host, rank, name}]."""
    inv, lane_name = run.inv, run.name

    def ask(name: str) -> list[dict]:
        req = OccupancyRequest(state_dir=str(state_dir_of(inv.host(name))))
        return [{"host": name, **r} for r in ask_host(inv, name, req)["running"]]

    out: dict[str, list[dict]] = {}
    for r in (r for rs in fan_out(ask, list(run.hosts)) for r in rs):
        if r["lane"] != lane_name:
            out.setdefault(r["lane"], []).append(r)
    return out


def check_occupancy(
    run: LaneRun, replace: bool, on_event: Callable[[str], None] = lambda _m: None
) -> list[str]:
    """Refuse (REFUSED) when another lane's ranks run on this lane's hosts, naming that lane; with
    `replace`, stop those lanes first. Returns the lanes stopped."""
    inv, lane_name = run.inv, run.name
    taken = occupants(run)
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
            results = stop_lane(lane_run(inv, other), by=f"sparkfleet launch {lane_name} --replace")
        else:  # a lane no longer in the inventory: stop it where its records are
            results = []
            for host in sorted({r["host"] for r in taken[other]}):
                req = lane_request(StopRequest, inv, other, host)
                results += ask_host(inv, host, req, timeout=120)["stopped"]
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
    them first with `stop_on_interrupt`). The lane is the one `inv` has (a replica's view runs
    that copy); its generation is recorded under `generations_root`, else where its copy records."""
    gates = Gates(replace, canary, allow_drift, allow_nas_weights, stop_on_interrupt)
    run = lane_run(inv, lane_name, generations_root)
    return launch_lane(run, gates, wait, keep_on_failure, timeout_s, on_event, on_progress)


def launch_lane(
    run: LaneRun,
    gates: Gates,
    wait: bool = True,
    keep_on_failure: bool = False,
    timeout_s: float | None = None,
    on_event: Callable[[str], None] = lambda _msg: None,
    on_progress: Callable[[list[RankProgress]], None] = lambda _p: None,
) -> LaunchReport:
    """`launch` of a resolved lane: one at a time per generations folder; Ctrl-C as `launch` says."""
    try:
        # One launch of a lane at a time from this fleet root: a second one, started while the first
        # still passes its gates or boots, would otherwise race it (and fail on whatever it met first).
        with exclusive(generations_dir(run.home, run.name) / LAUNCH_LOCK, f"launch of {run.name}", BUSY_HINT):
            return _launch(run, wait, keep_on_failure, timeout_s, on_event, gates, on_progress)
    except KeyboardInterrupt:
        raise _interrupted(run, gates.stop_on_interrupt) from None


@dataclass(frozen=True)
class Gates:
    """What a launch checks before it starts a rank, and what it does on Ctrl-C."""

    replace: bool = False  # stop another lane occupying these hosts instead of refusing
    canary: bool = True  # run the fabric canary
    allow_drift: bool = False  # launch on a host whose stack drifted from fleet.toml
    allow_nas_weights: bool = False  # serve a rank whose non-optional weights bind from the NAS
    stop_on_interrupt: bool = False  # on Ctrl-C, stop the ranks already started


def _launch(
    run: LaneRun,
    wait: bool,
    keep_on_failure: bool,
    timeout_s: float | None,
    on_event: Callable[[str], None],
    gates: Gates,
    on_progress: Callable[[list[RankProgress]], None],
) -> LaunchReport:
    inv, lane_name = run.inv, run.name
    plan = prepare(inv, lane_name, recipe=run.recipe)
    on_event(f"plan ok: {len(plan.specs)} ranks, runtime {plan.recipe.runtime}")
    weights = {h: host_weights(m, plan.facts[h].models) for h, m in plan.manifests.items()}
    nas_weights = check_local_weights(lane_name, weights, gates.allow_nas_weights, on_event)
    running = [r for r in lane_status(run).ranks if r.running or r.orphan_pid]
    if running:  # refuse before starting anything: a half-started relaunch would stop the live ranks
        where = ", ".join(
            f"rank {r.rank} on {r.host}" + (f": {r.detail}" if r.orphan_pid else "") for r in running
        )
        if not gates.replace:
            again = run.again
            raise SparkfleetError(
                f"lane {lane_name} is already running ({where})",
                hint=f"sparkfleet stop {lane_name}{again}, "
                f"or sparkfleet launch {lane_name}{again} --replace (relaunch)",
                exit_code=ExitCode.REFUSED,  # an occupied host, as when another lane holds it
            )
        # --replace relaunches the lane itself too (after a recipe edit: one command)
        replaced = stop_lane(run, plan.recipe.timeouts.stop_s, by="sparkfleet launch --replace")
        if not all(r["stopped"] for r in replaced):
            raise SparkfleetError(
                f"--replace: lane {lane_name} did not stop", hint=f"sparkfleet status {lane_name}"
            )
        on_event(f"replaced the running {lane_name} ({where}): stopped it to relaunch")
        plan = prepare(inv, lane_name, recipe=run.recipe)  # its ports and memory are free now: probe again
    check_occupancy(run, gates.replace, on_event)
    checks = preflight(
        inv, plan, call_agent, canary=gates.canary, allow_drift=gates.allow_drift, on_event=on_event
    )
    if ensure_lane_key(inv, lane_name, call_agent).created:  # no lane serves without a key
        on_event(f"API key created for {lane_name} on {', '.join(run.hosts)}")
    started: list[StartedRank] = []
    boot_cache: dict[str, dict] = {}
    seeded_caches: dict[str, dict] = {}
    watchdog = WatchdogSettings(plan.recipe.memory.floor, plan.recipe.memory.interval_s)
    try:
        for spec in reversed(plan.by_rank()):  # workers first, head last
            kits = kits_request(inv, plan.recipe, inv.host(spec.host))
            ans = ask_host(inv, spec.host, StartRequest(to_jsonable(spec), watchdog, kits))
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
            if seeded := ans.get("cache_seed"):  # [launch.cache_seed]: what the serve's /cache got
                asset = spec.cache_seed.asset if spec.cache_seed else "the kit's kernel cache"
                seeded_caches[spec.host] = {"asset": asset, **seeded}
                on_event(
                    f"seeded {spec.host}:{spec.cache_dir} from {asset}: {seeded['copied']} of "
                    f"{seeded['files']} files copied, {seeded['kept']} already there"
                )
            on_event(f"started rank {spec.rank} on {spec.host} ({spec.name})")
    except SparkfleetError:
        if started:
            stop_lane(run, plan.recipe.timeouts.stop_s, by="sparkfleet launch (a rank failed)")
        raise
    notes = supervisor_notes(run)
    if not wait:
        report = LaunchReport(
            lane_name, started, None, preflight=checks, boot_cache=boot_cache, nas_weights=nas_weights,
            notes=notes, cache_seed=seeded_caches,
        )
        report.generation = record_launch(run, plan, report)
        return report
    head = plan.by_rank()[0]
    head_runner = connect(inv.host(head.host))
    boot = BootWatch(
        [(s.host, s.rank) for s in plan.by_rank()], plan.recipe.ready_signatures, time.monotonic()
    )

    def poll_head(offset: int) -> dict:
        req = lane_request(WatchRequest, inv, lane_name, head.host, rank=0, offset=offset, port=head.port)
        ans = ask(head_runner, req)
        boot.feed(0, ans, time.monotonic())
        on_progress(boot.snapshot(time.monotonic()))
        return ans

    def exited() -> list[RankExit]:
        gone = _exited_workers(run, plan, boot)
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
        tail = lane_logs(run, ready.failed.host, lines=40).get(ready.failed.host, {})
        ready.tail = str(tail.get(str(ready.failed.rank), "")).splitlines()
    stopped = False
    if not ready.ok and not keep_on_failure:
        stop_lane(run, plan.recipe.timeouts.stop_s, by="sparkfleet launch (not ready)")
        stopped = True
    report = LaunchReport(
        lane_name, started, ready, stopped, checks, boot_cache, nas_weights=nas_weights, notes=notes,
        cache_seed=seeded_caches,
    )
    report.generation = record_launch(run, plan, report)
    return report


def supervisor_notes(run: LaneRun) -> list[str]:
    """A lane whose recipe says `[watchdog] scope = "lane"` is stopped whole by its supervisor
    (`watch`, or `status`), never by a node, which sees only itself (launch/lanestop.py). The
    kit's own launcher always runs its controller beside the pair; a launch by hand does not, so
    it says what to run (a deployed lane's sparkfleet-watch-LANE unit runs it)."""
    if run.recipe.watchdog_scope != "lane":
        return []
    cmd = f"sparkfleet watch {run.name}{run.again}"
    return [
        f"watchdog scope = lane: run `{cmd}` beside this lane (a deployed lane's watch unit does); "
        "it is what stops every rank when one stops"
    ]


def host_error(host: str, exc: SparkfleetError) -> dict:
    """A LaneStatus error for a host whose agent could not answer: {host, error, code, kind}."""
    if isinstance(exc, HostUnreachable):  # a Spark that is off looks like this too
        error, kind = f"powered off or unreachable: {exc.message}", ErrorKind.UNREACHABLE
    else:
        error, kind = exc.message, getattr(exc, "kind", ErrorKind.REFUSED)
    return {"host": host, "error": error, "code": int(exc.exit_code), "kind": kind}


def status(inv: Inventory, lane_name: str, generations_root: Path | None = None) -> LaneStatus:
    """`lane_status` of the lane as `inv` has it (its generations under `generations_root`)."""
    run = lane_run(inv, lane_name, generations_root)
    return lane_status(run)


def lane_status(run: LaneRun) -> LaneStatus:
    """Per rank: running or not (and how it ended), plus the head's /health and /v1/models, and
    "weights from NAS on HOST (N files)" when the serving generation was let through that way."""
    inv, lane_name, lane, recipe = run.inv, run.name, run.lane, run.recipe
    ranks: list[RankStatus] = []
    errors: list[dict] = []

    def ask_one(name: str) -> dict | SparkfleetError:
        try:
            return ask_host(inv, name, lane_request(StatusRequest, inv, lane_name, name))
        except SparkfleetError as exc:
            return exc

    ended: list[dict] = []
    for name, ans in zip(lane.hosts, fan_out(ask_one, list(lane.hosts)), strict=True):
        if isinstance(ans, SparkfleetError):
            errors.append(host_error(name, ans))
            continue
        for last in ans.get("last", []):  # nothing recorded now: how the last run ended there
            rec, note = last["record"], last.get("stopped") or {}
            ended.append({"host": name, "rank": rec["rank"], "name": rec["name"],
                          "started_at": rec["started_at"], "stopped_at": note.get("at"),
                          "stopped_by": note.get("by"), "detail": note.get("detail")})  # fmt: skip
        if ans.get("memstop"):  # the kind is what readers test (to_dict leaves it out of the JSON)
            errors.append({"host": name, "error": "memory watchdog: " + ans["memstop"]["reason"],
                           "kind": ErrorKind.MEMSTOP})  # fmt: skip
        for r in ans["ranks"]:
            rec = r["record"]
            ranks.append(RankStatus(name, rec["rank"], rec["name"], r["running"], r["returncode"],
                                    r["detail"], r.get("orphan_pid"), rec.get("pid"),
                                    rec.get("container_id"), rec["started_at"]))  # fmt: skip
    head = recipe.world.head
    health = None
    if any(r.rank == 0 and r.running for r in ranks):
        try:
            req = lane_request(WatchRequest, inv, lane_name, head, rank=0, offset=0, max_bytes=0,
                               port=recipe.port)  # fmt: skip
            ans = ask_host(inv, head, req)
            health = {"health": ans.get("health"), "models_status": ans.get("models_status"),
                      "models": ans.get("models", [])}  # fmt: skip
        except SparkfleetError as exc:
            errors.append(host_error(head, exc))
    running = sum(1 for r in ranks if r.running)
    gen = current(run.home, lane_name) if running else None
    return LaneStatus(
        weights=weights_note((gen or {}).get("nas_weights")),
        lane=lane_name,
        ok=running == len(lane.hosts) and not errors,
        ranks=sorted(ranks, key=lambda r: r.rank),
        running=running,
        expected=len(lane.hosts),
        head=head,
        port=recipe.port,
        endpoints=health,
        errors=errors,
        ended=sorted(ended, key=lambda e: e["rank"]) if not ranks else [],
    )


def logs(
    inv: Inventory, lane_name: str, host: str | None = None, lines: int = 50, answers: bool = False
) -> dict[str, dict]:
    """`lane_logs` of the lane as `inv` has it."""
    run = lane_run(inv, lane_name)
    return lane_logs(run, host, lines, answers)


def lane_logs(
    run: LaneRun, host: str | None = None, lines: int = 50, answers: bool = False
) -> dict[str, dict]:
    """host -> {rank: last lines} for the lane's ranks (on one host, or all): the running run's, else
    the last stopped run's. `answers`: host -> the agent's whole answer (`logs`, `stopped`, `log_paths`)."""
    inv, lane_name, lane = run.inv, run.name, run.lane
    names = [host] if host else list(lane.hosts)
    if host and host not in lane.hosts:
        raise SparkfleetError(
            f"{host} is not in lane {lane_name}", hint=f"lane hosts: {', '.join(lane.hosts)}"
        )
    out = {}
    for name in names:
        ans = ask_host(inv, name, lane_request(LogsRequest, inv, lane_name, name, lines=lines))
        out[name] = ans if answers else ans["logs"]
    return out


def follow(inv: Inventory, lane_name: str, host: str | None = None, lines: int = 20):
    """`follow_lane` of the lane as `inv` has it."""
    run = lane_run(inv, lane_name)
    return follow_lane(run, host, lines)


def follow_lane(run: LaneRun, host: str | None = None, lines: int = 20):
    """Context manager yielding the live log lines of `host`'s rank, the head's by default
    (tail -F / docker logs -f)."""
    inv, lane_name, lane = run.inv, run.name, run.lane
    host = host or run.recipe.world.head
    if host not in lane.hosts:
        raise SparkfleetError(
            f"{host} is not in lane {lane_name}", hint=f"lane hosts: {', '.join(lane.hosts)}"
        )
    runner = connect(inv.host(host))
    ans = ask(runner, lane_request(StatusRequest, inv, lane_name, host))
    if not ans["ranks"]:
        last = ask(runner, lane_request(LogsRequest, inv, lane_name, host, lines=0))
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
