"""Issue 10.16: `sparkfleet demo --workdir D` twice crashed with FileExistsError while rebuilding the NAS."""

from __future__ import annotations

import pytest

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.demo.fleet import DEMO_LANE, write_demo_fleet
from sparkfleet.fleet import inventory
from sparkfleet.stage import execute
from sparkfleet.stage.targets import requests_for_host
from support.lanefleet import serve_demo_lane

# make test runs modules on xdist workers: the lanes this module launches on this machine share
# its ports (the rendezvous port 20000, the demo's serving ports), so every such module runs on
# one worker ("local_lanes"), one at a time
pytestmark = pytest.mark.xdist_group("local_lanes")

def test_demo_fleet_rebuilds_into_an_existing_workdir_and_the_rerun_copies_nothing(tmp_path):
    first = write_demo_fleet(tmp_path, shard_bytes=64 * 1024)
    inv = inventory.load(first.root)
    run = execute.stage(requests_for_host(inv, "dgx1", DEMO_LANE))
    assert run.ok and run.copied_bytes > 0
    second = write_demo_fleet(tmp_path, shard_bytes=64 * 1024)  # raised FileExistsError before
    assert second.fixture.weights.commits == first.fixture.weights.commits
    rerun = execute.stage(requests_for_host(inventory.load(second.root), "dgx1", DEMO_LANE))
    assert rerun.ok and rerun.copied_bytes == 0


def test_a_foreign_nas_dir_in_the_workdir_is_left_alone(tmp_path):
    foreign = tmp_path / "nas" / "precious.txt"
    foreign.parent.mkdir()
    foreign.write_text("not the demo's")
    with pytest.raises(SparkfleetError, match="not written by `sparkfleet demo`"):
        write_demo_fleet(tmp_path, shard_bytes=64 * 1024)
    assert foreign.read_text() == "not the demo's"


def test_demo_fresh_stops_the_lane_a_previous_demo_left_running_before_removing_it(tmp_path):
    """`make demo` while the demo lane ran: `rm -rf .demo` deleted the records, the servers kept
    their ports and `stop` found nothing. `demo --workdir D --fresh` stops them first, by record."""
    import os
    import subprocess
    import sys

    from sparkfleet.base import procs
    from sparkfleet.launch import lane as lanes

    workdir = tmp_path / "demo"
    fleet = write_demo_fleet(workdir, shard_bytes=16 * 1024)
    inv = inventory.load(fleet.root)
    try:
        old = serve_demo_lane(inv)
        proc = subprocess.run(
            [sys.executable, "-m", "sparkfleet", "demo", "--workdir", str(workdir), "--fresh",
             "--shard-mib", "1"],
            capture_output=True, text=True, timeout=300, env={**os.environ, "TERM": "dumb"},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"stopped the previous demo's {DEMO_LANE} rank 0 on dgx1" in proc.stdout
        assert all(procs.group_members(p) == [] for p in old)  # no server outlived its records
        assert "demo ok — next: `. .venv/bin/activate`" in proc.stdout
    finally:
        lanes.stop(inventory.load(fleet.root), DEMO_LANE, 5)


def test_demo_fresh_refuses_a_workdir_it_did_not_write(tmp_path):
    from click.testing import CliRunner

    from sparkfleet.cli import main

    (tmp_path / "mine.txt").write_text("keep")
    res = CliRunner().invoke(main, ["demo", "--workdir", str(tmp_path), "--fresh"])
    assert res.exit_code == 2 and "was not written by `sparkfleet demo`" in res.output
    assert (tmp_path / "mine.txt").read_text() == "keep"


def test_an_older_demos_workdir_marked_in_its_nas_is_still_the_demos(tmp_path):
    """A workdir an older demo wrote carries its marker in nas/ only: it is taken (and marked at the
    top), so `make demo` keeps working on an existing .demo/."""
    from sparkfleet.demo.fleet import DEMO_MARKER, claim_workdir

    (tmp_path / "nas").mkdir()
    (tmp_path / "nas" / DEMO_MARKER).write_text("written by sparkfleet demo\n")
    (tmp_path / "fleet").mkdir()
    claim_workdir(tmp_path)
    assert (tmp_path / DEMO_MARKER).is_file() and (tmp_path / "fleet").is_dir()
