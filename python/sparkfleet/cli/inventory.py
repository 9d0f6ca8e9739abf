"""`sparkfleet inventory check|show`."""

from __future__ import annotations

import click

from ..errors import ExitCode
from .render import echo_json, load_inventory


@click.group()
def inventory() -> None:
    """Validate and show the fleet inventory (hosts/fleet.toml + recipes/*/recipe.toml)."""


@inventory.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def check(ctx: click.Context, as_json: bool) -> None:
    """Validate everything and list every problem (file, key path, expectation); exit 2 if any.

    Runs the schema, the cross-file checks and every check `launch` runs before touching a
    node (world shape vs the lane's hosts, ranks, flags, env names, cache dir, receipt roots,
    the weight-load regex).

    \b
    Examples:
      sparkfleet inventory check
      sparkfleet --root ~/fleet inventory check --json
    """
    from ..fleetcheck import check_fleet

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
@click.pass_context
def show(ctx: click.Context) -> None:
    """Print the loaded inventory as JSON (defaults merged, lanes resolved to pins).

    \b
    Examples:
      sparkfleet inventory show
      sparkfleet --root ~/fleet inventory show
    """
    inv = load_inventory(ctx)
    echo_json(
        {
            "hosts": inv.hosts,
            "pins": {n: {**vars(p), "resolved": p.resolved} for n, p in inv.pins.items()},
            "lanes": inv.lanes,
        }
    )
