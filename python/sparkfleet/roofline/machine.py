"""The machine's side of the roofline: each figure declared (with its source) and measured.

The fleet file declares per kind of host what the vendor publishes (`[host_kinds.gb10]`); what
sparkfleet measured on a host (`sparkfleet measure HOST`, staging's NAS read and NVMe write, the
fabric canary) sits in that host's state dir as `measurements.json`. A bound uses the measured
value when there is one — it is what this host really does — and the declared one otherwise; a
report shows both and says which it used, so a number is never of unknown origin.

A measurement is vetted on one path (`vet`) wherever it is read: it must be a finite real number
(never a bool) inside the physically possible range for its figure, and within 25-150 % of the
kind's declared figure. Outside that it is either a wrong measurement or a broken host: it is kept
on record with a warning naming both figures, and the declared one is used unless the operator
passes `--trust-measured`. An impossible value (NaN, Infinity, 1e308, 1e-300, a string)
is dropped, and the report says so.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base import atomic, units

if TYPE_CHECKING:  # annotations only: staging's bound reads measurements, not the inventory
    from ..fleet.inventory import Host, HostKind, Inventory

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


# What any host could physically do, per figure (base units): outside this a value is impossible
# whatever the kind declares. Generous on purpose: from a slow NAS to far beyond any GPU today.
POSSIBLE = {
    "memory_bandwidth": (1e8, 1e14),
    "peak_fp8": (1e9, 1e17),
    "peak_bf16": (1e9, 1e17),
    "fabric_link": (1e5, 1e13),
    "fabric_latency": (1e-7, 10.0),
    "nas_link": (1e5, 1e13),
    "nas_read": (1e5, 1e13),
    "nvme_read": (1e5, 1e13),
    "nvme_write": (1e5, 1e13),
    "cpu_memory_copy": (1e7, 1e14),
}
# A measured figure this far from the kind's declared one is not used without --trust-measured.
PLAUSIBLE_LOW, PLAUSIBLE_HIGH = 0.25, 1.5


LINKS = ("fabric_link", "nas_link")  # rated in bits: printed as Gb/s


def figure_text(name: str, value: float | None) -> str:
    """A figure as a person reads it, through the one unit formatter (sparkfleet/base/units.py): links in
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
    """One figure measured on a host: value in base units, how, when, and how repeatable."""

    value: float
    method: str
    measured_utc: str
    spread: float | None = None  # (worst - best) / best over repeated trials, where repeated
    warning: str | None = None  # set when it was recorded far from the kind's declared figure


@dataclass(frozen=True)
class Primitive:
    """A figure as a bound uses it: the value chosen, and both candidates with their origin."""

    name: str
    value: float | None
    origin: str  # "measured" | "declared" | "unknown"
    declared: float | None = None
    declared_source: str | None = None
    measured: Measurement | None = None
    warning: str | None = None  # why a measurement was dropped or passed over


@dataclass(frozen=True)
class MachineFigures:
    """All primitives of one host (or the slowest of a lane's hosts, figure by figure)."""

    host: str
    kind: str | None
    primitives: dict[str, Primitive] = field(default_factory=dict)

    def value(self, name: str) -> float | None:
        p = self.primitives.get(name)
        return p.value if p else None

    @property
    def warnings(self) -> list[str]:
        return [p.warning for p in self.primitives.values() if p.warning]


@dataclass(frozen=True)
class Vetted:
    """One measurement after `vet`: parsed (or None), whether a bound may use it, and why not."""

    measurement: Measurement | None
    usable: bool
    warning: str | None


class MeasurementError(ValueError):
    """A measurements.json entry that is no measurement (wrong type, not finite, not positive)."""


def measurements_path(state_dir: Path) -> Path:
    return Path(state_dir) / MEASUREMENTS_FILE


def _real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def measurement_of(doc: Any) -> Measurement:
    """A Measurement from its JSON form; MeasurementError unless its value is a finite number > 0."""
    if isinstance(doc, Measurement):
        doc = doc.__dict__
    if not isinstance(doc, dict):
        raise MeasurementError(f"not an object but {type(doc).__name__}")
    value = doc.get("value")
    if not _real(value):
        raise MeasurementError(f"value {value!r} is not a number")
    if not math.isfinite(value) or value <= 0:
        raise MeasurementError(f"value {value!r} is not a finite positive number")
    spread = doc.get("spread")
    spread = float(spread) if _real(spread) and math.isfinite(spread) and spread >= 0 else None
    warning = doc.get("warning") if isinstance(doc.get("warning"), str) else None
    return Measurement(
        float(value), str(doc.get("method", "")), str(doc.get("measured_utc", "")), spread, warning
    )


