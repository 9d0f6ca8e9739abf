"""What a launch did: the ranks it started, readiness, the gates' report, the generation it recorded.

A record of its own so that the plan, the gates and the generation history can name a launch's
report without importing the lifecycle that produced it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .preflight import PreflightReport
from .readiness import ReadyReport
from .weights import weights_note


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

    def weights_note(self) -> str:
        """The line "weights from NAS on dgx2 (10 files)" when --allow-nas-weights let such a rank through."""
        return weights_note(self.nas_weights)
