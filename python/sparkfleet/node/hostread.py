"""The node side of the fleet view (`sparkfleet view`): one cheap read of a host's facts (agent
action `host-facts`).

What it reads, and nothing else: /proc/meminfo (or the injected $SPARKFLEET_MEMINFO), statvfs of
the local hub's filesystem, the host's measurements.json (the last NVMe/NAS rates staging and the
canary recorded), and per pin the staged tree's sizes against the snapshot's listing. It writes
nothing, starts nothing and opens no file larger than a tree listing: the exporter asks it at
most once per refresh interval, never per scrape.

Staged bytes: for each repo revision the host's lanes need, the files the lane's patterns select
from the NAS hub's listing (`trees/<commit>.json`, the local one when the NAS has none) are the
expected bytes; a local snapshot entry that resolves to a regular file of the listed size counts
as staged. Sizes only: whether the bytes verify is `sparkfleet verify`'s question, not a scrape's.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.errors import SparkfleetError
from ..base.jsonable import to_jsonable
from ..facts.hubcache import HubRoot, repo_folder
from ..facts.memory import read_memory
from ..roofline.machine import read_measurements_doc
from ..stage.plan import StageRequest
from .protocol import HostFactsRequest
from .watchdog import meminfo_source, shm_source

# The measurements a host's state dir may hold that the view shows (roofline/machine.py names them).
RATES = ("nvme_write", "nvme_read", "nas_read", "fabric_link")


@dataclass(frozen=True)
class StagedPin:
    """One repo revision on one host: what its lanes need against what the local tree holds."""

    pin: str
    repo: str
    commit: str | None
    expected_bytes: int | None  # None: no listing to compare against (error says why)
    staged_bytes: int
    expected_files: int
    staged_files: int
    error: str | None = None


def _listing(hub: HubRoot | None, repo: str, commit: str) -> dict[str, int] | None:
    if hub is None:
        return None
    doc = hub.tree_listing(repo, commit)
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict):
        return None
    out = {}
    for path, meta in files.items():
        size = meta.get("size") if isinstance(meta, dict) else None
        if isinstance(path, str) and isinstance(size, int) and not isinstance(size, bool) and size >= 0:
            out[path] = size
    return out


def _hub(path: Path, side: str) -> HubRoot | None:
    try:
        return HubRoot(path, side)
    except SparkfleetError:
        return None


def staged_pin(pin: dict[str, Any], local_hub: Path, nas_hub: Path) -> StagedPin:
    """Expected vs staged bytes of one pin on this host (never raises for what the hubs hold)."""
    request = StageRequest(
        nas_hub, local_hub, str(pin["repo"]), str(pin["revision"]),
        tuple(pin.get("include") or ()), tuple(pin.get("exclude") or ()),
    )  # fmt: skip
    name = str(pin.get("pin") or request.repo)
    local, nas = _hub(local_hub, "local hub"), _hub(nas_hub, "source")
    commit = None
    for hub in (nas, local):
        if hub is None:
            continue
        try:
            commit = hub.resolve_revision(request.repo, request.revision)
            break
        except SparkfleetError:
            continue
    if commit is None:
        return StagedPin(name, request.repo, None, None, 0, 0, 0, "revision on neither hub")
    try:
        listing = _listing(nas, request.repo, commit) or _listing(local, request.repo, commit)
    except SparkfleetError as exc:
        listing, error = None, exc.message
    else:
        error = None if listing else "no tree listing for this commit"
    if not listing:
        return StagedPin(name, request.repo, commit, None, 0, 0, 0, error)
    wanted = {p: s for p, s in listing.items() if request.selects(p)}
    base = local_hub / repo_folder(request.repo) / "snapshots" / commit
    staged_bytes = staged_files = 0
    for path, size in wanted.items():
        try:
            st = os.stat(base / path)  # follows the snapshot's link to its blob
        except OSError:
            continue
        if st.st_size == size and os.path.isfile(base / path):
            staged_bytes += size
            staged_files += 1
    expected = sum(wanted.values())
    return StagedPin(name, request.repo, commit, expected, staged_bytes, len(wanted), staged_files)


def _rates(state_dir: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for name, doc in read_measurements_doc(state_dir).items():
        if name in RATES and isinstance(doc, dict):
            value = doc.get("value")
            if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                out[name] = {"value": float(value), "measured_utc": str(doc.get("measured_utc") or "")}
    return out


def _disk(local_hub: Path) -> dict[str, Any]:
    probe = next((p for p in (local_hub, *local_hub.parents) if p.exists()), Path("/"))
    st = os.statvfs(probe)
    return {"path": str(probe), "free": st.f_bavail * st.f_frsize, "total": st.f_blocks * st.f_frsize}


def host_facts(req: HostFactsRequest) -> dict:
    """The agent action: memory, NVMe, staged bytes per pin, the last measured rates."""
    out: dict[str, Any] = {"hostname": socket.gethostname()}
    try:
        mem = read_memory(meminfo_source(), shm_source())
        out["memory"] = {"available": mem.available, "total": mem.total}
    except (OSError, ValueError) as exc:
        out["memory_error"] = str(exc)[:200]
    local_hub, nas_hub = Path(req.local_hub), Path(req.nas_hub)
    try:
        out["disk"] = _disk(local_hub)
    except OSError as exc:
        out["disk_error"] = str(exc)[:200]
    out["staged"] = [to_jsonable(staged_pin(p, local_hub, nas_hub)) for p in req.pins]
    out["rates"] = _rates(Path(req.state_dir)) if req.state_dir else {}
    return out
