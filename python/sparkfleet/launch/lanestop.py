"""A lane-wide watchdog ([watchdog] scope = "lane"): one rank's stop stops the lane.

Why: the EXL3 kit's controller (release/runtime/tools/portable_pair.py watch(), at 878e0ee) stops
BOTH nodes' containers when either host's MemAvailable is under 512 MiB, or either container is
not running, was OOM-killed or restarted, and never restarts them. sparkfleet's memory watchdog
runs on each node and can only stop that node's ranks (a node does not reach its peers); the
survivors then sit in a collective with a dead peer, holding their memory. So the lane-wide stop
is made where sparkfleet sees every node at once: the controller. `status` (the CLI) and
`sparkfleet watch` read every node; when one recorded a watchdog trip (memstop.json) or a rank
is down while others run, they stop the rest, say why, and note it on the lane's generation.
With scope = "rank" (the default) nothing here acts: a lane keeps the old behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.errors import SparkfleetError
from ..remote.wire import ErrorKind
from .generations import load_all, locked, save
from .lane import lane_status, stop_lane
from .lanerun import LaneRun
from .report import LaneStatus


@dataclass(frozen=True)
class LaneStop:
    """What the lane-wide watchdog did: why, and each stop's result (as lane.stop returns them)."""

    lane: str
    why: str
    stopped: list[dict]

    @property
    def message(self) -> str:
        was = [r for r in self.stopped if r.get("was_running")]
        ranks = ", ".join(f"{r.get('name', '?')} on {r['host']}" for r in was)
        return f"watchdog scope = lane: stopped {ranks or 'nothing left running'} because {self.why}"


def trip(st: LaneStatus) -> str | None:
    """Why a lane-scoped lane must stop now: a node's watchdog recorded a stop, or a recorded rank
    is down, while some rank still runs. None when nothing tripped or nothing is left to stop. A
    host that did not answer is no trip: what cannot be seen is not stopped on a guess."""
    if st.running == 0:
        return None
    why = [f"{e['host']}'s {e['error']}" for e in st.errors_of(ErrorKind.MEMSTOP)]
    why += [
        f"rank {r.rank} on {r.host} is down ({r.detail or 'exited'}"
        + (f", code {r.returncode})" if r.returncode is not None else ")")
        for r in st.ranks
        if not r.running and not r.orphan_pid
    ]
    return "; ".join(why) or None


def enforce(run: LaneRun, st: LaneStatus) -> LaneStop | None:
    """Stop the whole lane when its recipe says scope = "lane" and `st` shows a trip; else None."""
    recipe = run.recipe
    if recipe.watchdog_scope != "lane":
        return None
    why = trip(st)
    if why is None:
        return None
    results = stop_lane(run, recipe.timeouts.stop_s, by=f"the lane watchdog ({why})")
    done = LaneStop(run.name, why, results)
    _note(run, done.message)
    return done


def status_enforced(run: LaneRun) -> tuple[LaneStatus, LaneStop | None]:
    """The lane's status after the lane-wide watchdog acted on it (when it had to): what `status`
    shows, with the stop and its reason among the errors."""
    st = lane_status(run)
    done = enforce(run, st)
    if done is None:
        return st, None
    after = lane_status(run)
    after.errors.append({"host": "lane", "error": done.message})
    after.ok = False
    return after, done


def _note(run: LaneRun, message: str) -> None:
    """The lane's newest generation says why it stopped (history shows it); a read-only root or
    a lock held elsewhere leaves it unsaid, never the stop undone."""
    home, lane_name = run.home, run.name  # a replica's history is its own
    try:
        with locked(home, lane_name):
            gens = load_all(home, lane_name)
            if gens:
                gens[-1]["stopped_why"] = message
                save(home, gens[-1])
    except (OSError, SparkfleetError):
        return
