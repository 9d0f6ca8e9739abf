"""`sparkfleet env|manifest|launch|stop|status|logs|doctor` (and the node-side `agent`)."""

from __future__ import annotations

import sys

import click

from .render import echo_json, load_inventory, to_jsonable

JSON = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")


def _plan_one(ctx: click.Context, lane: str, host: str):
    from ..launch.lane import prepare

    inv = load_inventory(ctx)
    inv.host(host)
    return prepare(inv, lane, hosts=[host])


@click.command("env")
@click.argument("lane")
@click.argument("host")
@JSON
@click.pass_context
def env(ctx: click.Context, lane: str, host: str, as_json: bool) -> None:
    """The derived env of LANE's rank on HOST (world shape, rank, dist init, per-node fabric)."""
    from ..launch.spec import redact_env

    spec = _plan_one(ctx, lane, host).specs[host]
    shown = redact_env(spec.env)
    if as_json:
        echo_json({"lane": lane, "host": host, "rank": spec.rank, "env": shown, "argv": spec.argv})
        return
    click.echo(f"# {lane} rank {spec.rank}/{spec.nnodes} on {host} ({spec.runtime})")
    for k, v in shown.items():
        click.echo(f"{k}={v}")


@click.command("manifest")
@click.argument("lane")
@click.argument("host")
@JSON
@click.pass_context
def manifest(ctx: click.Context, lane: str, host: str, as_json: bool) -> None:
    """The bind manifest of LANE on HOST: local staged+verified entries, else NAS read-only."""
    m = _plan_one(ctx, lane, host).manifests[host]
    if as_json:
        echo_json({**to_jsonable(m), "local": m.local, "nas": m.nas, "total": m.total})
        return
    for d in m.decisions:
        click.echo(f"{d.origin:5}  {d.repo}/{d.directory or '.'}  ({d.entries} entries: {d.reason})")
    click.echo(f"{m.total} binds: {m.local} local + {m.nas} NAS (read-only)")


def _event(msg: str) -> None:
    click.echo(f"· {msg}", err=True)


@click.command("launch")
@click.argument("lane")
@click.option("--no-wait", is_flag=True, help="Start the ranks and return without waiting for readiness.")
@click.option("--keep-on-failure", is_flag=True, help="Leave the ranks running when readiness fails.")
@click.option("--timeout", type=float, default=None, help="Readiness timeout in seconds (recipe default).")
@click.option("--no-canary", is_flag=True, help="Skip the fabric canary (all-reduce + all-gather).")
@click.option("--allow-drift", is_flag=True, help="Launch even if a host's stack drifted from fleet.toml.")
@JSON
@click.pass_context
def launch(
    ctx: click.Context, lane: str, no_wait: bool, keep_on_failure: bool, timeout: float | None,
    no_canary: bool, allow_drift: bool, as_json: bool,
) -> None:  # fmt: skip
    """Start LANE on its hosts (workers first, head last) and wait until it is ready.

    First the gates: memory admission, ports, host stack drift, fabric canary (each refuses with exit 5)."""
    from ..launch.lane import launch as do_launch

    inv = load_inventory(ctx)
    report = do_launch(
        inv, lane, wait=not no_wait, keep_on_failure=keep_on_failure, timeout_s=timeout, on_event=_event,
        canary=not no_canary, allow_drift=allow_drift,
    )  # fmt: skip
    ok = report.ready is None or report.ready.ok
    if as_json:
        echo_json(report)
    else:
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
                click.echo(f"  boot: {boot['cache']} cache ({boot['cache_key']}); generation {gen}")
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
        sys.exit(1)


@click.command("stop")
@click.argument("lane")
@JSON
@click.pass_context
def stop(ctx: click.Context, lane: str, as_json: bool) -> None:
    """Stop what sparkfleet started for LANE (recorded PIDs/containers only)."""
    from ..launch.lane import stop as do_stop

    res = do_stop(load_inventory(ctx), lane)
    if as_json:
        echo_json(res)
    else:
        for r in res:
            click.echo(f"{r['host']}: rank {r.get('rank', '?')} {r.get('name', '')}: {r['detail']}")
        if not res:
            click.echo(f"{lane}: nothing recorded as running")
    if any(not r["stopped"] for r in res):
        sys.exit(1)


@click.command("status")
@click.argument("lane")
@JSON
@click.pass_context
def status(ctx: click.Context, lane: str, as_json: bool) -> None:
    """Per rank: running or how it ended; the head's /health and /v1/models."""
    from ..launch.lane import status as do_status

    st = do_status(load_inventory(ctx), lane)
    if as_json:
        echo_json(st)
        return
    click.echo(f"{lane}: {st['running']}/{st['expected']} ranks running")
    for r in st["ranks"]:
        state = "running" if r["running"] else f"stopped ({r['detail']}, code {r['returncode']})"
        click.echo(f"  rank {r['rank']} {r['host']}: {r['name']} {state}")
    if st["endpoints"]:
        e = st["endpoints"]
        click.echo(f"  head {st['head']}:{st['port']} /health={e['health']} /v1/models={e['models_status']}")
    for e in st["errors"]:
        click.echo(f"  {e['host']}: {e['error']}")


@click.command("logs")
@click.argument("lane")
@click.argument("host", required=False)
@click.option("-n", "--lines", type=int, default=50, show_default=True)
@click.option("-f", "--follow", is_flag=True, help="Keep printing HOST's log as it grows (needs HOST).")
@click.pass_context
def logs(ctx: click.Context, lane: str, host: str | None, lines: int, follow: bool) -> None:
    """The last lines of LANE's rank logs (on HOST, or every host)."""
    from ..launch.lane import follow as do_follow
    from ..launch.lane import logs as do_logs

    if follow:
        if host is None:
            raise click.UsageError("--follow needs HOST")
        with do_follow(load_inventory(ctx), lane, host, lines) as stream:
            for line in stream:
                click.echo(line, nl=False)
        return
    for h, ranks in do_logs(load_inventory(ctx), lane, host, lines).items():
        for rank, text in ranks.items():
            click.secho(f"==> {h} rank {rank} <==", bold=True)
            click.echo(text)


@click.command("doctor")
@click.argument("target")
@JSON
@click.pass_context
def doctor(ctx: click.Context, target: str, as_json: bool) -> None:
    """Check a HOST (or every host of a LANE): ssh, space, staging, receipts, image, fabric, GPU, env."""
    from ..doctor import doctor as do_doctor

    report = do_doctor(load_inventory(ctx), target)
    if as_json:
        echo_json({"target": report.target, "ok": report.ok, "checks": report.checks})
    else:
        for c in report.checks:
            click.echo(f"{c.mark} {c.host:8} {c.name:16} {c.detail}")
            if c.ok is False and c.hint:
                click.echo(f"  {'':8} {'':16} fix: {c.hint}")
    if not report.ok:
        sys.exit(1)


@click.command("agent", hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("action")
def agent(action: str) -> None:
    """Node side of launch: a JSON request on stdin, a JSON answer on stdout."""
    from ..launch.agent import main as agent_main

    sys.exit(agent_main([action]))
