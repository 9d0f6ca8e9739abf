"""A launch-side verb resolves its lane once (`LaneRun`) and every step reads that record: a copy's
hosts, its generations folder, its hints and the name output gives it come from the one resolution."""

from __future__ import annotations

import pytest
from tests.support.replicafleet import two_copies

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.demo.fleet import DEMO_LANE
from sparkfleet.fleet import inventory
from sparkfleet.launch.lanerun import lane_run, replica_run
from sparkfleet.launch.verbrun import bind_candidates, launch_run, preview


@pytest.fixture(scope="module")
def inv(tmp_path_factory):
    return inventory.load(two_copies(tmp_path_factory.mktemp("lanerun")).root)


def test_replica_run_is_the_copy_on_its_own_hosts_and_folder(inv):
    own, copy = replica_run(inv, DEMO_LANE, 0), replica_run(inv, DEMO_LANE, 1)
    assert (own.hosts, own.replica, own.home, own.instance, own.again) == (
        ("dgx1",), 0, inv.root, DEMO_LANE, ""
    )
    assert (copy.hosts, copy.replica, copy.instance, copy.again) == (
        ("dgx2",), 1, f"{DEMO_LANE}#1", " --replica 1"
    )
    assert copy.home == inv.root / "recipes" / DEMO_LANE / "replicas" / "1"
    assert copy.recipe.world.head == "dgx2"  # the recipe is read against the copy's inventory
    assert copy.recipe is copy.recipe  # read once
    # a view resolved again (as the supervisor and status do) is the same copy, in the same folder
    assert lane_run(copy.inv, DEMO_LANE) == copy


def test_a_copy_the_recipe_does_not_declare_is_refused_naming_the_copies(inv):
    with pytest.raises(SparkfleetError, match=r"has no replica 2 .*0: dgx1, 1: dgx2"):
        replica_run(inv, DEMO_LANE, 2)


def test_launch_run_records_a_copy_under_the_fleet_root(inv):
    with launch_run(inv, DEMO_LANE, 1) as run:
        assert run.hosts == ("dgx2",)
        assert run.home == inv.root / "recipes" / DEMO_LANE / "replicas" / "1"


def test_preview_starts_the_copy_on_its_hosts_and_names_each_bind_source(inv):
    plan, ranks = preview(inv, DEMO_LANE, 1)
    assert [(r.start, r.rank, r.host) for r in ranks] == [(1, 0, "dgx2")]
    assert plan.specs["dgx2"].rank == 0
    assert ranks[0].argv and not any(k in ranks[0].env for k in ranks[0].unknown)
    lane = inv.lane(DEMO_LANE)
    found = bind_candidates(inv, DEMO_LANE, "dgx2")
    assert [c.repo for c in found] == [m.repo for m in lane.models]
    host = inv.host("dgx2")
    assert all(c.local.startswith(str(host.local_hub)) and c.nas.startswith(str(host.nas_hub)) for c in found)
