"""The node contract: each agent action's request (and the probe's answer) as one record.

The controller builds a request record and `encode`s it to the JSON object the agent reads on
stdin; the agent `decode`s that object back into the same record (`sparkfleet.remote.wire`: the
codec, the field checks, the error kinds). Both ends name a field by its attribute, so a key is
spelled once, here. The wire is the JSON the two ends always exchanged, so a node running this
module answers a controller of the previous one as it did before, and the other way round.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..base.errors import SparkfleetError
from ..facts.fabric import FabricFacts
from ..fleet.inventory import LANE_NAME
from ..images.requests import ImageCommitRequest, ImagePullRequest, ImageStateRequest
from ..lane.manifest import ModelState, SnapshotFile
from ..remote.wire import LaneRequest, Record, Request, required

LOG_CHUNK = 256 * 1024  # a watch poll's most log bytes, unless the request names fewer


@dataclass(frozen=True)
class FabricProbe(Record):
    """Whether the lane needs the RoCE fabric detected, and the host's declared fabric IP."""

    needed: bool = False
    fabric_ip: str | None = None
    sysfs: str | None = None  # another sysfs root (tests); /sys when absent


@dataclass(frozen=True)
class ModelRequest(Record):
    """One model revision whose staged state the probe reads."""

    repo: str
    revision: str
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class KitsRequest(Record):
    """The kit checkouts a lane binds ([[launch.trees]]), for the agent to judge as verify does."""

    host: str
    state_dir: str
    lane: str | None = None
    checkouts: list[dict] = field(default_factory=list)  # fleet.kittrees.KitCheckout fields


@dataclass(frozen=True)
class ProbeRequest(Request):
    """What launch and doctor ask a node before anything starts."""

    ACTION: ClassVar[str] = "probe"
    memory: bool = False
    ports: list[int] = field(default_factory=list)
    fabric: FabricProbe | None = None
    models: list[ModelRequest] = field(default_factory=list)
    local_hub: str | None = None
    nas_hub: str | None = None
    verify_mode: str = "sample"
    kits: KitsRequest | None = None
    display: dict | None = None  # facts.display.DisplayDevice fields (+ parameters_dir)
    cache_seed: dict | None = None  # fleet.cacheseed.CacheSeed fields (+ "prepare")
    built_image: ImageStateRequest | None = None

    def local_hub_path(self) -> Path:
        """The local hub, which a probe of models (and doctor) needs: BadRequest without one."""
        return Path(required(self.ACTION, "local_hub", self.local_hub))

    def nas_hub_path(self) -> Path:
        """The NAS hub, which a probe of models needs: BadRequest without one."""
        return Path(required(self.ACTION, "nas_hub", self.nas_hub))

    def preparing_seed(self) -> ProbeRequest:
        """The request that also makes the cache seed's tree when the node lacks it (launch's)."""
        if self.cache_seed is None:
            return self
        return dataclasses.replace(self, cache_seed={**self.cache_seed, "prepare": True})

    @property
    def display_parameters_dir(self) -> str | None:
        """Where the display check reads nvidia_drm's parameters (another root in tests)."""
        return (self.display or {}).get("parameters_dir")

    @property
    def seed_prepare(self) -> bool:
        return bool((self.cache_seed or {}).get("prepare"))

    @property
    def seed_pin(self) -> str | None:
        return (self.cache_seed or {}).get("pin")


@dataclass(frozen=True)
class DoctorRequest(ProbeRequest):
    """The probe's questions and doctor's own: receipts, the image, the lane's ranks and key."""

    ACTION: ClassVar[str] = "doctor"
    receipt_roots: list[str] = field(default_factory=list)
    image: str | None = None
    runtime: str | None = None
    lane: str | None = None
    state_dir: str | None = None
    port: int | None = None
    host: str | None = None  # the fingerprint's host name (this node's own when absent)

    @classmethod
    def asking(cls, probe: ProbeRequest, **doctor: Any) -> DoctorRequest:
        """The probe's questions (launch's own, so doctor judges what launch would) and doctor's."""
        return cls(**{f.name: getattr(probe, f.name) for f in dataclasses.fields(probe)}, **doctor)


@dataclass(frozen=True)
class WatchdogSettings(Record):
    """The memory watchdog a start spawns beside the rank."""

    floor: int
    interval: float


@dataclass(frozen=True)
class StartRequest(Request):
    """Start one rank: its spec, its watchdog, and its kit checkouts judged again just before."""

    ACTION: ClassVar[str] = "start"
    spec: dict  # lane.spec.LaunchSpec fields (spec_from_dict)
    watchdog: WatchdogSettings | None = None
    kits: KitsRequest | None = None


@dataclass(frozen=True)
class StatusRequest(LaneRequest):
    ACTION: ClassVar[str] = "status"


@dataclass(frozen=True)
class StopRequest(LaneRequest):
    ACTION: ClassVar[str] = "stop"
    timeout: float = 30.0
    by: str | None = None  # who stops it, as `status` says later


@dataclass(frozen=True)
class WatchRequest(LaneRequest):
    """One readiness poll of a rank: log bytes since `offset`, and the HTTP probes when `port`."""

    ACTION: ClassVar[str] = "watch"
    rank: int = 0
    offset: int = 0
    max_bytes: int = LOG_CHUNK
    port: int | None = None


@dataclass(frozen=True)
class LogsRequest(LaneRequest):
    ACTION: ClassVar[str] = "logs"
    lines: int = 50


