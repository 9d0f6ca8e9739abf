"""A --no-wait launch (how the lane unit starts a lane on its host) still records its generation."""

from __future__ import annotations

import json

import pytest

from sparkfleet.demo.hubfixture import build_nas_hub
from sparkfleet.fleet import inventory
from sparkfleet.launch import generations
from sparkfleet.launch import lane as lanes
from support.lanefleet import demo_recipe, free_port, write_fleet

# make test runs modules on xdist workers: the lanes this module launches on this machine share
# its ports (the rendezvous port 20000, the demo's serving ports), so every such module runs on
# one worker ("local_lanes"), one at a time
pytestmark = pytest.mark.xdist_group("local_lanes")

def test_no_wait_launch_records_a_started_generation(tmp_path):
    nas = build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=16 * 1024)
    host = {"address": "localhost", "ssh_user": "root", "local_hub": str(tmp_path / "nvme" / "hub"),
            "nas_hub": str(nas.root), "state_dir": str(tmp_path / "state")}  # fmt: skip
    inv = inventory.load(
        write_fleet(tmp_path / "fleet", {"spark": host}, {"demo": demo_recipe(["spark"], free_port())})
    )
    try:
        report = lanes.launch(inv, "demo", wait=False, canary=False, allow_nas_weights=True)
        gen = report.generation
        assert report.ready is None and gen["status"] == "started" and gen["boot"]["cache"] == "cold"
        assert gen["boot"]["per_host"]["spark"]["dir"].startswith(
            str(tmp_path / "state" / "bootcache" / "demo")
        )
        assert gen["memory"]["spark"].startswith("MemAvailable ") and gen["canary"] is None
        assert gen["cache_seed"] == {}  # no [launch.cache_seed]: no /cache was seeded
        saved = generations.load_all(inv.root, "demo")
        assert [g["id"] for g in saved] == [gen["id"]]
        assert json.loads(json.dumps(saved[0]))["recipe_sha256"] == gen["recipe_sha256"]
        assert generations.current(inv.root, "demo") is None  # not known to be up: nothing to promote
    finally:
        lanes.stop(inv, "demo", 5)


def test_history_reads_stopped_warm_boots_and_a_rollback_without_an_image(tmp_path):
    """A stopped generation reads `stopped` (not `ready`); the second boot of the same lane reads warm
    (the engine left its artifacts in the boot cache); a rollback of a lane without an image names
    its recipe, never `(None)`, and history says from which generation to which."""
    from click.testing import CliRunner

    from sparkfleet.cli import main

    nas = build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=16 * 1024)
    host = {"address": "localhost", "ssh_user": "root", "local_hub": str(tmp_path / "nvme" / "hub"),
            "nas_hub": str(nas.root), "state_dir": str(tmp_path / "state")}  # fmt: skip
    inv = inventory.load(
        write_fleet(tmp_path / "fleet", {"spark": host}, {"demo": demo_recipe(["spark"], free_port())})
    )
    root = ["--root", str(inv.root)]
    try:
        g1 = lanes.launch(inv, "demo", canary=False, allow_nas_weights=True).generation
        assert g1["status"] == "ready" and g1["boot"]["cache"] == "cold"
        lanes.stop(inv, "demo", 5)
        assert generations.load_all(inv.root, "demo")[-1]["stopped_at"]
        g2 = lanes.launch(inv, "demo", canary=False, allow_nas_weights=True).generation
        assert g2["boot"]["cache"] == "warm"  # the demo server autotuned into it the first time
        g1 = generations.load_all(inv.root, "demo")[0]
        g1["good"] = True
        generations.save(inv.root, g1)
        res = CliRunner().invoke(main, [*root, "rollback", "demo", "--no-canary"])
        assert res.exit_code == 0, res.output
        said = f"relaunched good generation {g1['id']} (recipe {g1['recipe_sha256'][:12]}, no image)"
        assert said in res.output
        assert "(None)" not in res.output
    finally:
        lanes.stop(inv, "demo", 5)
    text = CliRunner().invoke(main, [*root, "history", "demo"]).output
    assert f"rolled back from {g2['id']} to {g1['id']}" in text
    lines = [ln for ln in text.splitlines() if ln[:1].isdigit()]
    assert len(lines) == 3 and all(" stopped " in ln for ln in lines), text
    assert " cold boot " in text and " warm boot " in text
