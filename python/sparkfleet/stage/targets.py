"""Which repos a host needs staged: the inventory's lanes → StageRequests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .plan import StageRequest

if TYPE_CHECKING:  # annotations only: `stage --source/--dest` reads no inventory
    from ..inventory import Inventory


def requests_for_host(inv: Inventory, host_name: str, lane_name: str | None = None) -> list[StageRequest]:
    """Every model of every lane on `host_name` (or just `lane_name`), NAS hub → local hub, deduplicated."""
    host = inv.host(host_name)
    if lane_name is not None:
        lane = inv.lane(lane_name)
        if host_name not in lane.replica_hosts:  # a host of any copy holds the lane's pins
            from ..errors import InventoryError
            from ..inventory import replica_sets

            copies = "; ".join(
                f"replica {i}: {', '.join(hosts)}" if i else ", ".join(hosts)
                for i, hosts in enumerate(replica_sets(lane))
            )
            raise InventoryError(
                f"host {host_name} is not in lane {lane_name} (hosts: {copies})",
                hint=f"see {lane.recipe_path}",
            )
        lanes = [lane]
    else:
        lanes = inv.lanes_of(host_name)
    requests: list[StageRequest] = []
    for lane in lanes:
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
