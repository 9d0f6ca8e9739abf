"""One picture of the fleet: the records the exporter and the page both render.

Plain frozen dataclasses, filled by `collect.py` and read by `metrics.py` and `page.py`; a value
nobody could read is None (its metric is left out, its cell shows a dash), never a made-up zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..base.jsonable import to_jsonable
from ..node.hostread import StagedPin
from ..ops.watchstate import WatchState


@dataclass(frozen=True)
class BenchFigures:
    """The lane's newest successful bench report: its decode probe and roofline share."""

    report: str  # the report's name (recipes/<lane>/reports/<name>.json)
    created_at: float  # seconds since the epoch
    decode_tps: float | None
    ttft_s: float | None
    bound_pct: float | None  # roofline.decode.pct_of_bound


@dataclass(frozen=True)
class IncidentView:
    """One incident bundle under recipes/<lane>/incidents/."""

    name: str  # its folder (a UTC id)
    at: float
    kind: str
    reason: str


@dataclass(frozen=True)
class LaneView:
    lane: str
    hosts: tuple[str, ...]
    head: str
    port: int
    wanted: bool  # its newest generation was launched and not stopped: someone means it to run
    up: bool  # every rank runs and every host answered
    ready: bool  # up, and the head answers /health and /v1/models
    ranks_running: int
    ranks_expected: int
    started_at: float | None  # the earliest running rank's start
    ready_timeout_s: float  # the recipe's [launch.timeouts] ready_s
    memory_floor_bytes: int  # the recipe's [launch.memory] floor: its watchdog stops a rank under it
    generation: str | None = None  # the serving generation's id
    generation_good: bool = False
    image: str | None = None
    nas_weight_files: dict[str, int] = field(default_factory=dict)  # host -> non-optional files from the NAS
    errors: tuple[str, ...] = ()
    bench: BenchFigures | None = None
    reference_tps: float | None = None  # the recipe's decode figure ([view] or [[kit.reference]])
    decode_floor_pct: float = 80.0  # below this share of the reference the lane is slow
    incidents: tuple[IncidentView, ...] = ()  # newest first
    supervisor: WatchState | None = None

    @property
    def reference_pct(self) -> float | None:
        if self.bench is None or self.bench.decode_tps is None or not self.reference_tps:
            return None
        return 100.0 * self.bench.decode_tps / self.reference_tps


@dataclass(frozen=True)
class HostView:
    host: str
    reachable: bool  # the node's agent answered within the bound
    error: str | None
    lanes: tuple[str, ...]
    nvme_reserve_bytes: int
    memory_floor_bytes: int | None  # the highest floor of the lanes placed on it
    memory_available_bytes: int | None = None
    memory_total_bytes: int | None = None
    nvme_free_bytes: int | None = None
    nvme_total_bytes: int | None = None
    staged: tuple[StagedPin, ...] = ()
    rates: dict[str, float] = field(default_factory=dict)  # measurement name -> bytes/s
    answered_s: float | None = None  # how long the node took


@dataclass(frozen=True)
class GatewayView:
    """The gateway on the machine the view runs on: its process, its users' requests, its replicas."""

    running: bool
    requests: dict[tuple[str, str], int] = field(default_factory=dict)  # (user, HTTP status) -> count
    replicas_up: dict[str, int] = field(default_factory=dict)  # model -> replicas answering
    replicas: dict[str, int] = field(default_factory=dict)  # model -> replicas declared


@dataclass(frozen=True)
class FleetSnapshot:
    taken_at: float  # when the newest refresh finished
    refresh_s: float  # how long it took
    refreshes: int
    inventory_error: str | None
    lanes: tuple[LaneView, ...]
    hosts: tuple[HostView, ...]
    gateway: GatewayView | None = None


def snapshot_json(snap: FleetSnapshot) -> dict[str, Any]:
    """`view snapshot --json`: the records as JSON, the gateway's counts as {user, code, requests} rows."""
    doc = to_jsonable(snap)
    if snap.gateway is not None:
        rows = sorted(snap.gateway.requests.items())
        doc["gateway"]["requests"] = [{"user": u, "code": c, "requests": n} for (u, c), n in rows]
    return doc
