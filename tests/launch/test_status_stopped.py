"""`status` of a lane that is not running says how its last run ended: stopped cleanly by whom and
when (as it says how a crashed rank exited), or that nothing was ever launched there; it exits 1
(the lane does not serve), as its help says. The demo, which stops its lane, ends by suggesting
commands that work as written."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from sparkfleet.base.errors import ExitCode
from sparkfleet.cli import main
from sparkfleet.cli.demo import next_steps
from sparkfleet.demo.fleet import DEMO_LANE
from sparkfleet.fleet import inventory
from sparkfleet.launch import lane as lanes
from support.demolane import staged_demo

pytestmark = pytest.mark.xdist_group("local_lanes")  # the demo lane's ports: one module at a time


@pytest.fixture
def staged(tmp_path):
    fleet = staged_demo(tmp_path)
    yield fleet
    lanes.stop(inventory.load(fleet.root), DEMO_LANE, 5)


def sf(root, *args: str):
    return CliRunner().invoke(main, ["--root", str(root), *args])


def test_status_says_who_stopped_the_lane_and_when(staged):
    never = sf(staged.root, "status", DEMO_LANE)
    assert never.exit_code == ExitCode.SHORTFALL
    assert f"no run recorded on its hosts: start it with `sparkfleet launch {DEMO_LANE}`" in never.output
    assert lanes.launch(inventory.load(staged.root), DEMO_LANE, canary=False).ready.ok
    assert sf(staged.root, "status", DEMO_LANE).exit_code == ExitCode.OK
    assert sf(staged.root, "stop", DEMO_LANE).exit_code == ExitCode.OK
    text = sf(staged.root, "status", DEMO_LANE)
    assert text.exit_code == ExitCode.SHORTFALL, text.output
    assert re.search(r"stopped cleanly at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d by sparkfleet stop \(\S+@\S+\)",
                     text.output), text.output  # fmt: skip
    assert "rank 1 dgx2: sparkfleet-demo-exl3-2x-r1 started " in text.output
    assert "stopped (SIGTERM) at " in text.output and f"`sparkfleet launch {DEMO_LANE}`" in text.output
    doc = json.loads(sf(staged.root, "status", DEMO_LANE, "--json").stdout)
    assert doc["ranks"] == [] and [e["rank"] for e in doc["ended"]] == [0, 1]
    assert all(e["stopped_by"].startswith("sparkfleet stop (") and e["stopped_at"] >= e["started_at"]
               for e in doc["ended"])  # fmt: skip


def test_the_demos_next_steps_work_as_written(staged):
    """Each `sparkfleet ...` command the demo's last line suggests, in order, exits 0."""
    assert lanes.launch(inventory.load(staged.root), DEMO_LANE, canary=False).ready.ok
    lanes.stop(inventory.load(staged.root), DEMO_LANE, 5, by="sparkfleet demo")  # where the demo ends
    line = next_steps(staged.root)
    assert f"SPARKFLEET_ROOT={staged.root}" in line
    commands = [c.split()[1:] for c in re.findall(r"`(sparkfleet [^`]+)`", line)]
    assert [c[0] for c in commands] == ["launch", "status"]
    for argv in commands:
        result = sf(staged.root, *argv)
        assert result.exit_code == ExitCode.OK, (argv, result.output)