@dataclass(frozen=True)
class IncidentRequest(LaneRequest):
    ACTION: ClassVar[str] = "incident"
    lines: int = 200
    signatures: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)  # values to cut out (over stdin, never argv)


@dataclass(frozen=True)
class OccupancyRequest(Request):
    ACTION: ClassVar[str] = "occupancy"
    state_dir: str


@dataclass(frozen=True)
class FingerprintRequest(Request):
    ACTION: ClassVar[str] = "fingerprint"
    host: str | None = None
    image: str | None = None


@dataclass(frozen=True)
class CanarySettings(Record):
    backend: str
    bytes: int
    iters: int
    timeout: float
    pair_bytes: int = 4 << 20
    python: str = "python3"


@dataclass(frozen=True)
class CanaryRequest(Request):
    ACTION: ClassVar[str] = "canary"
    spec: dict  # lane.spec.LaunchSpec fields
    canary: CanarySettings
    master: str
    port: int


@dataclass(frozen=True)
class HostFactsRequest(Request):
    """The fleet view's one read of a host."""

    ACTION: ClassVar[str] = "host-facts"
    local_hub: str
    nas_hub: str
    state_dir: str | None = None
    pins: list[dict] = field(default_factory=list)  # node.hostread.staged_pin's pin fields


@dataclass(frozen=True)
class ApiKeyRequest(LaneRequest):
    ACTION: ClassVar[str] = "api-key"


@dataclass(frozen=True)
class ApiKeyWriteRequest(LaneRequest):
    ACTION: ClassVar[str] = "api-key-write"
    key: str


REQUESTS: dict[str, type[Request]] = {
    r.ACTION: r
    for r in (
        ApiKeyRequest, ApiKeyWriteRequest, OccupancyRequest, ImageStateRequest, ImageCommitRequest,
        ImagePullRequest, ProbeRequest, StartRequest, StopRequest, StatusRequest, WatchRequest,
        LogsRequest, DoctorRequest, CanaryRequest, FingerprintRequest, IncidentRequest,
        HostFactsRequest,
    )
}  # fmt: skip


def read_request(action: str, raw: str) -> Request:
    """`action`'s request from the JSON text on stdin: the fields every action builds names from
    checked before any is used, then every field's type (`decode`).

    The controller builds requests from a checked inventory, but a node may run another sparkfleet
    than the controller, and `lane` and `state_dir` become paths on the node (keys/<lane>.key,
    lanes/<lane>/): a lane that is a path, or a state dir that is not absolute, would read or write
    elsewhere. They are checked for every action, whether or not it reads them.
    """
    try:
        req = json.loads(raw or "{}")
    except ValueError as exc:
        raise SparkfleetError(f"the request is not JSON: {exc}") from None
    if not isinstance(req, dict):
        raise SparkfleetError(f"the request is a JSON {type(req).__name__}, not an object")
    lane = req.get("lane")
    if lane is not None and not (isinstance(lane, str) and LANE_NAME.fullmatch(lane)):
        raise SparkfleetError(f"the request's lane {str(lane)[:80]!r} is not a lane name")
    state_dir = req.get("state_dir")
    if state_dir is not None and not (
        isinstance(state_dir, str) and state_dir.startswith("/") and "\0" not in state_dir
        and ".." not in state_dir.split("/")
    ):  # fmt: skip
        raise SparkfleetError(f"the request's state_dir {str(state_dir)[:120]!r} is not an absolute path")
    rank = req.get("rank")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 0):
        raise SparkfleetError(f"the request's rank {str(rank)[:40]!r} is not a rank number")
    return REQUESTS[action].decode(req)


# ---- answers ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeAnswer:
    """A `probe` (or `doctor`) answer as the controller uses it: fabric, model states, the rest."""

    fabric: FabricFacts | None
    fabric_error: str | None
    models: list[ModelState]
    model_errors: list[str]
    memory: dict | None = None
    memory_error: str | None = None
    ports_in_use: list[int] = field(default_factory=list)
    kits: list[dict] = field(default_factory=list)
    display: dict | None = None
    cache_seed: dict | None = None
    image_state: dict | None = None

    @classmethod
    def decode(cls, answer: dict) -> ProbeAnswer:
        fabric = None
        if answer.get("fabric"):
            f = answer["fabric"]
            fabric = FabricFacts(f["fabric_ip"], tuple(f["hcas"]), int(f["gid_index"]), f["netdev"])
        err = answer.get("fabric_error")
        models, errors = [], []
        for m in answer.get("models", []):
            if "error" in m:
                errors.append(f"{m['repo']}: {m['error']}")
                continue
            models.append(
                ModelState(
                    repo=m["repo"],
                    commit=m["commit"],
                    files=tuple(SnapshotFile(f["path"], f["excluded"]) for f in m["files"]),
                    local_verified=m["local_verified"],
                    bad_paths=tuple(m.get("bad_paths", ())),
                    problems=tuple(m.get("problems", ())),
                )
            )
        return cls(
            fabric, f"{err['error']} ({err.get('hint')})" if err else None, models, errors,
            memory=answer.get("memory"), memory_error=answer.get("memory_error"),
            ports_in_use=list(answer.get("ports_in_use", [])), kits=list(answer.get("kits", [])),
            display=answer.get("display"), cache_seed=answer.get("cache_seed"),
            image_state=answer.get("image_state"),
        )  # fmt: skip
