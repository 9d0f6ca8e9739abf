"""The demo fleet's lane carries an [engram] table over a real fixture checkpoint; both ranks pack it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sparkfleet.cli import main
from sparkfleet.demo.fleet import DEMO_HOSTS, DEMO_LANE, write_demo_fleet
from sparkfleet.demo.hubfixture import ENGRAM_REPO
from sparkfleet.engram.config import packed_dir
from sparkfleet.engram.ranges import HEADER_BYTES, pack_name
from sparkfleet.fleet import inventory
from sparkfleet.stage.targets import requests_for_host

# make test runs modules on xdist workers: the lanes this module launches on this machine share
# its ports (the rendezvous port 20000, the demo's serving ports), so every such module runs on
# one worker ("local_lanes"), one at a time
pytestmark = pytest.mark.xdist_group("local_lanes")

def test_demo_lane_packs_per_rank_and_is_not_staged(tmp_path):
    demo = write_demo_fleet(tmp_path, shard_bytes=64 * 1024)
    inv = inventory.load(demo.root)
    for host in DEMO_HOSTS:  # the engram pin is not one of the lane's models: staging is unchanged
        assert ENGRAM_REPO not in {r.repo for r in requests_for_host(inv, host, DEMO_LANE)}
    for host in DEMO_HOSTS:
        result = CliRunner().invoke(
            main, ["--root", str(demo.root), "engram", "pack", DEMO_LANE, host, "--json"]
        )
        assert result.exit_code == 0, result.output
        doc = json.loads(result.output)
        assert doc["source"]["origin"] == "nas" and doc["action"] == "packed"
    for layer in (1, 14):
        got = b"".join(
            (packed_dir(inv, DEMO_LANE, h) / pack_name(layer, r, 2)).read_bytes()[HEADER_BYTES:]
            for r, h in enumerate(DEMO_HOSTS)
        )
        assert got == demo.engram.packed_rows(layer)
    verified = CliRunner().invoke(
        main, ["--root", str(demo.root), "engram", "verify", DEMO_LANE, "dgx2", "--full"]
    )
    assert verified.exit_code == 0, verified.output
