"""A --no-wait launch (how the lane unit starts a lane on its host) still records its generation."""

from __future__ import annotations

import json

from launch_fleet import write_fleet
from test_launch_local import demo_recipe, free_port

from sparkfleet import inventory
from sparkfleet.demo.hubfixture import build_nas_hub
from sparkfleet.launch import generations
from sparkfleet.launch import lane as lanes


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
        saved = generations.load_all(inv.root, "demo")
        assert [g["id"] for g in saved] == [gen["id"]]
        assert json.loads(json.dumps(saved[0]))["recipe_sha256"] == gen["recipe_sha256"]
        assert generations.current(inv.root, "demo") is None  # not known to be up: nothing to promote
    finally:
        lanes.stop(inv, "demo", 5)
