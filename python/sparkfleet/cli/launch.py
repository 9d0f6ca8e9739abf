"""`sparkfleet env|manifest|launch|stop|status|logs|doctor` (and the node-side `agent`)."""

from __future__ import annotations

import sys
import time

import click

from ..base.errors import ExitCode, SparkfleetError
from .options import JSON, REPLICA
from .render import complete, echo_json, human_bytes, load_inventory, to_jsonable
from .values import POSITIVE_SECONDS

OFFLINE = click.option(
    "--offline",
    is_flag=True,
    help="Contact no host: show what the inventory and recipe decide, mark the rest.",
)
OFFLINE_WHY = "offline: no host contacted"


def _plan_one(ctx: click.Context, lane: str, host: str, offline: bool):
    """HOST's plan; an unreachable HOST is planned offline (the caller exits UNREACHABLE after showing it)."""
    from ..launch.plan import prepare

    inv = load_inventory(ctx)
    inv.host(host)
    return prepare(
        inv, lane, hosts=[host], offline=OFFLINE_WHY if offline else None, tolerate_unreachable=True
    )


def _exit_if_unreachable(plan, as_json: bool) -> None:
    """After showing what could be derived: name the host ssh could not reach and exit UNREACHABLE."""
    if not plan.unreachable:
        return
    if not as_json:
        for host, error in plan.unreachable.items():
            click.secho(f"error: {error}", fg="red", err=True)
            click.echo(f"  hint: the values marked unknown need {host}; --offline plans without it", err=True)
    sys.exit(ExitCode.UNREACHABLE)


def _unknown_lines(unknown: dict[str, str], indent: str = "") -> list[str]:
    return [f"{indent}# unknown {key}: {why}" for key, why in unknown.items()]


@click.command("env")
@click.argument("lane", shell_complete=complete("lane"))
@click.argument("host", shell_complete=complete("host"))
@OFFLINE
@JSON
@click.pass_context
def env(ctx: click.Context, lane: str, host: str, offline: bool, as_json: bool) -> None:
    """The derived env of LANE's rank on HOST (world shape, rank, dist init, per-node fabric).

    Node-detected values (RoCE HCA/GID/interfaces, the staged snapshot path) need HOST: with
    --offline, or when HOST does not answer, they are listed as unknown with the reason (and an
    unreachable HOST exits 4 (unreachable)).

    \b
    Examples:
      sparkfleet env demo-exl3-2x dgx2
      sparkfleet env demo-exl3-2x dgx2 --offline
      sparkfleet env demo-exl3-2x dgx2 --json
      sparkfleet env dsv41-flash-4x-mia dgx3 --offline   # real fleet: a lane of the checkout
    """
    from ..lane.spec import redact_env

    plan = _plan_one(ctx, lane, host, offline)
    spec, unknown = plan.specs[host], plan.unknown.get(host, {})
    shown = redact_env(spec.env)
    if as_json:
        echo_json(
            {"lane": lane, "host": host, "rank": spec.rank, "env": shown, "argv": spec.argv,
             "unknown": unknown, "offline": offline, "unreachable": plan.unreachable}
        )  # fmt: skip
    else:
        click.echo(f"# {lane} rank {spec.rank}/{spec.nnodes} on {host} ({spec.runtime})")
        for k, v in shown.items():
            if k not in unknown:
                click.echo(f"{k}={v}")
        for line in _unknown_lines(unknown):
            click.echo(line)
    _exit_if_unreachable(plan, as_json)


