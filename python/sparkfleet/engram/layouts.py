"""`engram pack` for either on-disk layout a lane's engine reads (engram/config.py says which).

"packed" (pack.py): DSV41EN1 files, the MiaAI TP4 lane. "sparse-shards" (sparse.py): sparse copies
of the checkpoint's shards, the Aiden lane. Both start from the same plan (the recipe, the
checkpoint's config.json and the shards' headers), so the ranks' ranges are decided in one place.
"""

from __future__ import annotations

from ..fleet.inventory import Inventory
from ..stage.execute import StageProgress
from . import pack as packed
from . import sparse
from .config import SPARSE_SHARDS
from .pack import PackPlan, PackResult


def plan(inv: Inventory, lane_name: str, host_name: str) -> PackPlan | sparse.SparsePlan:
    """What `host_name` would get, in its lane's layout. Writes nothing."""
    base = packed.plan(inv, lane_name, host_name)
    return sparse.sparse_plan(base) if base.spec.layout == SPARSE_SHARDS else base


def pack(
    inv: Inventory,
    lane_name: str,
    host_name: str,
    *,
    force: bool = False,
    full: bool = False,
    reserve_bytes: int | None = None,
    progress: StageProgress | None = None,
) -> PackResult:
    """Write `host_name`'s rows in its lane's layout (run on the host)."""
    base = packed.plan(inv, lane_name, host_name)
    if base.spec.layout == SPARSE_SHARDS:
        return sparse.pack_sparse(inv, base, force=force, reserve_bytes=reserve_bytes, progress=progress)
    return packed.pack(
        inv, lane_name, host_name, force=force, full=full, reserve_bytes=reserve_bytes, progress=progress
    )
