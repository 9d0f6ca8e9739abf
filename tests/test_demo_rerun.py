"""Issue 10.16: `sparkfleet demo --workdir D` twice crashed with FileExistsError while rebuilding the NAS."""

from __future__ import annotations

import pytest

from sparkfleet import inventory
from sparkfleet.demo.fleet import DEMO_LANE, write_demo_fleet
from sparkfleet.errors import SparkfleetError
from sparkfleet.stage import execute
from sparkfleet.stage.targets import requests_for_host


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
