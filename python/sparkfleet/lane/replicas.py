"""`[gateway] replicas`: copies of one lane's recipe on disjoint host sets, each its own lane instance.

Replica 0 is the lane itself (`lane.hosts`); replica N is the same recipe on `replicas[N]` (the
inventory checked the sets: known hosts, equal sizes, none shared). `replica_inventory` gives
launch, stop, status and watch an Inventory whose lane runs on that set, ranks by position, so
every gate, the lane key and the node records work unchanged: the records live in each host's own
state dir, and the sets share no host. Its generations (and so `stop`'s mark and the supervisor's
restart) live in their own folder (`generations_root`), so a copy's launch or stop never rewrites
replica 0's history. The gateway names the same instance `LANE#N` (serving.gateway.Worker).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..base.errors import SparkfleetError
from ..fleet.inventory import RECIPES_DIR, Inventory, Lane, replica_lane, replica_of_host, replica_sets

REPLICAS = "replicas"  # the recipe key ([gateway] replicas) and the folder of a copy's records


def replica_of(lane: Lane) -> int:
    """Which replica `lane` (maybe a `replica_inventory` view) runs as: its hosts' index, else 0."""
    sets = replica_sets(lane)
    return sets.index(tuple(lane.hosts)) if tuple(lane.hosts) in sets else 0


def instance_name(lane: str, replica: int) -> str:
    """How the gateway and the CLI name replica N of `lane` (`lane` itself for replica 0)."""
    return lane if replica == 0 else f"{lane}#{replica}"


def replica_flag(lane: Lane) -> str:
    """What a command's hint adds to name this replica (`` for replica 0)."""
    n = replica_of(lane)
    return f" --replica {n}" if n else ""


def replica_inventory(inv: Inventory, lane_name: str, replica: int) -> Inventory:
    """`inv` with `lane_name` on replica `replica`'s hosts ([world] ranks carried over by position).

    Replica 0 is `inv` itself. An index the recipe does not declare is refused, naming the copies
    it has."""
    lane = inv.lane(lane_name)
    sets = replica_sets(lane)
    if replica == 0:
        return inv
    if not 0 < replica < len(sets):
        have = ", ".join(f"{i}: {'+'.join(s)}" for i, s in enumerate(sets))
        raise SparkfleetError(
            f"lane {lane_name} has no replica {replica} ({lane.recipe_path}: {have})",
            hint="[gateway] replicas = [[...], [...]] declares them; replica 0 is the lane's own hosts",
        )
    return replace(inv, lanes={**inv.lanes, lane_name: replica_lane(lane, replica)})


def host_inventory(inv: Inventory, host: str) -> Inventory:
    """`inv` with every lane that `host` serves as copy N > 0 moved onto that copy's hosts: what a
    check of the host alone (`doctor HOST`) reads, so its rank, world and hints are its copy's."""
    for lane in inv.lanes_of(host):
        inv = replica_inventory(inv, lane.name, replica_of_host(lane, host) or 0)
    return inv


def generations_home(inv: Inventory, lane_name: str) -> Path:
    """Where the lane of `inv` (a replica view or the lane itself) records its generations."""
    return generations_root(inv.root, lane_name, replica_of(inv.lane(lane_name)))


def generations_root(root: Path, lane_name: str, replica: int) -> Path:
    """Where replica `replica`'s generations are recorded: the fleet root for replica 0, else
    recipes/<lane>/replicas/<N>/ (its own recipes/<lane>/generations beneath)."""
    return root if replica == 0 else root / RECIPES_DIR / lane_name / REPLICAS / str(replica)
