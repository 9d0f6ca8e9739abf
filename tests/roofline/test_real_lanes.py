"""The fleet's own lanes compute their per-token bytes from whatever their pins stage.

The real checkpoints are not here; synthetic ones stand in under the real pins' repo names and
revisions (a commit starting with the recorded prefix, refs/main for the EXL3 repos), in a hub laid
out like a staged host's. The code path is the one `bench` and `sparkfleet roofline` take.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import pytest

from sparkfleet.demo.synthmodel import SynthSpec, checkpoint_files
from sparkfleet.facts.hubcache import repo_folder
from sparkfleet.fleet import inventory
from sparkfleet.roofline.bound import decode_terms
from sparkfleet.roofline.lane import cost_from_doc, lane_inputs
from sparkfleet.roofline.service import figures_for, lane_shape

REPO = Path(__file__).resolve().parents[2]


def stage_standin(hub: Path, pin: inventory.Pin, spec: SynthSpec) -> None:
    """A hub-cache snapshot for `pin` holding a synthetic checkpoint (blobs + snapshot links)."""
    folder = hub / repo_folder(pin.source)
    filler = hashlib.sha1(pin.source.encode()).hexdigest()
    if all(c in "0123456789abcdef" for c in pin.value):  # a commit, or the prefix the log recorded
        commit = (pin.value + filler)[:40]
    else:  # a ref name (`main`): the ref file points at the snapshot
        commit = filler
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / pin.value).write_text(commit)
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True)
    (folder / "blobs").mkdir(exist_ok=True)
    for name, data in checkpoint_files(spec).items():
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / name).symlink_to(os.path.relpath(blob, snap))


@pytest.mark.parametrize("lane_name", ["dsv41-flash-4x-mia", "dsv41-flash-exl3-2x"])
def test_each_real_lane_reads_its_costs_from_its_staged_pins(tmp_path: Path, lane_name: str) -> None:
    inv = inventory.load(REPO)
    lane = inv.lane(lane_name)
    hub = tmp_path / "hub"
    target_spec = SynthSpec(hidden=128, layers=4)
    drafter_spec = SynthSpec(hidden=32, layers=1)
    stage_standin(hub, inv.pins[lane.models[0].pin], target_spec)
    drafter_pin = lane.sections.roofline.drafter
    if drafter_pin:
        stage_standin(hub, inv.pins[drafter_pin], drafter_spec)
    head = dataclasses.replace(inv.host(lane.hosts[0]), local_hub=hub, nas_hub=tmp_path / "no-nas")
    inputs = lane_inputs(inv, lane, head)
    assert inputs["origin"] == "local"
    target = cost_from_doc(inputs["target"])
    assert target.step_weight_bytes(1) == target_spec.decode_bytes_per_token()
    shape = lane_shape(lane)
    assert shape.tp == len(lane.hosts)
    inputs["measurements"] = {}
    terms, _ = decode_terms(
        target, figures_for(inv, lane, inputs), shape, 1024,
        cost_from_doc(inputs["drafter"]) if drafter_pin else None,
    )  # fmt: skip
    verify = (shape.draft_tokens or 0) + 1
    drafted = shape.draft_tokens * drafter_spec.decode_bytes_per_token() if drafter_pin else 0
    expected = (target.step_weight_bytes(verify) + drafted) / shape.tp
    assert terms.weight_bytes_per_rank == pytest.approx(expected)
    assert terms.memory_s == pytest.approx(
        (expected + verify * 1024 * target_spec.kv_bytes_per_token()) / 273e9
    )
    assert shape.draft_tokens == {"dsv41-flash-4x-mia": 5, "dsv41-flash-exl3-2x": 3}[lane_name]
