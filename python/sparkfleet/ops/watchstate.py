"""The supervisor's state, as a file beside the lane's generations: what `sparkfleet view` reads.

Why a file: `sparkfleet watch LANE` runs as its own process (a unit beside the lane), and the fleet
view must answer "is anybody watching this lane, and what did the last probe say" without asking
it. The supervisor rewrites `recipes/<lane>/watch.json` after every probe (temp + fsync + replace,
a few hundred bytes); the reader checks that the recorded process is still the one that wrote it
(PID + start time + boot id), so a watch that died reads as "not running", never as "watching".
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..base import procs
from ..base.atomic import write_bytes
from ..fleet.inventory import RECIPES_DIR

WATCH_FILE = "watch.json"
# What the supervisor is doing: probing a healthy lane, restarting it, or stopped for a human.
STATES = ("watching", "failing", "restarting", "needs_human")
NOT_RUNNING = "not_running"  # no watch process (or the file's writer is gone): nobody is watching


@dataclass(frozen=True)
class WatchState:
    """One supervisor's last word on its lane."""

    lane: str
    state: str  # one of STATES
    pid: int
    start_ticks: int | None
    boot_id: str
    updated_at: float  # time.time() of this write
    probes: int
    failures: int
    restarts: int
    last_probe_at: float | None = None
    last_probe_ok: bool | None = None
    last_probe_latency_s: float | None = None
    last_error: str | None = None


def watch_path(root: Path, lane: str) -> Path:
    return Path(root) / RECIPES_DIR / lane / WATCH_FILE


def record(
    root: Path,
    lane: str,
    state: str,
    counts: tuple[int, int, int],
    ok: bool | None = None,
    latency_s: float | None = None,
    error: str | None = None,
) -> None:
    """Write this process's state for `lane` (a read-only fleet root is left alone: watching
    matters more than telling about it). `counts`: probes, failures, restarts so far."""
    pid = os.getpid()
    now = time.time()
    doc = WatchState(lane, state, pid, procs.start_ticks(pid), procs.boot_id(), now, *counts,
                     now if ok is not None else None, ok, latency_s, error)  # fmt: skip
    with contextlib.suppress(OSError):
        write_bytes(watch_path(root, lane), json.dumps(asdict(doc), indent=1).encode())


def _number(value: object) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def read(root: Path, lane: str) -> WatchState | None:
    """The lane's supervisor state when its writer still runs on this machine, else None.

    Whatever is in the file (hand-edited, truncated, another version's shape), the answer is a
    WatchState with checked fields or None: the view never fails on it.
    """
    try:
        doc = json.loads(watch_path(root, lane).read_bytes()[: 1 << 16])
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("state") not in STATES or doc.get("lane") != lane:
        return None
    pid, ticks, boot = doc.get("pid"), doc.get("start_ticks"), doc.get("boot_id")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not isinstance(boot, str):
        return None
    if not procs.same_process(pid, ticks if isinstance(ticks, int) else None, boot):
        return None
    counts = [doc.get(k) for k in ("probes", "failures", "restarts")]
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        return None
    ok = doc.get("last_probe_ok")
    error = doc.get("last_error")
    return WatchState(
        lane, doc["state"], pid, ticks if isinstance(ticks, int) else None, boot,
        _number(doc.get("updated_at")) or 0.0, *counts,  # type: ignore[arg-type]
        last_probe_at=_number(doc.get("last_probe_at")),
        last_probe_ok=ok if isinstance(ok, bool) else None,
        last_probe_latency_s=_number(doc.get("last_probe_latency_s")),
        last_error=error[:300] if isinstance(error, str) else None,
    )  # fmt: skip
