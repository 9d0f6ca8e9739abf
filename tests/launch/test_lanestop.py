"""What trips a lane-scoped watchdog ([watchdog] scope = "lane"), read from a lane's status alone.

The real stop over real nodes is tests/launch/test_gates_fleet.py
(test_lane_scoped_watchdog_stops_every_node_and_is_not_restarted); here, the decision.
"""

from __future__ import annotations

from sparkfleet.fleet import inventory
from sparkfleet.lane.recipe import launch_recipe
from sparkfleet.launch.lanestop import trip
from sparkfleet.launch.report import LaneStatus, RankStatus
from sparkfleet.remote.wire import ErrorKind
from support.lanefleet import repo_fleet


def _rank(host: str, rank: int, running: bool, detail: str = "", code: int | None = None) -> RankStatus:
    return RankStatus(host, rank, f"sparkfleet-l-r{rank}", running, code, detail, None, 1, None, 0.0)


def _st(ranks: list[RankStatus], errors: list[dict] | None = None) -> LaneStatus:
    running = sum(r.running for r in ranks)
    return LaneStatus("", "l", False, ranks, running, 2, "dgx1", 8000, None, errors or [])


MEMSTOP = "memory watchdog: MemAvailable 0.4 GiB fell under the floor 0.5 GiB"


def test_a_nodes_recorded_watchdog_stop_trips_the_lane():
    st = _st([_rank("dgx1", 0, True)], [{"host": "dgx2", "error": MEMSTOP, "kind": ErrorKind.MEMSTOP}])
    assert trip(st) == f"dgx2's {MEMSTOP}"


def test_an_agent_refusal_worded_like_a_watchdog_stop_is_no_trip():
    """The kind decides, not the words: a node's refusal whose message happens to begin as a watchdog
    stop's does (a lane named "memory", a path in a message) stops nothing."""
    refused = {"host": "dgx2", "error": MEMSTOP, "code": 2, "kind": ErrorKind.REFUSED}
    assert trip(_st([_rank("dgx1", 0, True)], [refused])) is None


def test_a_dead_rank_trips_the_lane_naming_how_it_ended():
    st = _st([_rank("dgx1", 0, True), _rank("dgx2", 1, False, "exited", 137)])
    assert trip(st) == "rank 1 on dgx2 is down (exited, code 137)"


def test_no_trip_when_all_run_when_nothing_runs_or_a_host_only_did_not_answer():
    assert trip(_st([_rank("dgx1", 0, True), _rank("dgx2", 1, True)])) is None
    assert trip(_st([_rank("dgx1", 0, False, "exited", 0), _rank("dgx2", 1, False, "exited", 0)])) is None
    unreachable = [{"host": "dgx2", "error": "powered off or unreachable: timeout", "code": 4}]
    assert trip(_st([_rank("dgx1", 0, True)], unreachable)) is None  # unseen is not stopped on a guess


def test_the_exl3_lane_declares_the_kits_lane_wide_stop(tmp_path):
    """portable_pair.py watch() stops both nodes: the recipe says scope = "lane"; others keep "rank"."""
    inv = inventory.load(repo_fleet(tmp_path / "fleet"))
    assert launch_recipe(inv, "dsv41-flash-exl3-2x").watchdog_scope == "lane"
    assert launch_recipe(inv, "dsv41-flash-4x-mia").watchdog_scope == "rank"
