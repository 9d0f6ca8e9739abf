"""What a launch did (the ranks it started, readiness, the gates' report, the generation it
recorded), and what a lane is doing now (`status`).

Records of their own so that the plan, the gates, the generation history, the supervisor and the
CLI can name them without importing the lifecycle that produced them; their fields are the keys of
`status --json`, in that order.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..lane.readiness import ReadyReport
from ..lane.weights import weights_note
from ..remote.wire import ErrorKind
from .preflight import PreflightReport


@dataclass
class StartedRank:
    host: str
    rank: int
    name: str
    pid: int | None
    container_id: str | None
    log_path: str
    receipts_cleared: list[str]


@dataclass
class LaunchReport:
    lane: str
    started: list[StartedRank]
    ready: ReadyReport | None
    stopped_after_failure: bool = False
    preflight: PreflightReport | None = None
    boot_cache: dict[str, dict] = field(default_factory=dict)  # host -> warm/cold, key, dir
    generation: dict | None = None  # the lane generation this launch recorded (launch/generations)
    nas_weights: dict[str, dict] = field(default_factory=dict)  # host -> non-optional NAS files (allowed)
    notes: list[str] = field(default_factory=list)  # what the operator must do beside this launch
    # host -> what [launch.cache_seed] put in that rank's /cache before its serve: asset, asset_sha256,
    # files, copied, kept (copied = files: the rank's compilers started from the seed alone)
    cache_seed: dict[str, dict] = field(default_factory=dict)

    def weights_note(self) -> str:
        """The line "weights from NAS on dgx2 (10 files)" when --allow-nas-weights let such a rank through."""
        return weights_note(self.nas_weights)


@dataclass(frozen=True)
class RankStatus:
    """One rank's record on its node and whether it still runs (else how it ended)."""

    host: str
    rank: int
    name: str
    running: bool
    returncode: int | None
    detail: str
    orphan_pid: int | None  # the rank's parent is gone but its server still runs (stop ends it)
    pid: int | None
    container_id: str | None
    started_at: float


@dataclass
class LaneStatus:
    """A lane now: every recorded rank, the head's endpoints, and what could not be asked.

    `errors`: {host, error[, code], kind} per host that did not answer (code: its exit code,
    UNREACHABLE for a host ssh cannot reach) or whose memory watchdog stopped ranks; `kind` (a
    `node.protocol.ErrorKind`) is what a reader tests, and the JSON form leaves it out, as scripts
    have always read that form. `endpoints`: the head's {health, models_status, models} when rank 0
    runs and answered."""

    weights: str  # "weights from NAS on HOST (N files)" when the serving generation was let through so
    lane: str
    ok: bool
    ranks: list[RankStatus]
    running: int
    expected: int
    head: str
    port: int
    endpoints: dict | None
    errors: list[dict] = field(default_factory=list)
    # nothing recorded now: the last run's ranks, each {host, rank, name, started_at, stopped_at,
    # stopped_by, detail} (the stop's fields None where that run was not stopped by sparkfleet)
    ended: list[dict] = field(default_factory=list)

    @property
    def stopped_cleanly(self) -> bool:
        """No rank runs, and sparkfleet stopped every rank of the last run (none crashed or vanished)."""
        return not self.ranks and bool(self.ended) and all(e["stopped_at"] for e in self.ended)

    def to_dict(self) -> dict:
        """The JSON form (`status --json`): the fields as keys, in order (an error without its kind)."""
        out = dataclasses.asdict(self)
        out["errors"] = [{k: v for k, v in e.items() if k != "kind"} for e in out["errors"]]
        return out

    def errors_of(self, kind: ErrorKind) -> list[dict]:
        """The errors of one kind (e.g. the memory watchdog's stops)."""
        return [e for e in self.errors if e.get("kind") is kind]
