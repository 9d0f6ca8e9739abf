"""Relaunch a frozen generation: the lane's last good one (`rollback`) or a release's (`--to`,
`launch --release`).

`generations.rollback` is pure (stop, plan and launch are its arguments); this module wires it to
the lane's lifecycle and decides what the CLI used to: a release's image is pulled by digest on
every host before anything stops, and a generation that served NAS weights (by the operator's
--allow-nas-weights) is relaunched the same way.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..images.load import load_pushed
from ..lane.recipe import launch_recipe
from .generations import find_generation, last_good, rollback, rollback_inventory
from .lane import launch, stop
from .plan import dry_run
from .release import load_release, verified_release
from .report import LaunchReport

if TYPE_CHECKING:
    from ..fleet.inventory import Inventory


def release_as_generation(
    inv: Inventory, lane: str, name: str, *, verify: bool = True
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Release NAME as a generation record (what `launch --release` runs), and the release itself:
    verified against the registry, unless `verify` is off (a dry run, which contacts nothing)."""
    rel = verified_release(inv.root, lane, name) if verify else load_release(inv.root, lane, name)
    img = rel["image"]
    gen = {"id": rel["generation"], "lane": lane, "recipe_text": rel["recipe_text"],
           "fleet_text": rel["fleet_text"], "recipe_sha256": rel["recipe_sha256"],
           "image": {"ref": f"{img['registry']}/{img['repo']}@{img['digest']}"}, "release": name}  # fmt: skip
    return gen, rel


def release_generation(
    inv: Inventory, lane: str, name: str, on_event: Callable[[str], None] = lambda _msg: None
) -> dict[str, Any]:
    """Release NAME's frozen generation, verified against the registry, with its image pulled by
    digest on every host first."""
    gen, rel = release_as_generation(inv, lane, name)
    with tempfile.TemporaryDirectory(prefix="sparkfleet-release-") as tmp:
        frozen = rollback_inventory(gen, Path(tmp))
        launch = frozen.lane(lane).sections.launch
        if launch is not None and launch.image_build is not None:
            load_pushed(frozen, launch_recipe(frozen, lane), rel["image"], on_event=on_event)
    return gen


def release_inventory(
    inv: Inventory, lane: str, name: str, workdir: Path, on_event: Callable[[str], None] = lambda _msg: None
) -> Inventory:
    """`launch LANE --release NAME`: the release's own fleet file and recipe (an inventory in
    `workdir`), after every host pulled its image by digest."""
    return rollback_inventory(release_generation(inv, lane, name, on_event), workdir)


@dataclass
class RolledBack:
    """`rollback`'s result: the good generation relaunched, the launch's report, whether it is up."""

    good: dict[str, Any]
    report: LaunchReport

    @property
    def ok(self) -> bool:
        return bool(self.report.ready and self.report.ready.ok)


def rollback_lane(
    inv: Inventory,
    lane: str,
    *,
    release_name: str | None = None,
    canary: bool = True,
    allow_drift: bool = False,
    on_event: Callable[[str], None] = lambda _msg: None,
) -> RolledBack:
    """Stop LANE and relaunch its last good generation (or release NAME's) on every host.

    Every launch check runs on the frozen generation before the running lane is stopped.
    """
    target = release_generation(inv, lane, release_name, on_event) if release_name else None
    # the good generation served NAS weights by the operator's --allow-nas-weights: so does its rollback
    back_to = last_good(inv.root, lane) if target is None else find_generation(inv.root, lane, target["id"])
    nas_ok = bool((back_to or {}).get("nas_weights"))
    good, report = rollback(
        inv.root,
        lane,
        stop=lambda: stop(inv, lane, by="sparkfleet rollback"),
        plan=lambda old: dry_run(old, lane),  # every launch check, before the running lane is stopped
        launch=lambda old: launch(
            old,
            lane,
            canary=canary,
            allow_drift=allow_drift,
            generations_root=inv.root,
            on_event=on_event,
            allow_nas_weights=nas_ok,
        ),  # fmt: skip
        target=target,
    )
    return RolledBack(good, report)
