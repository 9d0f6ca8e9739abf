"""What a host needs staged: the inventory's lanes → StageRequests (models) and KitCheckouts (kits)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .plan import StageRequest

if TYPE_CHECKING:  # annotations only: `stage --source/--dest` reads no inventory
    from ..fleet.inventory import Inventory, Lane
    from ..fleet.kittrees import KitCheckout


def lanes_to_stage(inv: Inventory, host_name: str, lane_name: str | None = None) -> list[Lane]:
    """The lanes whose pins `host_name` holds: `lane_name` (refused when the host is in none of its
    copies), else every lane of the host."""
    inv.host(host_name)
    if lane_name is None:
        return inv.lanes_of(host_name)
    lane = inv.lane(lane_name)
    if host_name not in lane.replica_hosts:  # a host of any copy holds the lane's pins
        from ..base.errors import InventoryError
        from ..fleet.inventory import replica_sets

        copies = "; ".join(
            f"replica {i}: {', '.join(hosts)}" if i else ", ".join(hosts)
            for i, hosts in enumerate(replica_sets(lane))
        )
        raise InventoryError(
            f"host {host_name} is not in lane {lane_name} (hosts: {copies})",
            hint=f"see {lane.recipe_path}",
        )
    return [lane]


def requests_for_host(inv: Inventory, host_name: str, lane_name: str | None = None) -> list[StageRequest]:
    """Every model of every lane on `host_name` (or just `lane_name`), NAS hub → local hub, deduplicated."""
    host = inv.host(host_name)
    requests: list[StageRequest] = []
    for lane in lanes_to_stage(inv, host_name, lane_name):
        for model in lane.models:
            request = StageRequest(
                source_hub=host.nas_hub,
                dest_hub=host.local_hub,
                repo=model.repo,
                revision=model.revision,
                include=model.include,
                exclude=model.exclude,
            )
            if request not in requests:
                requests.append(request)
    return requests


def kits_for_host(inv: Inventory, host_name: str, lane_name: str | None = None) -> list[KitCheckout]:
    """Every pinned kit checkout the host's lanes (or just `lane_name`) bind ([[launch.trees]])."""
    from ..fleet.kittrees import kit_checkouts  # lazy, like the inventory: direct mode reads neither

    return kit_checkouts(lanes_to_stage(inv, host_name, lane_name), inv)
