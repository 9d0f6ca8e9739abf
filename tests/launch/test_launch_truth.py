"""Fleet commands that tell the truth: status exits non-zero unless every rank runs, logs shows
the last run after the lane stopped (and -f follows the head), and a host another lane occupies
is refused naming that lane unless --replace. Process runtime on this machine (LocalHost)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from sparkfleet.base.errors import ExitCode, SparkfleetError
from sparkfleet.cli import main
from sparkfleet.demo.hubfixture import build_nas_hub
from sparkfleet.fleet import inventory
from sparkfleet.launch import lane as lanes
from support.lanefleet import demo_recipe, free_port, write_fleet

# make test runs modules on xdist workers: the lanes this module launches on this machine share
# its ports (the rendezvous port 20000, the demo's serving ports), so every such module runs on
# one worker ("local_lanes"), one at a time
pytestmark = pytest.mark.xdist_group("local_lanes")

@pytest.fixture
def fleet(tmp_path):
    nas = build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=16 * 1024)
    spark = {"address": "localhost", "ssh_user": "root", "local_hub": str(tmp_path / "nvme" / "hub"),
             "nas_hub": str(nas.root), "state_dir": str(tmp_path / "state")}  # fmt: skip
    ghost = {**spark, "address": "ghost.invalid", "state_dir": str(tmp_path / "ghost")}
    root = write_fleet(
        tmp_path / "fleet",
        {"spark": spark, "ghost": ghost},
        {"alpha": demo_recipe(["spark"], free_port()), "beta": demo_recipe(["spark"], free_port()),
         "withghost": demo_recipe(["spark", "ghost"], free_port())},
    )  # fmt: skip
    inv = inventory.load(root)
    yield inv, root
    for lane in ("alpha", "beta"):  # never leave a rank behind, even on failure
        lanes.stop(inv, lane, 5)


def cli(root, *args):
    return CliRunner().invoke(main, ["--root", str(root), *args], catch_exceptions=False)


def test_status_exits_nonzero_unless_every_rank_runs(fleet):
    inv, root = fleet
    assert cli(root, "status", "alpha").exit_code == ExitCode.SHORTFALL  # nothing running: 0/1
    assert lanes.launch(inv, "alpha", allow_nas_weights=True).ready.ok
    up = cli(root, "status", "alpha")
    assert up.exit_code == ExitCode.OK and "1/1 ranks running" in up.stdout
    lanes.stop(inv, "alpha", 5)
    down = cli(root, "status", "alpha", "--json")
    assert down.exit_code == ExitCode.SHORTFALL and json.loads(down.stdout)["ok"] is False
    ghost = cli(root, "status", "withghost")  # real ssh to a name that does not resolve
    assert ghost.exit_code == ExitCode.UNREACHABLE
    assert "ghost: powered off or unreachable: ghost: ssh failed" in ghost.stdout


def test_logs_after_stop_show_the_last_run_and_follow_needs_a_running_lane(fleet, tmp_path):
    inv, root = fleet
    never = CliRunner().invoke(main, ["--root", str(root), "logs", "alpha"])
    assert never.exit_code == ExitCode.SHORTFALL and "never ran" in never.stderr
    assert lanes.launch(inv, "alpha", allow_nas_weights=True).ready.ok
    follow = subprocess.Popen(
        [sys.executable, "-m", "sparkfleet", "--root", str(root), "logs", "alpha", "-f"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        seen = []
        for line in follow.stdout:  # -f without HOST follows the head's log
            seen.append(line)
            if "fired up" in line:
                break
        assert any("RoCEnante ready" in ln for ln in seen)
    finally:
        follow.terminate()  # by its PID: we started it
        follow.wait(10)
    lanes.stop(inv, "alpha", 5)
    res = cli(root, "logs", "alpha")
    assert res.exit_code == ExitCode.OK
    assert "==> spark rank 0 (last run; the lane is stopped)" in res.stdout
    assert "The server is fired up and ready to roll!" in res.stdout
    assert str(tmp_path / "state" / "lanes" / "alpha" / "rank0.log") in res.stdout
    stopped = CliRunner().invoke(main, ["--root", str(root), "logs", "alpha", "spark", "-f"])
    assert stopped.exit_code == ExitCode.SHORTFALL and "nothing to follow" in stopped.stderr
    # a new run replaces the last one
    assert lanes.launch(inv, "alpha", allow_nas_weights=True).ready.ok
    assert "(last run" not in cli(root, "logs", "alpha").stdout


def test_occupied_host_is_refused_naming_the_lane_unless_replace(fleet):
    inv, root = fleet
    assert lanes.launch(inv, "alpha", allow_nas_weights=True).ready.ok
    with pytest.raises(SparkfleetError) as exc:
        lanes.launch(inv, "beta", allow_nas_weights=True)
    assert exc.value.exit_code == ExitCode.REFUSED
    assert "occupied by lane alpha (rank 0 on spark)" in exc.value.message
    assert "--replace" in exc.value.hint
    assert lanes.status(inv, "alpha").running == 1  # refused before touching anything
    refused = CliRunner().invoke(
        main, ["--root", str(root), "launch", "beta", "--json", "--allow-nas-weights"]
    )
    assert refused.exit_code == ExitCode.REFUSED and json.loads(refused.stdout)["code"] == ExitCode.REFUSED

    res = cli(root, "launch", "beta", "--replace", "--allow-nas-weights")
    assert res.exit_code == ExitCode.OK, res.output
    assert "replaced lane alpha" in res.stderr
    assert lanes.status(inv, "alpha").running == 0 and lanes.status(inv, "beta").running == 1