@click.command("manifest")
@click.argument("lane", shell_complete=complete("lane"))
@click.argument("host", shell_complete=complete("host"))
@OFFLINE
@JSON
@click.pass_context
def manifest(ctx: click.Context, lane: str, host: str, offline: bool, as_json: bool) -> None:
    """The bind manifest of LANE on HOST: local staged+verified entries, else NAS read-only.

    Which copy each directory binds is HOST's staged and verified state: with --offline, or when
    HOST does not answer, each model's two candidate sources are shown and the choice is marked
    unknown (an unreachable HOST exits 4 (unreachable)).

    \b
    Examples:
      sparkfleet manifest demo-exl3-2x dgx1
      sparkfleet manifest demo-exl3-2x dgx1 --offline
      sparkfleet manifest demo-exl3-2x dgx1 --json
    """
    from ..lane.manifest import candidate_sources

    plan = _plan_one(ctx, lane, host, offline)
    m, unknown = plan.manifests[host], plan.unknown.get(host, {})
    inv = load_inventory(ctx)
    candidates = []
    if "model binds" in unknown:
        h = inv.host(host)
        for model in inv.lane(lane).models:
            local, nas = candidate_sources(model.repo, model.revision, h.local_hub, h.nas_hub)
            candidates.append(
                {"repo": model.repo, "revision": model.revision, "local": local, "nas": nas,
                 "include": list(model.include), "exclude": list(model.exclude)}
            )  # fmt: skip
    if as_json:
        echo_json(
            {**to_jsonable(m), "local": m.local, "nas": m.nas, "total": m.total, "unknown": unknown,
             "candidates": candidates, "offline": offline, "unreachable": plan.unreachable}
        )  # fmt: skip
    elif candidates:
        for c in candidates:
            patterns = "".join(f" --exclude {x}" for x in c["exclude"]) + "".join(
                f" --include {x}" for x in c["include"]
            )
            click.echo(f"{c['repo']}@{c['revision']}{patterns}")
            click.echo(f"  local  {c['local']}  (each directory staged and verified there)")
            click.echo(f"  nas    {c['nas']}  (read-only, otherwise)")
        for line in _unknown_lines({"model binds": unknown["model binds"]}):
            click.echo(line)
    else:
        for d in m.decisions:
            click.echo(f"{d.origin:5}  {d.repo}/{d.directory or '.'}  ({d.entries} entries: {d.reason})")
        click.echo(f"{m.total} binds: {m.local} local + {m.nas} NAS (read-only)")
    _exit_if_unreachable(plan, as_json)


def _event(msg: str) -> None:
    from .progress import step_line  # lazy: rich is not for the node-side `agent` verb

    step_line(msg)


