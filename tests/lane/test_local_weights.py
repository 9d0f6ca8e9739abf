"""Local weights or a loud refusal: a rank whose staged weights do not verify is refused.

The night shift's 13.3 t/s night: one staged shard on dgx2 had 4 bytes changed, the manifest fell
back to the NAS for that directory, and `launch` still said ready. Reproduced on the demo fleet.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from sparkfleet.base.errors import ExitCode, SparkfleetError
from sparkfleet.demo.fleet import DEMO_LANE, WEIGHTS_REPO, write_demo_fleet
from sparkfleet.fleet import inventory
from sparkfleet.lane.manifest import snapshot_rel
from sparkfleet.launch import generations
from sparkfleet.launch import lane as lanes
from sparkfleet.stage import execute
from sparkfleet.stage.targets import requests_for_host

# make test runs modules on xdist workers: the lanes this module launches on this machine share
# its ports (the rendezvous port 20000, the demo's serving ports), so every such module runs on
# one worker ("local_lanes"), one at a time
pytestmark = pytest.mark.xdist_group("local_lanes")

def _staged_fleet(tmp_path):
    fleet = write_demo_fleet(tmp_path, shard_bytes=16 * 1024)
    inv = inventory.load(fleet.root)
    for host in inv.lane(DEMO_LANE).hosts:
        assert execute.stage(requests_for_host(inv, host, DEMO_LANE)).ok
    return fleet, inv


def _corrupt_shard(fleet, host: str) -> str:
    """Change 4 bytes in the middle of one staged shard on `host` (the file behind the link)."""
    commit = fleet.fixture.weights.commits["main"]
    snap = fleet.local_hub(host) / snapshot_rel(WEIGHTS_REPO, commit)
    shard = sorted(snap.glob("model-0000*-of-*.safetensors"))[0]
    real = shard.resolve()
    data = bytearray(real.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 4] = bytes(b ^ 0xFF for b in data[mid : mid + 4])
    os.chmod(real, 0o644)
    real.write_bytes(bytes(data))
    return shard.name


def test_changed_staged_shard_refuses_launch(tmp_path):
    fleet, inv = _staged_fleet(tmp_path)
    name = _corrupt_shard(fleet, "dgx2")
    with pytest.raises(SparkfleetError) as err:
        try:
            lanes.launch(inv, DEMO_LANE, canary=False, generations_root=tmp_path / "gens")
        finally:
            lanes.stop(inv, DEMO_LANE, 5)
    exc = err.value
    assert exc.exit_code == ExitCode.REFUSED
    assert "dgx2" in exc.message and name in exc.message
    assert "REFUSED" in exc.message
    assert "dgx1" not in exc.message.split("dgx2", 1)[0]  # dgx1 verifies: not named as a culprit
    assert f"sparkfleet stage dgx2 --lane {DEMO_LANE}" in (exc.hint or "")
    assert lanes.status(inv, DEMO_LANE).running == 0  # nothing was started


def test_allow_nas_weights_says_so_everywhere(tmp_path):
    fleet, inv = _staged_fleet(tmp_path)
    _corrupt_shard(fleet, "dgx2")
    events: list[str] = []
    gens = tmp_path / "gens"
    try:
        report = lanes.launch(
            inv, DEMO_LANE, canary=False, generations_root=gens, allow_nas_weights=True,
            on_event=events.append,
        )  # fmt: skip
        assert report.ready is not None and report.ready.ok
        nas = report.nas_weights
        assert set(nas) == {"dgx2"} and nas["dgx2"]["files"] >= 1
        said = f"weights from NAS on dgx2 ({nas['dgx2']['files']} files)"
        assert any(said in e for e in events), events
        assert said in report.weights_note()
        gen = generations.current(gens, DEMO_LANE)
        assert gen is not None and gen["nas_weights"]["dgx2"]["files"] == nas["dgx2"]["files"]
        st = lanes.status(inv, DEMO_LANE, generations_root=gens)
        assert said in st.weights
    finally:
        lanes.stop(inv, DEMO_LANE, 5)


def test_optional_pack_from_nas_is_allowed_and_shown(tmp_path):
    _fleet, inv = _staged_fleet(tmp_path)
    events: list[str] = []
    try:
        report = lanes.launch(
            inv, DEMO_LANE, canary=False, generations_root=tmp_path / "gens", on_event=events.append
        )
        assert report.ready is not None and report.ready.ok
        assert report.nas_weights == {}
        assert any("optional from NAS" in e and "page15" in e for e in events), events
    finally:
        lanes.stop(inv, DEMO_LANE, 5)


def test_bench_report_says_weights_from_nas(tmp_path):
    """A bench report of a NAS-served generation carries the note in its JSON and Markdown."""
    from sparkfleet.bench.report.markdown import render_markdown
    from sparkfleet.bench.target import for_lane
    from sparkfleet.lane.weights import weights_note

    fleet = write_demo_fleet(tmp_path, shard_bytes=16 * 1024)
    inv = inventory.load(fleet.root)
    note = {"dgx2": {"files": 10, "note": "weights from NAS on dgx2 (10 files)", "paths": []}}
    recipe = inv.lane(DEMO_LANE).recipe_path.read_text()
    generations.save(inv.root, {"id": generations.utc_id(1.0), "lane": DEMO_LANE, "status": "ready",
                                "created_at": 1.0, "good": False, "nas_weights": note, "recipe_text": recipe,
                                "recipe_sha256": hashlib.sha256(recipe.encode()).hexdigest(),
                                "fleet_text": ""})  # fmt: skip
    target = for_lane(inv, DEMO_LANE)
    assert target.weights == weights_note(note) == "weights from NAS on dgx2 (10 files)"
    md = render_markdown({"status": "ok", "weights": target.weights}, "stem")
    assert "weights from NAS on dgx2 (10 files)" in md


def test_replace_relaunches_the_same_lane_after_a_recipe_edit(tmp_path):
    """Issue 19: relaunching a running lane after editing its recipe is one command (--replace)."""
    fleet, inv = _staged_fleet(tmp_path)
    gens = tmp_path / "gens"
    try:
        first = lanes.launch(inv, DEMO_LANE, canary=False, generations_root=gens)
        assert first.ready is not None and first.ready.ok
        with pytest.raises(SparkfleetError) as err:
            lanes.launch(inv, DEMO_LANE, canary=False, generations_root=gens)
        assert "already running" in err.value.message and "--replace" in (err.value.hint or "")
        recipe = inv.lane(DEMO_LANE).recipe_path
        recipe.write_text(recipe.read_text().replace("ready_s = 60", "ready_s = 61"))
        events: list[str] = []
        again = lanes.launch(
            inventory.load(fleet.root), DEMO_LANE, canary=False, generations_root=gens,
            replace=True, on_event=events.append,
        )  # fmt: skip
        assert again.ready is not None and again.ready.ok
        assert any(f"replaced the running {DEMO_LANE}" in e for e in events), events
        assert first.generation["recipe_sha256"] != again.generation["recipe_sha256"]
        assert lanes.status(inv, DEMO_LANE).running == 2
    finally:
        lanes.stop(inv, DEMO_LANE, 5)
