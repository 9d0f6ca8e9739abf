"""`sparkfleet inventory check|show`."""

from __future__ import annotations

import click

from ..base.errors import ExitCode
from ..base.sanitize import clean
from .options import JSON
from .render import echo_json, human_bytes, load_inventory


@click.group()
def inventory() -> None:
    """Validate and show the fleet inventory (hosts/fleet.toml + recipes/*/recipe.toml)."""


@inventory.command("check")
@JSON
@click.pass_context
def check(ctx: click.Context, as_json: bool) -> None:
    """Validate everything and list every problem (file, key path, expectation); exit 2 (usage) if any.

    Runs the schema, the cross-file checks and every check `launch` runs before touching a
    node (world shape vs the lane's hosts, ranks, flags, env names, cache dir, receipt roots,
    the weight-load regex).

    \b
    Examples:
      sparkfleet inventory check
      sparkfleet --root .demo/fleet inventory check --json
    """
    from ..ops.fleetcheck import check_fleet

    result = check_fleet(ctx.obj.get("root") if ctx.obj else None)
    if as_json:
        echo_json(result)
    elif result["ok"]:
        click.echo(f"inventory ok: {result['root']}")
        click.echo(f"  hosts: {', '.join(result['hosts'])}")
        for name, hosts in result["lanes"].items():
            click.echo(f"  lane {name}: {', '.join(hosts)}")
        unresolved = result["unresolved_pins"]
        click.echo(f"  pins: {result['pins']} ({len(unresolved)} unresolved: {', '.join(unresolved) or '-'})")
        for warning in result["warnings"]:
            click.echo(f"  note: {warning}")
    else:
        n = len(result["problems"])
        click.secho(f"inventory has {n} problem{'s' * (n != 1)}: {result['root']}", fg="red", err=True)
        for p in result["problems"]:
            click.echo(f"  {p['file']}: {p['key']}: {p['message']}", err=True)
            if p["hint"]:
                click.echo(f"    hint: {p['hint']}", err=True)
    if not result["ok"]:
        ctx.exit(ExitCode.USAGE)


@inventory.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print the inventory as JSON (every field).")
@click.pass_context
def show(ctx: click.Context, as_json: bool) -> None:
    """Show the loaded inventory: hosts, lanes and the models they stage, pins (defaults merged).

    \b
    Examples:
      sparkfleet inventory show
      sparkfleet inventory show --json
    """
    inv = load_inventory(ctx)
    if as_json:
        echo_json(
            {
                "hosts": inv.hosts,
                "pins": {n: {**vars(p), "resolved": p.resolved} for n, p in inv.pins.items()},
                "lanes": inv.lanes,
            }
        )
        return
    lines: list[str] = []
    lines.append(f"fleet {inv.root}")
    lines.append("hosts:")
    for h in inv.hosts.values():
        kind = f", kind {h.kind}" if h.kind else ""
        lines.append(
            f"  {h.name:8} {h.ssh_user}@{h.address}:{h.ssh_port}  local hub {h.local_hub}, "
            f"NAS hub {h.nas_hub}, reserve {human_bytes(h.reserve_bytes)}{kind}"
        )
    lines.append("lanes:")
    for lane in inv.lanes.values():
        about = f" ({' '.join(lane.description.split())})" if lane.description else ""
        lines.append(f"  {lane.name}: {', '.join(lane.hosts)}{about}")
        for m in lane.models:
            patterns = [f", exclude {x}" for x in m.exclude] + [f", include {x}" for x in m.include]
            lines.append(f"    {m.repo}@{m.revision[:12]} (pin {m.pin}){''.join(patterns)}")
    lines.append("pins:")
    for p in inv.pins.values():
        state = "" if p.resolved else " (not resolved: `sparkfleet pins resolve`)"
        lines.append(f"  {p.name}: {p.kind} {p.source} @ {p.value[:19] or '?'}{state}")
    for line in lines:  # the fleet files may come from others: no terminal escapes reach the screen
        click.echo(clean(line))
