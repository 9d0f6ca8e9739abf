"""Machine figures: declared per host kind with a source, overridden by what was measured on the host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkfleet.base.errors import InventoryError
from sparkfleet.fleet import inventory
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


# ---- vetting: 25-150 % of the declared figure, and tampered files ----------------------------

HOSTILE = {
    "memory_bandwidth": "Infinity",  # raw JSON tokens, written as text below
    "peak_bf16": "1e308",
    "fabric_link": "true",
    "nas_read": "NaN",
    "nvme_read": "-5e9",
    "nvme_write": '"fast"',
    "cpu_memory_copy": "1e-300",
    "fabric_latency": "false",
}


def _write_raw(state: Path, values: dict[str, str]) -> None:
    state.mkdir(parents=True, exist_ok=True)
    body = ",".join(f'"{n}": {{"value": {v}, "method": "planted"}}' for n, v in values.items())
    measurements_path(state).write_text("{" + body + "}")


def test_tampered_values_are_dropped_and_said_so_never_a_bool_as_a_number(tmp_path: Path) -> None:
    inv = load(tmp_path)
    state = tmp_path / "state"
    _write_raw(state, HOSTILE)
    assert load_measurements(state) == {}  # none of them is a measurement
    figures = machine_figures(inv, inv.host("a"), json.loads(measurements_path(state).read_text()))
    for name in HOSTILE:
        p = figures.primitives[name]
        assert p.origin != "measured", name
        assert p.warning and p.warning.startswith(f"measured {name} dropped"), (name, p.warning)
    # The declared figures stand where there are any (true was once 1 B/s of fabric).
    assert figures.value("memory_bandwidth") == 273e9 and figures.value("fabric_link") == 25e9
    assert figures.value("nvme_read") is None
    assert "is not a number" in figures.primitives["fabric_link"].warning
    assert "outside what any host can do" in figures.primitives["cpu_memory_copy"].warning
    doc = primitives_doc(figures)
    assert doc["figures"]["peak_bf16"]["warning"].startswith("measured peak_bf16 dropped")


@pytest.mark.parametrize(
    ("measured", "declared_used"),
    [(34e9, True), (430e9, True), (69e9, False), (400e9, False)],
    ids=["12%-of-declared", "158%", "25%", "147%"],
)
def test_a_figure_far_from_the_declared_one_needs_trust_measured(
    tmp_path: Path, measured: float, declared_used: bool
) -> None:
    inv = load(tmp_path)
    state = tmp_path / "state"
    recorded = record_measurements(
        state, {"memory_bandwidth": (measured, "torch copy", 0.01)}, inv.host_kinds["gb10"]
    )
    m = recorded["memory_bandwidth"]
    assert m.value == measured and m.spread == 0.01  # recorded whatever it reads
    figures = machine_figures(inv, inv.host("a"), load_measurements(state))
    trusted = machine_figures(inv, inv.host("a"), dict(recorded), trust_measured=True)
    prim = figures.primitives["memory_bandwidth"]
    if declared_used:
        assert m.warning is not None and "273 GB/s" in m.warning and f"{measured / 1e9:.3g} GB/s" in m.warning
        assert "gb10" in m.warning and "--trust-measured" in m.warning
        assert (prim.value, prim.origin) == (273e9, "declared") and prim.warning
        assert prim.measured == m  # still shown beside the declared one
        assert trusted.value("memory_bandwidth") == measured
        assert "using it anyway" in trusted.primitives["memory_bandwidth"].warning
    else:
        assert m.warning is None and (prim.value, prim.origin, prim.warning) == (measured, "measured", None)


def test_measure_prints_the_warning_and_records_it(tmp_path: Path, monkeypatch) -> None:
    from click.testing import CliRunner

    from sparkfleet.cli import main
    from sparkfleet.roofline import service
    from sparkfleet.roofline.measure import Rate

    fleet = FLEET.replace('local_hub = "/l"', f'local_hub = "{tmp_path}/hub"').replace(
        'nas_hub = "/n"', f'nas_hub = "{tmp_path}/nas"'
    )
    load(tmp_path, fleet)
    # A cold GPU probe on an H200 reads 11 % of the true bandwidth.
    monkeypatch.setattr(service, "gpu_rates", lambda: {"memory_bandwidth": Rate(30_000_000_000, 1.0, "cold")})
    monkeypatch.setenv("SPARKFLEET_HOST", "a")
    res = CliRunner().invoke(main, ["--root", str(tmp_path), "measure", "a", "--quick"])
    assert res.exit_code == 0, res.output
    assert "warning: a: measured memory_bandwidth 30 GB/s is 11 % of the declared 273 GB/s" in res.stderr
    doc = json.loads(measurements_path(tmp_path / "sparkfleet").read_text())
    assert "11 % of the declared 273 GB/s" in doc["memory_bandwidth"]["warning"]
