"""Machine figures: declared per host kind with a source, overridden by what was measured on the host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkfleet import inventory
from sparkfleet.errors import InventoryError
from sparkfleet.roofline.machine import (
    load_measurements,
    machine_figures,
    measurements_path,
    primitives_doc,
    record_measurements,
)

FLEET = """schema_version = 1
[defaults]
ssh_user = "u"
local_hub = "/l"
nas_hub = "/n"
kind = "gb10"
[hosts.a]
address = "a"
[host_kinds.gb10]
description = "test kind"
memory_bandwidth = { value = 273, unit = "GB/s", source = "vendor sheet" }
fabric_link = { value = 200, unit = "Gb/s", source = "vendor sheet" }
nvme_read = { unit = "GB/s", source = "not published" }
"""


def load(tmp_path: Path, text: str = FLEET) -> inventory.Inventory:
    (tmp_path / "hosts").mkdir(exist_ok=True)
    (tmp_path / "hosts" / "fleet.toml").write_text(text)
    return inventory.load(tmp_path)


def test_declared_figures_carry_units_and_sources(tmp_path: Path) -> None:
    inv = load(tmp_path)
    figures = machine_figures(inv, inv.host("a"), {})
    assert figures.value("memory_bandwidth") == 273e9
    assert figures.value("fabric_link") == 25e9  # 200 Gb/s
    assert figures.primitives["nvme_read"].origin == "unknown"
    doc = primitives_doc(figures)
    assert doc["figures"]["memory_bandwidth"]["source"] == "vendor sheet"
    assert doc["figures"]["nvme_read"] == {
        "value": None,
        "origin": "unknown",
        "declared": None,
        "source": "not published",
        "measured": None,
    }


def test_a_measurement_wins_and_both_are_shown(tmp_path: Path) -> None:
    inv = load(tmp_path)
    state = tmp_path / "state"
    record_measurements(state, {"memory_bandwidth": (250e9, "torch.cuda copy"), "nvme_read": (6e9, "dd")})
    record_measurements(state, {"nas_read": (1.1e9, "blob read")})  # merged, not replaced
    measured = load_measurements(state)
    assert set(measured) == {"memory_bandwidth", "nvme_read", "nas_read"}
    figures = machine_figures(inv, inv.host("a"), measured)
    mem = figures.primitives["memory_bandwidth"]
    assert (mem.value, mem.origin, mem.declared) == (250e9, "measured", 273e9)
    assert figures.value("nvme_read") == 6e9


def test_a_corrupt_measurements_file_is_no_measurements(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    measurements_path(state).write_text("{not json")
    assert load_measurements(state) == {}
    measurements_path(state).write_text(json.dumps({"x": {"value": -3}, "y": "nope"}))
    assert load_measurements(state) == {}


def test_an_unknown_host_kind_is_named(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match=r"hosts\.a\.kind: unknown host kind 'gb11'.*") as err:
        load(tmp_path, FLEET.replace('kind = "gb10"', 'kind = "gb11"'))
    assert "gb10" in (err.value.hint or "")
    with pytest.raises(InventoryError, match="unit"):
        load(tmp_path, FLEET.replace('unit = "Gb/s"', 'unit = "furlongs"'))
    with pytest.raises(InventoryError, match="source"):
        load(tmp_path, FLEET.replace(', source = "vendor sheet" }\nfabric', " }\nfabric"))


def test_the_fleet_declares_every_gb10_figure_with_a_source() -> None:
    inv = inventory.load(Path(__file__).resolve().parents[2])
    kind = inv.host_kinds["gb10"]
    assert {h.kind for h in inv.hosts.values()} == {"gb10"}
    assert kind.figures["memory_bandwidth"].base == 273e9
    assert all(f.source for f in kind.figures.values())
