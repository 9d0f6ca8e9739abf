"""`sparkfleet view`: the fleet at a glance — Prometheus metrics, a live page, scrape targets, alert rules."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import click

from ..base.errors import ExitCode
from .render import echo_json, human_bytes, load_inventory
from .values import POSITIVE_SECONDS, WRITABLE_DIR


@click.group("view")
def view() -> None:
    """The fleet at a glance: /metrics for Prometheus and a live page, on the head host.

    \b
    Examples:
      sparkfleet view serve      # until Ctrl-C
      sparkfleet view snapshot --json
      sparkfleet view targets --out ./prom
    """


def _gateway_state() -> Path | None:
    from ..serving.gateway import state_dir_in_force

    d = state_dir_in_force()
    return d if d.is_dir() else None


@view.command("serve")
@click.option("--listen", default="127.0.0.1:9841", help="HOST:PORT to serve on (beyond loopback: a key).")
@click.option("--interval", type=POSITIVE_SECONDS, default=15.0,
              help="Seconds between refreshes (and page reloads).")  # fmt: skip
@click.option("--node-timeout", type=POSITIVE_SECONDS, default=10.0,
              help="Seconds a host or lane may take to answer.")  # fmt: skip
@click.option("--targets-dir", type=WRITABLE_DIR,
              help="Keep Prometheus file_sd targets here, rewritten when the inventory changes.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print where it serves as JSON, then serve.")
@click.pass_context
def serve(
    ctx: click.Context,
    listen: str,
    interval: float,
    node_timeout: float,
    targets_dir: Path | None,
    as_json: bool,
) -> None:
    """Serve /metrics (Prometheus) and / (the fleet page) until stopped.

    A background loop asks every lane and host once per --interval; requests only read what it
    found, so a scrape never starts work on a node. Listening beyond loopback (0.0.0.0:9841)
    needs the view's key: it is made once under the operator's state dir, and clients send it as
    `Authorization: Bearer KEY` (Prometheus: authorization.credentials_file) or as a Basic
    password (a browser).

    \b
    Examples:
      sparkfleet view serve      # until Ctrl-C
      sparkfleet view serve --listen 0.0.0.0:9841   # real fleet: the head host's unit runs it so
    """
    from ..view.service import parse_listen, start

    svc = start(
        functools.partial(load_inventory, ctx), parse_listen(listen), interval, node_timeout,
        targets_dir, _gateway_state(),
    )  # fmt: skip
    where = {
        "url": svc.listen.url + "/",
        "metrics": svc.listen.url + "/metrics",
        "key_file": svc.key_file,
        "targets_dir": targets_dir,
        "interval_s": interval,
    }
    key = f"key: {svc.key_file} (Bearer, or a Basic password)" if svc.key_file else "no key (loopback)"
    line = (
        json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in where.items()})
        if as_json
        else f"sparkfleet view on {where['url']} (metrics: {where['metrics']}); {key}; Ctrl-C stops it"
    )
    try:  # from the line that says Ctrl-C stops it: a Ctrl-C at once is the same clean stop
        click.echo(line)
        svc.run()
    except KeyboardInterrupt:
        click.echo("view stopped", err=True)


def _lane_line(v) -> str:
    from ..view.page import lane_state

    word, _ = lane_state(v)
    tps = v.bench.decode_tps if v.bench else None
    decode = "" if tps is None else f", decode {tps:.1f} tok/s"
    gen = f", generation {v.generation}" if v.generation else ""
    errs = "".join(f"\n    {e}" for e in v.errors)
    return f"  {v.lane}: {word} ({v.ranks_running}/{v.ranks_expected} ranks{gen}{decode}){errs}"


def _host_line(v) -> str:
    if not v.reachable:
        return f"  {v.host}: unreachable ({v.error})"
    mem = human_bytes(v.memory_available_bytes) if v.memory_available_bytes is not None else "?"
    free = human_bytes(v.nvme_free_bytes) if v.nvme_free_bytes is not None else "?"
    reserve = human_bytes(v.nvme_reserve_bytes)
    return f"  {v.host}: memory available {mem}, NVMe free {free} (reserve {reserve})"


@view.command("snapshot")
@click.option("--node-timeout", type=POSITIVE_SECONDS, default=10.0,
              help="Seconds a host or lane may take to answer.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the snapshot as JSON.")
@click.pass_context
def snapshot(ctx: click.Context, node_timeout: float, as_json: bool) -> None:
    """Ask every lane and host once and print what the view would show.

    Exits 1 (shortfall) when a lane that was launched and not stopped is down, or a host does not
    answer.

    \b
    Examples:
      sparkfleet view snapshot
      sparkfleet view snapshot --json
    """
    from ..view.refresh import Refresher

    refresher = Refresher(functools.partial(load_inventory, ctx), node_timeout_s=node_timeout,
                          gateway_state=_gateway_state())  # fmt: skip
    try:
        snap = refresher.refresh()
    finally:
        refresher.stop()
    if snap.inventory_error:
        load_inventory(ctx)  # raises the inventory's own error, with its hint
    short = [v.lane for v in snap.lanes if v.wanted and not v.up]
    short += [h.host for h in snap.hosts if not h.reachable]
    if as_json:
        from ..view.snapshot import snapshot_json

        echo_json(snapshot_json(snap))
    else:
        click.echo("lanes:")
        click.echo("\n".join(_lane_line(v) for v in snap.lanes) or "  (none with [launch])")
        click.echo("hosts:")
        click.echo("\n".join(_host_line(v) for v in snap.hosts))
    if short:
        ctx.exit(int(ExitCode.SHORTFALL))


@view.command("targets")
@click.option("--out", type=WRITABLE_DIR, required=True,
              help="Folder for the file_sd files, the rules and prometheus.yml.")  # fmt: skip
@click.option("--view", "view_at", default="127.0.0.1:9841", help="HOST:PORT Prometheus reaches the view at.")
@click.option("--interval", type=POSITIVE_SECONDS, default=15.0,
              help="Prometheus's scrape and evaluation interval (s).")  # fmt: skip
@click.option("--key-file", type=click.Path(exists=True, dir_okay=False, readable=True, path_type=Path),
              help="The view's key file (`view serve` beyond loopback makes it) for Prometheus.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@click.pass_context
def targets(
    ctx: click.Context, out: Path, view_at: str, interval: float, key_file: Path | None, as_json: bool
) -> None:
    """Write Prometheus file_sd targets (the view, every lane's engine, node exporters) from the
    inventory, the alert rules, and a prometheus.yml that scrapes them.

    An existing Prometheus takes the `scrape_configs` of that prometheus.yml and the rules file
    (docs/fleet-ops.md "Adding the fleet to a Prometheus").

    \b
    Examples:
      sparkfleet view targets --out ./prom
      sparkfleet view targets --out /etc/prometheus/sparkfleet --view 10.0.0.1:9841   # real fleet
    """
    from ..view.service import parse_listen
    from ..view.targets import target_groups, write_prometheus_dir

    listen = parse_listen(view_at)
    inv = load_inventory(ctx)
    files = write_prometheus_dir(inv, listen.scrape_address, out, interval, key_file)
    groups = target_groups(inv, listen.scrape_address)
    if as_json:
        echo_json({"files": files, "targets": {k: [g.to_dict() for g in v] for k, v in groups.items()}})
        return
    for name in groups:
        shown = ", ".join(t for g in groups[name] for t in g.targets) or "none"
        click.echo(f"{files[name]}: {shown}")
    click.echo(f"{files['rules']}: the alert rules (promtool check rules {files['rules']})")
    click.echo(f"{files['prometheus']}: the scrape config (prometheus --config.file={files['prometheus']})")
