"""The machine's side of the roofline: each figure declared (with its source) and measured.

The fleet file declares per kind of host what the vendor publishes (`[host_kinds.gb10]`); what
sparkfleet measured on a host (`sparkfleet measure HOST`, staging's NAS read and NVMe write, the
fabric canary) sits in that host's state dir as `measurements.json`. A bound uses the measured
value when there is one — it is what this host really does — and the declared one otherwise; a
report shows both and says which it used, so a number is never of unknown origin.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import atomic, units
from ..inventory import Host, Inventory

MEASUREMENTS_FILE = "measurements.json"

# Figures a bound reads, and what each means (docs/roofline.md).
FIGURES = {
    "memory_bandwidth": "unified-memory bandwidth the GPU streams weights and KV at (B/s)",
    "peak_fp8": "dense FP8 tensor-core peak (FLOP/s)",
    "peak_bf16": "dense BF16 tensor-core peak (FLOP/s)",
    "fabric_link": "RoCE fabric link rate between hosts (B/s)",
    "fabric_latency": "one small all-reduce across the lane's ranks (s), from the fabric canary",
    "nas_link": "link to the NAS (B/s)",
    "nas_read": "NAS read rate seen by this host (B/s)",
    "nvme_read": "local NVMe read rate (B/s)",
    "nvme_write": "local NVMe write rate, fsync'd (B/s)",
    "cpu_memory_copy": "CPU memory copy rate (B/s); informational, the GPU's rate bounds decode",
}


LINKS = ("fabric_link", "nas_link")  # rated in bits: printed as Gb/s


def figure_text(name: str, value: float | None) -> str:
    """A figure as a person reads it, through the one unit formatter (sparkfleet/units.py): links in
    Gb/s, other byte rates in GB/s, compute in TFLOP/s, the fabric latency in µs."""
    if value is None:
        return "unknown"
    if name in LINKS:
        return units.link_rate(value)
    if name.startswith("peak_"):
        return units.flop_rate(value)
    if name == "fabric_latency":
        return f"{value * 1e6:.1f} µs"
    return units.byte_rate(value)


@dataclass(frozen=True)
class Measurement:
    """One figure measured on a host: value in base units, how, and when."""

    value: float
    method: str
    measured_utc: str


@dataclass(frozen=True)
class Primitive:
    """A figure as a bound uses it: the value chosen, and both candidates with their origin."""

    name: str
    value: float | None
    origin: str  # "measured" | "declared" | "unknown"
    declared: float | None = None
    declared_source: str | None = None
    measured: Measurement | None = None


@dataclass(frozen=True)
class MachineFigures:
    """All primitives of one host (or the slowest of a lane's hosts, figure by figure)."""

    host: str
    kind: str | None
    primitives: dict[str, Primitive] = field(default_factory=dict)

    def value(self, name: str) -> float | None:
        p = self.primitives.get(name)
        return p.value if p else None


def measurements_path(state_dir: Path) -> Path:
    return Path(state_dir) / MEASUREMENTS_FILE


def measurement_of(doc: dict[str, Any]) -> Measurement:
    """A Measurement from its JSON form (as `measurements.json` and `--here` answers hold it)."""
    return Measurement(float(doc["value"]), str(doc.get("method", "")), str(doc.get("measured_utc", "")))


def load_measurements(state_dir: Path) -> dict[str, Measurement]:
    """The host's measured figures; a missing or unreadable file is no measurements, never a crash."""
    try:
        doc = json.loads(measurements_path(state_dir).read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for name, m in doc.items() if isinstance(doc, dict) else ():
        if isinstance(m, dict) and isinstance(m.get("value"), int | float) and m["value"] > 0:
            out[name] = measurement_of(m)
    return out


def record_measurements(state_dir: Path, found: dict[str, tuple[float, str]]) -> dict[str, Measurement]:
    """Merge `found` (name -> (value, method)) into the host's file, atomically; return the whole set."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    merged = load_measurements(state_dir)
    merged.update({name: Measurement(value, method, now) for name, (value, method) in found.items()})
    doc = {name: m.__dict__ for name, m in sorted(merged.items())}
    os.makedirs(state_dir, exist_ok=True)
    atomic.write_bytes(measurements_path(state_dir), (json.dumps(doc, indent=1) + "\n").encode())
    return merged


def machine_figures(inv: Inventory, host: Host, measured: dict[str, Measurement]) -> MachineFigures:
    """Declared figures of the host's kind, each overridden by a measurement of the same name."""
    kind = inv.host_kinds.get(host.kind) if host.kind else None
    declared = kind.figures if kind else {}
    prims = {}
    for name in FIGURES:
        fig = declared.get(name)
        m = measured.get(name)
        d_value = fig.base if fig else None
        if m is not None:
            value, origin = m.value, "measured"
        elif d_value is not None:
            value, origin = d_value, "declared"
        else:
            value, origin = None, "unknown"
        prims[name] = Primitive(name, value, origin, d_value, fig.source if fig else None, m)
    return MachineFigures(host.name, host.kind, prims)


def primitives_doc(figures: MachineFigures) -> dict[str, Any]:
    """The figures as a report records them (plain JSON)."""
    out: dict[str, Any] = {"host": figures.host, "kind": figures.kind, "figures": {}}
    for name, p in figures.primitives.items():
        if p.origin == "unknown" and p.declared_source is None:
            continue
        out["figures"][name] = {
            "value": p.value,
            "origin": p.origin,
            "declared": p.declared,
            "source": p.declared_source,
            "measured": p.measured.__dict__ if p.measured else None,
        }
    return out