@click.command("launch")
@click.argument("lane", shell_complete=complete("lane"))
@click.option("--no-wait", is_flag=True, help="Start the ranks and return without waiting for readiness.")
@click.option("--keep-on-failure", is_flag=True, help="Leave the ranks running when readiness fails.")
@click.option(
    "--timeout",
    type=POSITIVE_SECONDS,
    show_default="the recipe's timeouts.ready_s",
    help="Readiness timeout in seconds.",
)
@click.option(
    "--replace",
    is_flag=True,
    help="Stop whatever runs on these hosts first: another lane (named), or this lane (a relaunch).",
)
@click.option("--stop-on-interrupt", is_flag=True, help="On Ctrl-C, stop the ranks already started.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print each rank's image, argv, env, binds, devices in start order; touch no host.",
)
@click.option("--no-canary", is_flag=True, help="Skip the fabric canary (all-reduce + all-gather).")
@click.option("--allow-drift", is_flag=True, help="Launch even if a host's stack drifted from fleet.toml.")
@click.option(
    "--allow-nas-weights",
    is_flag=True,
    help="Launch even if a rank's staged weights do not verify (it then reads them from the NAS).",
)
@click.option(
    "--release", default=None, help="Run release NAME exactly: its recipe, fleet file and image digest."
)
@REPLICA
@JSON
@click.pass_context
def launch(
    ctx: click.Context,
    lane: str,
    no_wait: bool,
    keep_on_failure: bool,
    timeout: float | None,
    replace: bool,
    stop_on_interrupt: bool,
    dry_run: bool,
    no_canary: bool,
    allow_drift: bool,
    allow_nas_weights: bool,
    release: str | None,
    replica: int,
    as_json: bool,
) -> None:
    """Start LANE on its hosts (workers first, head last) and wait until it is ready.

    First the gates: local weights (a rank whose staged weights do not verify would read them
    from the NAS: refused unless --allow-nas-weights), memory admission, ports, host stack drift,
    fabric canary. Each refuses with exit 5 (refused), as does a lane already running on the hosts
    unless --replace; another launch of LANE still under way exits 75 (busy). While it boots: per
    rank the boot stage reached (the recipe's ready_signatures), elapsed time, weight-load progress
    and the last log line (a live table on a terminal, one line per stage change otherwise).
    Ctrl-C names the ranks still running and how to stop them.

    \b
    Examples:
      sparkfleet launch demo-exl3-2x --dry-run
      sparkfleet launch demo-exl3-2x
      sparkfleet launch demo-exl3-2x --no-wait
      sparkfleet launch demo-exl3-2x --replace
      sparkfleet launch demo-exl3-2x --timeout 120 --json
      sparkfleet launch dsv41-flash-4x-mia --release r39   # real fleet: a cut release

    A lane with [gateway] replicas launches one copy per command (--replica N, 0 by default): each
    boots, fails and is stopped on its own while the gateway serves from the others.
    """
    if dry_run:
        _print_dry_run(ctx, lane, replica, as_json, release)
        return
    import tempfile
    from pathlib import Path

    from ..lane.replicas import generations_root, instance_name, replica_inventory
    from ..launch.lane import launch as do_launch
    from ..launch.revert import release_inventory
    from .progress import BootView

    inv = load_inventory(ctx)
    with tempfile.TemporaryDirectory(prefix="sparkfleet-release-") as tmp, BootView(as_json) as view:
        report = do_launch(
            replica_inventory(
                release_inventory(inv, lane, release, Path(tmp), on_event=_event) if release else inv,
                lane,
                replica,
            ),
            lane,
            wait=not no_wait,
            keep_on_failure=keep_on_failure,
            timeout_s=timeout,
            on_event=_event,
            replace=replace,
            on_progress=view.update,
            stop_on_interrupt=stop_on_interrupt,
            canary=not no_canary,
            allow_drift=allow_drift,
            allow_nas_weights=allow_nas_weights,
            # a release's generation is the lane's (its replica's), recorded with the others
            generations_root=generations_root(inv.root, lane, replica),
        )
    ok = report.ready is None or report.ready.ok
    lane = instance_name(lane, replica)  # what the output names: LANE#N for replica N
    if as_json:
        echo_json({**to_jsonable(report), "weights": report.weights_note()})
    else:
        if report.nas_weights:
            click.secho(report.weights_note() + " (--allow-nas-weights)", fg="yellow")
        for note in report.notes:
            click.secho(f"note: {note}", fg="yellow")
        for r in report.started:
            ident = f"pid {r.pid}" if r.pid else f"container {str(r.container_id)[:12]}"
            cleared = f", cleared {len(r.receipts_cleared)} receipt roots" if r.receipts_cleared else ""
            click.echo(f"rank {r.rank} on {r.host}: {r.name} ({ident}){cleared}")
        rd = report.ready
        if rd is not None and rd.ok:
            wl = f", weight load {rd.weight_load_s:g} s" if rd.weight_load_s is not None else ""
            models = ", ".join(rd.models)
            click.secho(f"{lane} ready in {rd.time_to_ready_s:.1f} s{wl}; models: {models}", fg="green")
            for sig, t in rd.stages.items():
                click.echo(f"  {t:8.2f} s  {sig}")
            boot = (report.generation or {}).get("boot") or {}
            if boot:
                gen = (report.generation or {}).get("id")
                cache = "no boot cache" if boot["cache"] == "none" else f"{boot['cache']} cache"
                click.echo(f"  boot: {cache} ({boot['cache_key']}); generation {gen}")
            if boot.get("regression"):
                click.secho(f"  boot regression: {boot['regression']}", fg="yellow")
        elif rd is not None:
            click.secho(f"{lane} NOT ready: {rd.reason}", fg="red")
            if rd.missing:
                click.echo(f"  missing signatures: {', '.join(rd.missing)}")
            click.echo("  log tail:")
            for line in rd.tail[-20:]:
                click.echo(f"    {line}")
            if report.stopped_after_failure:
                click.echo("  the lane was stopped (use --keep-on-failure to keep it)")
    if not ok:
        sys.exit(ExitCode.SHORTFALL)


