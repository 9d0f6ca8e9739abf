"""`sparkfleet env|manifest|launch|doctor` (and the node-side `agent`)."""

from __future__ import annotations

import sys

import click

from ..base.errors import ExitCode
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
    from ..launch.verbrun import bind_candidates

    plan = _plan_one(ctx, lane, host, offline)
    m, unknown = plan.manifests[host], plan.unknown.get(host, {})
    candidates = bind_candidates(load_inventory(ctx), lane, host) if "model binds" in unknown else []
    if as_json:
        echo_json(
            {**to_jsonable(m), "local": m.local, "nas": m.nas, "total": m.total, "unknown": unknown,
             "candidates": candidates, "offline": offline, "unreachable": plan.unreachable}
        )  # fmt: skip
    elif candidates:
        for c in candidates:
            patterns = "".join(f" --exclude {x}" for x in c.exclude)
            patterns += "".join(f" --include {x}" for x in c.include)
            click.echo(f"{c.repo}@{c.revision}{patterns}")
            click.echo(f"  local  {c.local}  (each directory staged and verified there)")
            click.echo(f"  nas    {c.nas}  (read-only, otherwise)")
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
    from ..launch.lane import Gates, launch_lane
    from ..launch.verbrun import launch_run
    from .progress import BootView

    gates = Gates(replace, not no_canary, allow_drift, allow_nas_weights, stop_on_interrupt)
    with BootView(as_json) as view, launch_run(load_inventory(ctx), lane, replica, release, _event) as run:
        report = launch_lane(run, gates, not no_wait, keep_on_failure, timeout, _event, view.update)
    ok = report.ready is None or report.ready.ok
    lane = run.instance  # what the output names: LANE#N for replica N
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
    from ..launch.verbrun import preview

    plan, ranks = preview(load_inventory(ctx), lane, replica, release)
    if as_json:
        echo_json({"lane": lane, "dry_run": True, "image": plan.image_note or None, "ranks": ranks})
        return
    import shlex

    click.echo(f"{lane}: dry run, no host contacted; {len(ranks)} ranks in start order (workers first)")
    if plan.image_note:
        click.echo(f"image: {plan.image_note}")
    for r in ranks:
        role = "head" if r.rank == 0 else "worker"
        click.secho(f"[{r.start}] rank {r.rank} ({role}) on {r.host}: {r.name} ({r.runtime})", bold=True)
        click.echo(f"  image:   {plan.image_note or r.image or '(none: process runtime)'}")
        click.echo(f"  argv:    {shlex.join(r.argv)}")
        click.echo("  env:")
        for k, v in r.env.items():
            click.echo(f"    {k}={v}")
        click.echo("  binds:" + ("" if r.binds else " (none)"))
        for b in r.binds:
            click.echo(f"    {b}")
        click.echo(f"  devices: {', '.join(r.devices) or '(none)'}")
        if r.cache_seed:
            click.echo(f"  cache:   seeded before the serve: {r.cache_seed}")
        for line in _unknown_lines(r.unknown, indent="  "):
            click.echo(line)


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
