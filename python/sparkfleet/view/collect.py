"""Build the views of one lane and one host from the fleet's records and its node agents.

A lane: its ranks as `sparkfleet status` sees them (the node agents' records and the head's
/health and /v1/models), its generations (the serving one, and whether the newest was stopped),
its newest bench report, its incident bundles and its supervisor's state file. A host: the node
agent's `host-facts` answer (node/hostread.py) under a time bound, and what fleet.toml and the
recipes say it must keep (the NVMe reserve, the lanes' memory floors).

Each function answers for one lane or one host and never raises for what a node or a file says:
a failure is an error string in the view. `refresh.py` calls them in the background.
"""

from __future__ import annotations

import time

from ..base.errors import SparkfleetError
from ..fleet.inventory import Inventory, state_dir_of
from ..lane.recipe import launch_recipe
from ..lane.replicas import generations_home
from ..launch.generations import current, load_all
from ..launch.lane import status
from ..node.hostread import StagedPin
from ..node.protocol import HostFactsRequest
from ..ops import watchstate
from ..remote.nodecall import ask_host
from . import lanefiles
from .snapshot import HostView, LaneView


def launched_lanes(inv: Inventory) -> list[str]:
    """The lanes with a [launch] table (the others are staged, never served), sorted."""
    return sorted(n for n in inv.lanes if inv.lanes[n].sections.launch is not None)


def lane_view(inv: Inventory, name: str) -> LaneView:
    """One lane now (asks its hosts' agents, as `sparkfleet status` does)."""
    lane = inv.lane(name)
    recipe = launch_recipe(inv, name)
    home = generations_home(inv, name)
    gens = load_all(home, name)
    newest = gens[-1] if gens else None
    wanted = bool(newest and newest["status"] in ("ready", "started") and not newest.get("stopped_at"))
    errors: list[str] = []
    running = 0
    started: list[float] = []
    endpoints: dict = {}
    try:
        st = status(inv, name, generations_root=home)
        running = st.running
        started = [r.started_at for r in st.ranks if r.running]
        endpoints = st.endpoints or {}
        errors = [f"{e['host']}: {e['error']}" for e in st.errors]
    except SparkfleetError as exc:
        errors = [exc.message]
    up = running == len(lane.hosts) and not errors
    ready = up and endpoints.get("health") == 200 and endpoints.get("models_status") == 200
    gen = current(home, name) if running else None
    nas = (gen or {}).get("nas_weights") or {}
    reference_tps, floor_pct = lanefiles.reference(lane)
    return LaneView(
        lane=name,
        hosts=tuple(lane.hosts),
        head=recipe.world.head,
        port=recipe.port,
        wanted=wanted,
        up=up,
        ready=ready,
        ranks_running=running,
        ranks_expected=len(lane.hosts),
        started_at=min(started) if started else None,
        ready_timeout_s=recipe.timeouts.ready_s,
        memory_floor_bytes=recipe.memory.floor,
        generation=gen["id"] if gen else None,
        generation_good=bool(gen and gen.get("good")),
        image=((gen or {}).get("image") or {}).get("ref"),
        nas_weight_files={
            h: int(v.get("files", 0)) for h, v in nas.items() if isinstance(v, dict)
        } if isinstance(nas, dict) else {},
        errors=tuple(errors),
        bench=lanefiles.newest_bench(lanefiles.reports_dir(lane)),
        reference_tps=reference_tps,
        decode_floor_pct=floor_pct,
        incidents=lanefiles.incidents(lane.recipe_path.parent / "incidents"),
        supervisor=watchstate.read(home, name),
    )  # fmt: skip


def host_pins(inv: Inventory, host: str) -> list[dict]:
    """Every repo revision the host's lanes need, with the lane's patterns (one entry per pin)."""
    out: dict[tuple, dict] = {}
    for lane in inv.lanes_of(host):
        for m in lane.models:
            entry = {"pin": m.pin, "repo": m.repo, "revision": m.revision,
                     "include": list(m.include), "exclude": list(m.exclude)}  # fmt: skip
            out.setdefault((m.pin, m.include, m.exclude), entry)
    return list(out.values())


def host_floor(inv: Inventory, host: str) -> int | None:
    """The highest memory floor of the served lanes placed on `host` (None: no served lane there)."""
    floors = []
    for lane in inv.lanes_of(host):
        if lane.sections.launch is not None:
            try:
                floors.append(launch_recipe(inv, lane.name).memory.floor)
            except SparkfleetError:
                continue
    return max(floors) if floors else None


def host_view(inv: Inventory, name: str, timeout_s: float) -> HostView:
    """One host's facts from its agent, answered within `timeout_s` or shown as unreachable."""
    host = inv.host(name)
    base = {
        "host": name,
        "lanes": tuple(lane.name for lane in inv.lanes_of(name)),
        "nvme_reserve_bytes": host.reserve_bytes,
        "memory_floor_bytes": host_floor(inv, name),
    }
    req = HostFactsRequest(
        str(host.local_hub), str(host.nas_hub), str(state_dir_of(host)), host_pins(inv, name)
    )
    t0 = time.monotonic()
    try:
        ans = ask_host(inv, name, req, timeout=timeout_s)
    except SparkfleetError as exc:
        return HostView(reachable=False, error=exc.message[:300], **base)
    took = time.monotonic() - t0
    mem, disk = ans.get("memory") or {}, ans.get("disk") or {}
    staged = []
    for s in ans.get("staged") or []:
        try:
            staged.append(StagedPin(**s))
        except TypeError:
            continue
    rates = {k: float(v["value"]) for k, v in (ans.get("rates") or {}).items() if isinstance(v, dict)}
    problems = [str(ans[k]) for k in ("memory_error", "disk_error") if ans.get(k)]
    return HostView(
        reachable=True,
        error="; ".join(problems) or None,
        memory_available_bytes=mem.get("available"),
        memory_total_bytes=mem.get("total"),
        nvme_free_bytes=disk.get("free"),
        nvme_total_bytes=disk.get("total"),
        staged=tuple(staged),
        rates=rates,
        answered_s=took,
        **base,
    )
