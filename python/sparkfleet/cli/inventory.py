"""`sparkfleet inventory check|show`."""

from __future__ import annotations

import click

from .render import echo_json, load_inventory


@click.group()
def inventory() -> None:
    """Validate and show the fleet inventory (hosts/fleet.toml + recipes/*/recipe.toml)."""


@inventory.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def check(ctx: click.Context, as_json: bool) -> None:
    """Validate everything; an error names the file, the key path and what was expected.

    \b
    Examples:
      sparkfleet inventory check
      sparkfleet inventory check --json
    """
    inv = load_inventory(ctx)
    unresolved = sorted(name for name, pin in inv.pins.items() if not pin.resolved)
    result = {
        "ok": True,
        "root": str(inv.root),
        "hosts": sorted(inv.hosts),
        "lanes": {name: list(lane.hosts) for name, lane in sorted(inv.lanes.items())},
        "pins": len(inv.pins),
        "unresolved_pins": unresolved,
    }
    if as_json:
        echo_json(result)
        return
    click.echo(f"inventory ok: {inv.root}")
    click.echo(f"  hosts: {', '.join(result['hosts'])}")
    for name, hosts in result["lanes"].items():
        click.echo(f"  lane {name}: {', '.join(hosts)}")
    click.echo(f"  pins: {len(inv.pins)} ({len(unresolved)} unresolved: {', '.join(unresolved) or '-'})")


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