def _print_dry_run(ctx: click.Context, lane: str, replica: int, as_json: bool, release: str | None) -> None:
    """Every rank as it would start, workers first, head last, without touching a host (with
    --release: as the release's own recipe and fleet file would start them)."""
    import tempfile
    from pathlib import Path

    from ..lane.replicas import replica_inventory
    from ..lane.spec import redact_env
    from ..launch.generations import rollback_inventory
    from ..launch.plan import dry_run, planned_argv
    from ..launch.revert import release_as_generation

    inv = load_inventory(ctx)
    with tempfile.TemporaryDirectory(prefix="sparkfleet-release-") as tmp:
        if release:
            inv = rollback_inventory(release_as_generation(inv, lane, release, verify=False)[0], Path(tmp))
        plan = dry_run(replica_inventory(inv, lane, replica), lane)
    ranks = []
    for n, spec in enumerate(plan.start_order(), 1):
        unknown = plan.unknown.get(spec.host, {})
        ranks.append(
            {
                "start": n,
                "rank": spec.rank,
                "host": spec.host,
                "runtime": spec.runtime,
                "name": spec.name,
                "image": spec.image,
                "argv": planned_argv(spec),
                "env": {k: v for k, v in redact_env(spec.env).items() if k not in unknown},
                "binds": [b.docker_arg() for b in spec.binds],
                "devices": list(spec.devices),
                "cache_seed": spec.cache_seed.describe() if spec.cache_seed else None,
                "unknown": unknown,
            }
        )
    if as_json:
        echo_json({"lane": lane, "dry_run": True, "image": plan.image_note or None, "ranks": ranks})
        return
    import shlex

    click.echo(f"{lane}: dry run, no host contacted; {len(ranks)} ranks in start order (workers first)")
    if plan.image_note:
        click.echo(f"image: {plan.image_note}")
    for r in ranks:
        role = "head" if r["rank"] == 0 else "worker"
        click.secho(
            f"[{r['start']}] rank {r['rank']} ({role}) on {r['host']}: {r['name']} ({r['runtime']})",
            bold=True,
        )
        click.echo(f"  image:   {plan.image_note or r['image'] or '(none: process runtime)'}")
        click.echo(f"  argv:    {shlex.join(r['argv'])}")
        click.echo("  env:")
        for k, v in r["env"].items():
            click.echo(f"    {k}={v}")
        click.echo("  binds:" + ("" if r["binds"] else " (none)"))
        for b in r["binds"]:
            click.echo(f"    {b}")
        click.echo(f"  devices: {', '.join(r['devices']) or '(none)'}")
        if r["cache_seed"]:
            click.echo(f"  cache:   seeded before the serve: {r['cache_seed']}")
        for line in _unknown_lines(r["unknown"], indent="  "):
            click.echo(line)


@click.command("stop")
@click.argument("lane", shell_complete=complete("lane"))
@REPLICA
@JSON
@click.pass_context
def stop(ctx: click.Context, lane: str, replica: int, as_json: bool) -> None:
    """Stop what sparkfleet started for LANE (recorded PIDs/containers only).

    \b
    Examples:
      sparkfleet stop demo-exl3-2x
      sparkfleet stop demo-exl3-2x --json
    """
    from ..lane.replicas import instance_name, replica_inventory
    from ..launch.lane import stop as do_stop

    res = do_stop(replica_inventory(load_inventory(ctx), lane, replica), lane, by="sparkfleet stop")
    lane = instance_name(lane, replica)  # what the output names: LANE#N for replica N
    if as_json:
        echo_json(res)
    else:
        for r in res:
            click.echo(f"{r['host']}: rank {r.get('rank', '?')} {r.get('name', '')}: {r['detail']}")
        if not res:
            click.echo(f"{lane}: nothing recorded as running")
    if any(r.get("unreachable") for r in res):
        sys.exit(ExitCode.UNREACHABLE)
    if any(not r["stopped"] for r in res):
        sys.exit(ExitCode.SHORTFALL)


