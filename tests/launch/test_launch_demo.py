"""The launch half of `make demo` on the embedded demo fleet: staged lane served, ready, stopped."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sparkfleet.cli import main
from sparkfleet.demo.fleet import DEMO_LANE, write_demo_fleet
from sparkfleet.demo.lane import run_demo_launch
from sparkfleet.engram import pack as engram_pack
from sparkfleet.fleet import inventory
from sparkfleet.launch import lane as lanes
from sparkfleet.stage import execute
from sparkfleet.stage.targets import requests_for_host

# make test runs modules on xdist workers: the lanes this module launches on this machine share
# its ports (the rendezvous port 20000, the demo's serving ports), so every such module runs on
# one worker ("local_lanes"), one at a time
pytestmark = pytest.mark.xdist_group("local_lanes")

def test_demo_lane_launches_after_staging(tmp_path):
    fleet = write_demo_fleet(tmp_path, shard_bytes=16 * 1024)
    inv = inventory.load(fleet.root)
    for host in inv.lane(DEMO_LANE).hosts:
        assert execute.stage(requests_for_host(inv, host, DEMO_LANE)).ok
        engram_pack.pack(inv, DEMO_LANE, host)
    doctor = CliRunner().invoke(main, ["--root", str(fleet.root), "doctor", DEMO_LANE])
    assert doctor.exit_code == 0, doctor.output  # a correct demo is green: no deploy-only ✗
    assert "✗" not in doctor.output and "secure_path" not in doctor.output
    lines: list[str] = []
    try:
        assert run_demo_launch(inv, DEMO_LANE, lines.append), "\n".join(lines)
    finally:
        lanes.stop(inv, DEMO_LANE, 5)
    text = "\n".join(lines)
    assert "rank 1 on dgx2: NODE_RANK=1 TP_SIZE=2 NNODES=2" in text
    assert "12 local + 3 NAS" in text  # page15 stays on the NAS
    assert "before_serve on dgx1 removed" in text
    assert "status: 2/2 ranks running; /health=200" in text
    assert "dgx1 rank 0 stopped" in text and "dgx2 rank 1 stopped" in text
    assert lanes.status(inv, DEMO_LANE).running == 0


def test_ctrl_c_during_the_demo_launch_says_one_consistent_thing(tmp_path, monkeypatch):
    """The demo's Ctrl-C said "stop: dgx1 rank 0 stopped…" and then "ranks still running"."""
    import pytest

    from sparkfleet.demo import lane as demo_launch
    from sparkfleet.launch.lane import LaunchInterrupted

    fleet = write_demo_fleet(tmp_path, shard_bytes=16 * 1024)
    inv = inventory.load(fleet.root)
    for host in inv.lane(DEMO_LANE).hosts:
        assert execute.stage(requests_for_host(inv, host, DEMO_LANE)).ok
    real = lanes.launch

    def interrupt(ranks):
        if any(r.running for r in ranks):
            raise KeyboardInterrupt

    def launch(i, lane, **kw):
        return real(i, lane, on_progress=interrupt, **kw)

    monkeypatch.setattr(demo_launch, "launch", launch)
    lines: list[str] = []
    try:
        with pytest.raises(LaunchInterrupted) as err:
            run_demo_launch(inv, DEMO_LANE, lines.append)
    finally:
        lanes.stop(inv, DEMO_LANE, 5)
    assert "stopped" in err.value.message and "still running" not in err.value.message
    assert not any(line.startswith("stop: ") for line in lines)  # nothing left for a second stop
    assert lanes.status(inv, DEMO_LANE).running == 0
