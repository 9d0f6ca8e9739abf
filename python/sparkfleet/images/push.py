"""`image push LANE`: the built image into the registry, by digest, with a record of which digest
carries which built image ID (`<state>/registry/<lane>.json`, operator side).

Why apart from `release cut` (launch/release.py): a push is registry mechanics on a build (an
archive in, a digest out); a release freezes a promoted *generation*, a launch concept, and reads
this module's record to name its image.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..base.atomic import ensure_dir, write_bytes
from ..fleet.inventory import Inventory
from .archive import inspect_build
from .record import push_record_path
from .registry import Registry, push


def repo_of(lane: str) -> str:
    return f"sparkfleet/{lane}"


def push_lane(inv: Inventory, lane: str, source: Path, reg: Registry) -> dict[str, Any]:
    """Copy LANE's built image into the registry by digest; record digest <-> image ID."""
    inv.lane(lane)
    build = inspect_build(source)
    digest = push(reg, source, repo_of(lane), f"build-{build.image_id.split(':', 1)[-1][:12]}")
    record = {
        "lane": lane,
        "registry": reg.address,
        "repo": repo_of(lane),
        "digest": digest,
        "image_id": build.image_id,
        "pushed_at": time.time(),
    }
    path = push_record_path(lane)
    ensure_dir(path.parent, 0o700)
    write_bytes(path, json.dumps(record, indent=1).encode(), mode=0o600)
    return record
