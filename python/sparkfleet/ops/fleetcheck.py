"""`sparkfleet inventory check`: every problem of the fleet, and what `launch` would still refuse.

The inventory's own check (schema and cross-file) knows nothing of launch; this one adds, per
lane, every check `launch` runs before touching a node (recipe_problems), the lane's [engram]
wiring as launch and `engram pack` resolve it, and warnings for what launch refuses today (an
unresolved image pin). The CLI renders the record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..base.errors import SparkfleetError
from ..engram.config import launch_wiring
from ..fleet.inventory import Inventory, InventoryCheck, check
from ..lane.recipe import launch_recipe
from ..lane.spec import recipe_problems


def check_fleet(root: Path | None = None) -> dict[str, Any]:
    """Check the fleet at `root` (or the nearest parent holding hosts/fleet.toml) and report."""
    return inventory_report(check(root))


def _engram_problems(inv: Inventory, lane_name: str) -> list[tuple[str, SparkfleetError]]:
    """The lane's [engram] wiring as launch and `engram pack` resolve it, for every host."""
    try:
        for host in inv.lane(lane_name).hosts:
            launch_wiring(inv, lane_name, host, False)
    except SparkfleetError as exc:
        return [("engram", exc)]
    return []


def _launch_warnings(inv: Inventory, lane_name: str) -> list[str]:
    """Not inventory errors, but what `launch` would still refuse today: an image pin not resolved."""
    lane = inv.lane(lane_name)
    if lane.sections.launch is None:
        return []
    try:
        recipe = launch_recipe(inv, lane_name)
    except SparkfleetError:
        return []
    image = recipe.image
    if recipe.runtime in ("docker", "podman") and image is not None and not image.resolved:
        return [f"lane {lane_name}: launch refuses until image pin {image.name} is resolved (pins resolve)"]
    return []


def inventory_report(checked: InventoryCheck) -> dict[str, Any]:
    """The check's record: schema and cross-file problems, then what `launch` would refuse per lane."""
    problems = [
        {"file": str(p.file), "key": p.key, "message": p.message, "hint": p.hint} for p in checked.problems
    ]
    inv = checked.inventory
    warnings: list[str] = []
    if inv is not None:
        for name, lane in sorted(inv.lanes.items()):
            found = []
            if lane.sections.launch is not None:
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