@click.command("status")
@click.argument("lane", shell_complete=complete("lane"))
@REPLICA
@JSON
@click.pass_context
def status(ctx: click.Context, lane: str, replica: int, as_json: bool) -> None:
    """Per rank: running or how it ended; the head's /health and /v1/models.

    A lane that is not running says how its last run ended: stopped by whom and when, or how each
    rank exited. Exits 0 (ok) only while every rank runs; 1 (shortfall) when the lane does not serve
    (stopped cleanly included: "stopped cleanly" names who stopped it); 4 (unreachable) when a host
    cannot be reached.

    \b
    Examples:
      sparkfleet status demo-exl3-2x
      sparkfleet status demo-exl3-2x --json
    """
    from ..lane.replicas import instance_name, replica_inventory
    from ..launch.lanestop import status_enforced  # [watchdog] scope = "lane" acts here too

    st, _ = status_enforced(replica_inventory(load_inventory(ctx), lane, replica), lane)
    if as_json:
        echo_json({**st.to_dict(), "replica": replica})
    else:
        click.echo(f"{instance_name(lane, replica)}: {st.running}/{st.expected} ranks running")
        if st.weights:
            click.secho(f"  {st.weights}", fg="yellow")
        for r in st.ranks:
            state = (
                "running"
                if r.running
                else r.detail
                if r.orphan_pid
                else f"stopped ({r.detail}, code {r.returncode})"
            )
            click.echo(f"  rank {r.rank} {r.host}: {r.name} {state}")
        if st.endpoints:
            e = st.endpoints
            click.echo(
                f"  head {st.head}:{st.port} /health={e['health']} /v1/models={e['models_status']}"
            )
        for e in st.errors:
            click.echo(f"  {e['host']}: {e['error']}")
        for line in _ended_lines(st, instance_name(lane, replica)):
            click.echo(line)
    if any(e.get("code") == ExitCode.UNREACHABLE for e in st.errors):
        sys.exit(ExitCode.UNREACHABLE)
    if not st.ok:
        sys.exit(ExitCode.SHORTFALL)


def _when(t: float | None) -> str:
    """Local time of a record's timestamp; "?" for none (or one no clock can show)."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "?"
    except (OverflowError, OSError, ValueError, TypeError):
        return "?"


def _ended_lines(st, lane: str) -> list[str]:
    """How a lane that runs nothing got there: its last run's stop, per rank, and what to run next."""
    if st.ranks or st.errors:
        return []
    if not st.ended:
        return [f"  no run recorded on its hosts: start it with `sparkfleet launch {lane}`"]
    lines = []
    if st.stopped_cleanly:
        last = max(st.ended, key=lambda e: e["stopped_at"])
        lines.append(f"  stopped cleanly at {_when(last['stopped_at'])} by {last['stopped_by']}")
    for e in st.ended:
        how = (f"{e['detail']} at {_when(e['stopped_at'])} by {e['stopped_by']}" if e["stopped_at"]
               else "stopped (how is not recorded)")  # fmt: skip
        lines.append(f"  rank {e['rank']} {e['host']}: {e['name']} started {_when(e['started_at'])}, {how}")
    lines.append(f"  next: `sparkfleet launch {lane}` (`sparkfleet logs {lane}` shows the last run's logs)")
    return lines


