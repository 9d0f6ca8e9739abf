"""One lane as a launch-side verb runs it: the inventory in force, the lane, its recipe, where its
generations are recorded; resolved once at the top of a verb and handed down.

Everything below the verb (the gates, the start, the readiness watch, stop, status, logs) reads
this record instead of looking the lane up by name again, so a replica's or a release's view of the
inventory, chosen once, is the one every step sees: a step that re-read `inv.lane(name)` from
another inventory would start, stop or record a different copy than the one the operator named.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ..fleet.inventory import Host, Inventory, Lane
from ..lane.recipe import LaunchRecipe, launch_recipe
from ..lane.replicas import generations_root, instance_name, replica_flag, replica_inventory, replica_of


@dataclass(frozen=True)
class LaneRun:
    """The lane a verb acts on, with what every step below it needs."""

    inv: Inventory  # the inventory in force: the fleet's, or a replica's or a release's view of it
    lane: Lane  # as `inv` has it: a replica's copy runs on that copy's hosts
    replica: int  # which copy of the lane ([gateway] replicas); 0 is the lane's own hosts
    home: Path  # where the lane's generations are recorded (a replica records in its own folder)

    @property
    def name(self) -> str:
        return self.lane.name

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.lane.hosts

    @cached_property
    def recipe(self) -> LaunchRecipe:
        """The lane's [launch] recipe, with pins resolved against `inv`: read once, when a step
        first needs it, so that stopping a lane never depends on its [launch] table still parsing
        (the ranks it started run whatever the recipe says now)."""
        return launch_recipe(self.inv, self.lane.name)

    @property
    def again(self) -> str:
        """What a hint adds to name this copy (` --replica N`; `` for the lane's own hosts)."""
        return replica_flag(self.lane)

    @property
    def instance(self) -> str:
        """How output names this copy: LANE, or LANE#N for replica N."""
        return instance_name(self.lane.name, self.replica)

    def host(self, name: str) -> Host:
        return self.inv.host(name)


def lane_run(inv: Inventory, lane_name: str, generations_home: Path | None = None) -> LaneRun:
    """The lane as `inv` has it (a replica view stays that replica); its generations under
    `generations_home`, else where its copy records them."""
    lane = inv.lane(lane_name)
    replica = replica_of(lane)
    home = generations_home or generations_root(inv.root, lane.name, replica)
    return LaneRun(inv, lane, replica, home)


def replica_run(inv: Inventory, lane_name: str, replica: int) -> LaneRun:
    """Replica `replica` of the lane (refused, naming the copies, when the recipe has no such copy)."""
    return lane_run(replica_inventory(inv, lane_name, replica), lane_name)
