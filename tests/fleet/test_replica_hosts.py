"""`[gateway] replicas`: every copy's hosts hold the lane's pins, so staging and checks count them.

Before, only `lane.hosts` (replica 0) did: `stage dgx2 --lane L` was refused for a copy's host and
its staging unit staged nothing, so the copy could only read its weights from the NAS."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from tests.support.replicafleet import two_copies

from sparkfleet.cli import main
from sparkfleet.demo.fleet import DEMO_LANE
from sparkfleet.demo.hubfixture import DRAFTER_REPO, WEIGHTS_REPO
from sparkfleet.fleet import inventory

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    return two_copies(tmp_path_factory.mktemp("replicas"))


def run(root, *args: str):
    return CliRunner().invoke(main, ["--root", str(root), *args])


def test_a_copys_host_serves_the_lane(copies):
    from sparkfleet.fleet.inventory import replica_sets  # the one reader of the key, in the inventory

    inv = inventory.load(copies.root)
    lane = inv.lane(DEMO_LANE)
    assert lane.hosts == ("dgx1",)  # replica 0: launch's own hosts, unchanged
    assert replica_sets(lane) == [("dgx1",), ("dgx2",)]
    assert lane.replica_hosts == ("dgx1", "dgx2")
    assert [ln.name for ln in inv.lanes_of("dgx2")] == [DEMO_LANE]
    assert [ln.name for ln in inv.lanes_of("dgx1")] == [DEMO_LANE]


def test_stage_a_copys_host_plans_the_lanes_pins(copies):
    for args in (["dgx2", "--lane", DEMO_LANE], ["dgx2"]):  # by name, and as the staging unit runs it
        res = run(copies.root, "stage", *args, "--dry-run", "--json")
        assert res.exit_code == 0, res.output
        assert {p["repo"] for p in json.loads(res.output)["plans"]} == {WEIGHTS_REPO, DRAFTER_REPO}
    assert not copies.local_hub("dgx2").exists()  # a dry run writes nothing


def test_stage_lane_without_a_host_covers_every_copy(copies):
    res = run(copies.root, "stage", "--lane", DEMO_LANE, "--dry-run", "--json")
    assert res.exit_code == 0, res.output
    dry = json.loads(res.output)
    assert list(dry["space"]) == list(dry["nas_reads"]) == ["dgx1", "dgx2"]  # replica 0's host, then 1's


def test_a_host_of_no_copy_is_still_refused(copies, tmp_path):
    fleet = copies.root / "hosts" / "fleet.toml"
    text = fleet.read_text()
    try:
        dgx9 = f'[hosts.dgx9]\naddress = "localhost"\nlocal_hub = "{tmp_path / "hub"}"\n\n[hosts.dgx2]'
        fleet.write_text(text.replace("[hosts.dgx2]", dgx9))
        res = run(copies.root, "stage", "dgx9", "--lane", DEMO_LANE, "--dry-run")
        assert res.exit_code != 0
        assert f"host dgx9 is not in lane {DEMO_LANE} (hosts: dgx1; replica 1: dgx2)" in res.output
    finally:
        fleet.write_text(text)


def _env_checks(root, *target: str) -> tuple[str, dict[str, dict]]:
    res = run(root, "doctor", *target, "--json")
    report = json.loads(res.output)
    return report["target"], {c["host"]: c for c in report["checks"] if c["name"] == "env"}


def test_doctor_checks_a_copy_on_its_own_hosts(copies):
    target, env = _env_checks(copies.root, DEMO_LANE, "--replica", "1")
    assert target == f"{DEMO_LANE}#1" and list(env) == ["dgx2"]
    assert env["dgx2"]["ok"] and env["dgx2"]["detail"].startswith("rank 0/1: TP_SIZE=1"), env
    target, env = _env_checks(copies.root, DEMO_LANE)  # replica 0: the lane's own hosts, as before
    assert target == DEMO_LANE and list(env) == ["dgx1"] and env["dgx1"]["ok"], env
    # a host alone is checked as the copy it serves: rank 0 of replica 1, not "not in lane"
    target, env = _env_checks(copies.root, "dgx2")
    assert target == "dgx2" and env["dgx2"]["ok"] and env["dgx2"]["detail"].startswith("rank 0/1"), env
    refused = run(copies.root, "doctor", "dgx2", "--replica", "1")
    assert refused.exit_code != 0 and "--replica 1 names a copy of a lane; dgx2 is a host" in refused.output
    undeclared = run(copies.root, "doctor", DEMO_LANE, "--replica", "2")
    assert undeclared.exit_code != 0 and f"lane {DEMO_LANE} has no replica 2" in undeclared.output


def test_doctors_fix_for_a_copys_host_stages_it(tmp_path):
    """The fix doctor prints for a copy's unstaged host is a command that works and makes it green."""
    demo = two_copies(tmp_path)
    res = run(demo.root, "doctor", "dgx2", "--json")
    staged = [c for c in json.loads(res.output)["checks"] if c["name"] == "staged+verified"]
    assert len(staged) == 2 and not any(c["ok"] for c in staged)
    fix = f"sparkfleet stage dgx2 --lane {DEMO_LANE}"
    assert {c["hint"] for c in staged} == {fix}
    assert run(demo.root, *fix.split()[1:], "--json").exit_code == 0
    res = run(demo.root, "doctor", "dgx2", "--json")
    assert all(c["ok"] for c in json.loads(res.output)["checks"] if c["name"] == "staged+verified")


def test_a_copys_host_packs_its_ranks_engram_rows(tmp_path):
    """Engram packs are per rank, staged beside the weights: a copy's host packs the rows of its
    rank in its copy (rank 0 of a one-host copy), where it was refused as "not in lane"."""
    from sparkfleet.engram import pack as engram_pack

    demo = two_copies(tmp_path)
    inv = inventory.load(demo.root)
    done = engram_pack.pack(inv, DEMO_LANE, "dgx2")
    assert (done.host, done.rank, done.world, done.action) == ("dgx2", 0, 1, "packed")
    assert done.written and all((done.out_dir / name).is_file() for name in done.written)