@click.command("logs")
@click.argument("lane", shell_complete=complete("lane"))
@click.argument("host", required=False, shell_complete=complete("host"))
@click.option(
    "-n", "--lines", type=click.IntRange(min=0), default=50, show_default=True, help="Lines per rank."
)
@click.option(
    "-f", "--follow", is_flag=True, help="Keep printing the log as it grows (HOST's, or the head's)."
)
@JSON
@click.pass_context
def logs(ctx: click.Context, lane: str, host: str | None, lines: int, follow: bool, as_json: bool) -> None:
    """The last lines of LANE's rank logs (on HOST, or every host).

    While the lane runs: the running ranks' logs. After it stopped: the last run's logs, marked so.
    `-f` follows until Ctrl-C, which ends it with exit 0 (ok).

    \b
    Examples:
      sparkfleet logs demo-exl3-2x
      sparkfleet logs demo-exl3-2x dgx2 -n 200
      sparkfleet logs demo-exl3-2x -f      # until Ctrl-C
    """
    from ..lane.recipe import launch_recipe
    from ..launch.lane import follow as do_follow
    from ..launch.lane import logs as do_logs

    inv = load_inventory(ctx)
    if follow:
        target = host or launch_recipe(inv, lane).world.head
        try:
            with do_follow(inv, lane, target, lines) as stream:
                for line in stream:
                    click.echo(line, nl=False)
        except KeyboardInterrupt:  # how a follow ends: quietly, exit 0 (the lane is untouched)
            click.echo("", err=True)
        return
    answers = do_logs(inv, lane, host, lines, answers=True)
    if as_json:
        echo_json({"lane": lane, "hosts": answers})
        return
    shown = 0
    for h, ans in answers.items():
        for rank, text in ans["logs"].items():
            last = " (last run; the lane is stopped)" if rank in ans.get("stopped", []) else ""
            click.secho(f"==> {h} rank {rank}{last}: {ans.get('log_paths', {}).get(rank, '')} <==", bold=True)
            click.echo(text)
            shown += 1
    if not shown:
        raise SparkfleetError(
            f"no log of {lane} on {host or 'any of its hosts'}: it never ran there (or its state_dir moved)",
            hint=f"sparkfleet launch {lane}",
            exit_code=ExitCode.SHORTFALL,
        )


@click.command("doctor")
@click.argument("target", shell_complete=complete("target"))
@click.option("--deploy", is_flag=True, help="Also check what `deploy .#HOST` needs of a DGX OS host.")
@REPLICA
@JSON
@click.pass_context
def doctor(ctx: click.Context, target: str, deploy: bool, replica: int, as_json: bool) -> None:
    """Check a HOST (or every host of a LANE): ssh, space, staging, receipts, image, fabric, GPU, env.

    --deploy adds what `deploy .#HOST` needs of a DGX OS host (nix on the ssh PATH, trusted-users,
    nix flakes, sudo secure_path); a lane served without deploy does not need them.

    \b
    Examples:
      sparkfleet doctor dgx1
      sparkfleet doctor demo-exl3-2x --json
      sparkfleet doctor dgx2 --deploy      # real fleet: a DGX OS host

    A host of a lane's copy is checked as that copy (its rank, world and hints).
    """
    from ..ops.doctor import doctor as do_doctor

    report = do_doctor(load_inventory(ctx), target, deploy=deploy, replica=replica)
    if as_json:
        checks = [{**to_jsonable(c), "detail": c.text(human_bytes)} for c in report.checks]
        echo_json({"target": report.target, "ok": report.ok, "checks": checks})
    else:
        for c in report.checks:
            click.echo(f"{c.mark} {c.host:8} {c.name:16} {c.text(human_bytes)}")
            if c.ok is False and c.hint:
                click.echo(f"  {'':8} {'':16} fix: {c.hint}")
    if not report.ok:
        sys.exit(report.exit_code)


@click.command("agent", hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("action")
def agent(action: str) -> None:
    """Node side of launch: a JSON request on stdin, a JSON answer on stdout."""
    from ..node.agent import main as agent_main

    sys.exit(agent_main([action]))
