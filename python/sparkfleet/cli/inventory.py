"""`sparkfleet inventory check|show`."""

from __future__ import annotations

import click

from ..errors import ExitCode, SparkfleetError
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
    from ..inventory import check as check_inventory

    result = inventory_report(check_inventory(ctx.obj.get("root") if ctx.obj else None))
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


def _engram_problems(inv, lane_name: str) -> list:
    """The lane's [engram] wiring as launch and `engram pack` resolve it, for every host."""
    from ..engram.config import launch_wiring

    try:
        for host in inv.lane(lane_name).hosts:
            launch_wiring(inv, lane_name, host, False)
    except SparkfleetError as exc:
        return [("engram", exc)]
    return []


def _launch_warnings(inv, lane_name: str) -> list[str]:
    """Not inventory errors, but what `launch` would still refuse today: an image pin not resolved."""
    from ..launch.recipe import launch_recipe

    lane = inv.lane(lane_name)
    if "launch" not in lane.raw:
        return []
    try:
        recipe = launch_recipe(inv, lane_name)
    except SparkfleetError:
        return []
    image = recipe.image
    if recipe.runtime in ("docker", "podman") and image is not None and not image.resolved:
        return [f"lane {lane_name}: launch refuses until image pin {image.name} is resolved (pins resolve)"]
    return []


def inventory_report(checked) -> dict:
    """The check's record: schema and cross-file problems, then what `launch` would refuse per lane."""
    from ..launch.recipe import launch_recipe
    from ..launch.spec import recipe_problems

    problems = [
        {"file": str(p.file), "key": p.key, "message": p.message, "hint": p.hint} for p in checked.problems
    ]
    inv = checked.inventory
    warnings: list[str] = []
    if inv is not None:
        for name, lane in sorted(inv.lanes.items()):
            found = []
            if "launch" in lane.raw:
                try:
                    found = recipe_problems(inv, launch_recipe(inv, name))
                except SparkfleetError as exc:
                    found = [("launch", exc)]
            found += _engram_problems(inv, name)
            warnings += _launch_warnings(inv, name)
            for key, exc in found:
                message = exc.message.removeprefix(f"{lane.recipe_path}: ")
                problems.append(
                    {"file": str(lane.recipe_path), "key": key, "message": message, "hint": exc.hint}
                )
    return {
        "ok": not problems,
        "root": str(checked.root),
        "problems": problems,
        "hosts": sorted(inv.hosts) if inv else [],
        "lanes": {name: list(lane.hosts) for name, lane in sorted(inv.lanes.items())} if inv else {},
        "pins": len(inv.pins) if inv else 0,
        "unresolved_pins": sorted(n for n, p in inv.pins.items() if not p.resolved) if inv else [],
        "warnings": warnings,
    }


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
