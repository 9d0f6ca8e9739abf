"""`roofline LANE` passes over a measurement far from the declared figure unless --trust-measured.

Issue 18: a cold `measure` on an H200 read 11 % of the true bandwidth; used over the declared
figure, it made every "% of bound" 8x too high. Run here as an operator runs it (the CLI, this
machine being the lane's head), with the fixture's model read from the NAS hub.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet.cli import main
from sparkfleet.demo.hubfixture import build_nas_hub
from sparkfleet.roofline.machine import measurements_path, record_measurements
from support.stagefleet import write_lane_fleet


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch) -> Path:
    nas = tmp_path / "nas" / "hub"
    build_nas_hub(nas, shard_bytes=64 * 1024, absolute_links=False)
    root = write_lane_fleet(tmp_path / "fleet", {"dgx1": tmp_path / "local" / "hub"}, {"dgx1": nas}, "one")
    toml = root / "hosts" / "fleet.toml"
    toml.write_text(
        toml.read_text().replace("reserve_gib = 0\n", 'reserve_gib = 0\nkind = "k"\n')
        + '[host_kinds.k]\ndescription = "test"\n'
        + 'memory_bandwidth = { value = 273, unit = "GB/s", source = "vendor sheet" }\n'
    )
    monkeypatch.setenv("SPARKFLEET_HOST", "dgx1")
    return root


def roofline(root: Path, *extra: str) -> dict:
    res = CliRunner().invoke(main, ["--root", str(root), "roofline", "one", "--json", *extra])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_a_measurement_at_11_percent_of_declared_is_shown_not_used(fleet: Path, tmp_path: Path) -> None:
    state = tmp_path / "local" / "sparkfleet"  # the host's state dir: beside its local hub
    record_measurements(state, {"memory_bandwidth": (30e9, "cold torch copy")})
    doc = roofline(fleet)
    fig = doc["machine"]["figures"]["memory_bandwidth"]
    assert (fig["value"], fig["origin"], fig["measured"]["value"]) == (273e9, "declared", 30e9)
    assert "--trust-measured" in fig["warning"]
    assert any("30 GB/s is 11 % of the declared 273 GB/s for kind k" in n for n in doc["notes"])
    trusted = roofline(fleet, "--trust-measured")
    fig = trusted["machine"]["figures"]["memory_bandwidth"]
    assert (fig["value"], fig["origin"]) == (30e9, "measured")
    # The bound follows the figure used: 273/30 = 9.1x slower a step when the low one is trusted.
    assert trusted["step"]["memory_ms"] == pytest.approx(doc["step"]["memory_ms"] * 273 / 30)


def test_a_tampered_file_falls_back_to_declared_and_says_so(fleet: Path, tmp_path: Path) -> None:
    state = tmp_path / "local" / "sparkfleet"
    state.mkdir(parents=True)
    measurements_path(state).write_text(
        '{"memory_bandwidth": {"value": true}, "nvme_read": {"value": 1e308}}'
    )
    doc = roofline(fleet, "--trust-measured")  # trust never lets an impossible value through
    assert doc["machine"]["figures"]["memory_bandwidth"]["origin"] == "declared"
    notes = " ".join(doc["notes"])
    assert "measured memory_bandwidth dropped: value True is not a number" in notes
    assert "measured nvme_read dropped" in notes
