"""A second `launch` of a lane while the first still boots exits 75 (busy), as a second `stage` of a
hub does; once the lane runs, another launch is refused with 5 (refused), as another lane on the
hosts is. Both exited 2 (usage) before, or whatever the second launch ran into first (a canary
port the first held: 5)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from sparkfleet.base.errors import ExitCode
from sparkfleet.demo.fleet import DEMO_LANE, write_demo_fleet
from sparkfleet.fleet import inventory
from sparkfleet.launch import lane as lanes
from sparkfleet.stage import execute
from sparkfleet.stage.targets import requests_for_host

# launches the demo lane on this machine: one worker, one module at a time
pytestmark = pytest.mark.xdist_group("local_lanes")


def sparkfleet(root, *args: str, **kw):
    argv = [sys.executable, "-m", "sparkfleet", "--root", str(root), *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, **kw)  # fmt: skip


def test_a_second_launch_while_the_first_boots_is_busy_then_refused_once_it_runs(tmp_path):
    fleet = write_demo_fleet(tmp_path, shard_bytes=16 * 1024)
    inv = inventory.load(fleet.root)
    for host in inv.lane(DEMO_LANE).hosts:
        assert execute.stage(requests_for_host(inv, host, DEMO_LANE)).ok
    lock = fleet.root / "recipes" / DEMO_LANE / "generations" / lanes.LAUNCH_LOCK
    first = sparkfleet(fleet.root, "launch", DEMO_LANE)
    try:
        deadline = time.monotonic() + 60
        while not (lock.is_file() and lock.read_text().strip() == str(first.pid)):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first launch never took the lane's launch lock"
            time.sleep(0.05)
        second = sparkfleet(fleet.root, "launch", DEMO_LANE)
        out, err = second.communicate(timeout=120)
        assert second.returncode == ExitCode.BUSY, out + err
        assert f"another launch of {DEMO_LANE} (pid {first.pid}) holds" in err and "Traceback" not in err
        out, err = first.communicate(timeout=180)
        assert first.returncode == ExitCode.OK, out + err  # the busy one took nothing from it
        assert lanes.status(inv, DEMO_LANE).running == 2
        third = sparkfleet(fleet.root, "launch", DEMO_LANE)
        out, err = third.communicate(timeout=120)
        assert third.returncode == ExitCode.REFUSED, out + err
        assert f"lane {DEMO_LANE} is already running" in err and "--replace" in err
        assert lanes.status(inv, DEMO_LANE).running == 2  # the refused launch stopped nothing
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
        lanes.stop(inv, DEMO_LANE, 5)