def _fmt(name: str, value: float) -> str:
    if name == "fabric_latency":
        return f"{value * 1e6:.3g} us"
    unit = "FLOP/s" if name.startswith("peak_") else "B/s"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def vet(name: str, doc: Any, kind: HostKind | None = None, trust_measured: bool = False) -> Vetted:
    """The one check every measured figure passes before a bound may use it (see the module doc)."""
    try:
        m = measurement_of(doc)
    except MeasurementError as exc:
        return Vetted(None, False, f"measured {name} dropped: {exc}")
    low, high = POSSIBLE.get(name, (0.0, math.inf))
    if not low <= m.value <= high:
        return Vetted(
            None, False,
            f"measured {name} dropped: value {m.value!r} is outside what any host can do "
            f"({_fmt(name, low)} to {_fmt(name, high)})",
        )  # fmt: skip
    fig = kind.figures.get(name) if kind else None
    declared = fig.base if fig else None
    if declared and name != "fabric_latency":  # a latency has no "declared peak" to sit under
        ratio = m.value / declared
        if not PLAUSIBLE_LOW <= ratio <= PLAUSIBLE_HIGH:
            use = (
                "using it anyway (--trust-measured)"
                if trust_measured
                else ("using the declared figure; pass --trust-measured to use the measured one")
            )
            return Vetted(
                m, trust_measured,
                f"measured {name} {_fmt(name, m.value)} is {100 * ratio:.0f} % of the declared "
                f"{_fmt(name, declared)} for kind {kind.name}: a wrong measurement or a broken host; "
                + use,
            )  # fmt: skip
    return Vetted(m, True, None)


def read_measurements_doc(state_dir: Path) -> dict[str, Any]:
    """The host's measurements.json as written (unvetted); a missing or unreadable file is {}."""
    try:
        doc = json.loads(measurements_path(state_dir).read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


def load_measurements(state_dir: Path, kind: HostKind | None = None) -> dict[str, Measurement]:
    """The host's usable measured figures (each `vet`ted); never a crash on a bad file."""
    out = {}
    for name, doc in read_measurements_doc(state_dir).items():
        checked = vet(name, doc, kind)
        if checked.usable and checked.measurement is not None:
            out[name] = checked.measurement
    return out


def record_measurements(
    state_dir: Path,
    found: dict[str, tuple[float, str] | tuple[float, str, float | None]],
    kind: HostKind | None = None,
) -> dict[str, Measurement]:
    """Merge `found` (name -> (value, method[, spread])) into the host's file, atomically.

    Each new figure is recorded whatever it reads, with `vet`'s warning beside it when it is far
    from the kind's declared figure; returns the whole set as recorded.
    """
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    doc = read_measurements_doc(state_dir)
    for name, entry in found.items():
        value, method = entry[0], entry[1]
        spread = entry[2] if len(entry) > 2 else None
        m = Measurement(float(value), method, now, spread)
        warning = vet(name, m, kind).warning
        doc[name] = {**m.__dict__, "warning": warning}
    doc = {name: {k: v for k, v in d.items() if v is not None} if isinstance(d, dict) else d
           for name, d in sorted(doc.items())}  # fmt: skip
    os.makedirs(state_dir, exist_ok=True)
    atomic.write_bytes(measurements_path(state_dir), (json.dumps(doc, indent=1) + "\n").encode())
    out = {}
    for name, d in doc.items():
        try:
            out[name] = measurement_of(d)
        except MeasurementError:
            continue
    return out


def machine_figures(
    inv: Inventory, host: Host, measured: dict[str, Any], trust_measured: bool = False
) -> MachineFigures:
    """Declared figures of the host's kind, each overridden by a vetted measurement of the same name.

    `measured` maps a figure to a Measurement or its raw JSON form (as another host answered it).
    """
    kind = inv.host_kinds.get(host.kind) if host.kind else None
    declared = kind.figures if kind else {}
    prims = {}
    for name in FIGURES:
        fig = declared.get(name)
        d_value = fig.base if fig else None
        checked = vet(name, measured[name], kind, trust_measured) if name in measured else None
        m = checked.measurement if checked else None
        if checked and checked.usable and m is not None:
            value, origin = m.value, "measured"
        elif d_value is not None:
            value, origin = d_value, "declared"
        else:
            value, origin = None, "unknown"
        warning = checked.warning if checked else None
        prims[name] = Primitive(name, value, origin, d_value, fig.source if fig else None, m, warning)
    return MachineFigures(host.name, host.kind, prims)


def primitives_doc(figures: MachineFigures) -> dict[str, Any]:
    """The figures as a report records them (plain JSON)."""
    out: dict[str, Any] = {"host": figures.host, "kind": figures.kind, "figures": {}}
    for name, p in figures.primitives.items():
        if p.origin == "unknown" and p.declared_source is None and p.warning is None:
            continue
        out["figures"][name] = {
            "value": p.value,
            "origin": p.origin,
            "declared": p.declared,
            "source": p.declared_source,
            "measured": p.measured.__dict__ if p.measured else None,
        }
        if p.warning:
            out["figures"][name]["warning"] = p.warning
    return out
