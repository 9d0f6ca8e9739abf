"""The roofline's actions: measure a host, gather a lane's inputs there, bound a report, bound a stage.

Everything that must read a host's files runs on that host — the same sparkfleet, started over
OpenSSH (`hosts.SshHost`) or as a subprocess for this machine — and answers one JSON document; the
pure parts (`model`, `bound`, `section`) only ever see that JSON.
"""

from __future__ import annotations

import json
from typing import Any

from ..base.errors import SparkfleetError
from ..fleet.inventory import Host, Inventory, Lane, state_dir_of
from ..remote.hosts import LocalHost, check_reachable, connect
from ..stage.remote import is_this_host, sparkfleet_argv
from .bound import LaneShape, StepTerms, decode_terms
from .lane import RooflineConfig, cost_from_doc, lane_inputs
from .machine import (
    MachineFigures,
    Measurement,
    machine_figures,
    primitives_doc,
    read_measurements_doc,
    record_measurements,
    vet,
)
from .measure import cpu_copy_rate, gpu_rates, largest_files, read_rate, write_rate
from .section import build_section
from .stagebound import STREAMS

REMOTE_TIMEOUT_S = 600.0


def measure_here(inv: Inventory, host: Host, quick: bool = False) -> dict[str, Measurement]:
    """Measure this machine as `host`: NVMe read/write, NAS read, memory; record and return all.

    Each figure is recorded with a warning where it is far from the host kind's declared one.
    """
    limit = 64 * 1024 * 1024 if quick else 512 * 1024 * 1024
    found: dict[str, tuple[float, str] | tuple[float, str, float | None]] = {}
    nvme = read_rate(largest_files([host.local_hub]), limit, "local hub blobs", STREAMS)
    if nvme:
        found["nvme_read"] = (nvme.value, nvme.method)
    nas = read_rate(largest_files([host.nas_hub]), limit, "NAS hub blobs", STREAMS)
    if nas:
        found["nas_read"] = (nas.value, nas.method)
    state = state_dir_of(host)
    wrote = write_rate(state / "measure", limit // 2, "state dir (local NVMe)", STREAMS)
    found["nvme_write"] = (wrote.value, wrote.method)
    cpu = cpu_copy_rate(limit // 2)
    found["cpu_memory_copy"] = (cpu.value, cpu.method, cpu.spread)
    for name, rate in gpu_rates().items():
        found[name] = (rate.value, rate.method, rate.spread)
    return record_measurements(state, found, inv.host_kinds.get(host.kind) if host.kind else None)


def _run_there(inv: Inventory, host: Host, tail: list[str]) -> dict[str, Any]:
    """Run `sparkfleet --root ROOT <tail> --here --json` on `host` and return its JSON answer."""
    runner = LocalHost(host.name) if is_this_host(host) else connect(host)
    argv = [*sparkfleet_argv(runner), "--root", str(inv.root.resolve()), *tail, "--here", "--json"]
    result = check_reachable(runner.run(argv, timeout=REMOTE_TIMEOUT_S))
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise SparkfleetError(
            f"{host.name}: `{' '.join(tail)}` failed: {detail}", exit_code=result.returncode
        )
    try:
        return json.loads(result.stdout)
    except ValueError:
        raise SparkfleetError(f"{host.name}: `{' '.join(tail)}` answered no JSON") from None


def measure_host(inv: Inventory, host: Host, quick: bool = False) -> dict[str, Any]:
    """`measure` on the host itself (here or over ssh); the recorded figures as JSON."""
    if is_this_host(host):
        return {name: m.__dict__ for name, m in measure_here(inv, host, quick).items()}
    return _run_there(inv, host, ["measure", host.name, *(["--quick"] if quick else [])])


def inputs_here(inv: Inventory, lane: Lane, host: Host) -> dict[str, Any]:
    """The lane's model costs read on this machine (as `host`), plus its recorded measurements."""
    out = lane_inputs(inv, lane, host)
    out["measurements"] = read_measurements_doc(state_dir_of(host))  # vetted where it is used
    return out


def lane_roofline_inputs(inv: Inventory, lane: Lane, host: Host | None = None) -> dict[str, Any]:
    """Inputs for `lane`, read on `host` (default: the lane's head, where rank 0's files are)."""
    host = host or inv.host(lane.hosts[0])
    if is_this_host(host):
        return inputs_here(inv, lane, host)
    return _run_there(inv, host, ["roofline", lane.name, "--host", host.name])


def lane_shape(lane: Lane) -> LaneShape:
    tp = int(lane.sections.world.tp or len(lane.hosts) or 1)
    return LaneShape(tp=tp, draft_tokens=RooflineConfig.of(lane).draft_tokens)


def figures_for(
    inv: Inventory, lane: Lane, inputs: dict[str, Any], trust_measured: bool = False
) -> MachineFigures:
    """The lane head's figures: declared, or measured where the measurement passes `vet`."""
    host = inv.host(inputs.get("host") or lane.hosts[0])
    measured = inputs.get("measurements")
    return machine_figures(inv, host, measured if isinstance(measured, dict) else {}, trust_measured)


def measurement_warnings(inv: Inventory, host: Host, found: dict[str, Any]) -> list[str]:
    """What `vet` says of freshly measured figures against the host's kind (for `measure`'s output)."""
    kind = inv.host_kinds.get(host.kind) if host.kind else None
    return [w for name, doc in found.items() if (w := vet(name, doc, kind).warning)]


def report_section(
    inv: Inventory, lane: Lane, report: dict[str, Any], inputs: dict[str, Any], trust_measured: bool = False
) -> dict:
    """The roofline section for a lane's report document: its figures vetted as `roofline` vets them
    (`figures_for`), so a report and `roofline --trust-measured` never disagree on the bound."""
    return build_section(report, inputs, figures_for(inv, lane, inputs, trust_measured), lane_shape(lane))


def section_for_report(
    inv: Inventory, lane_name: str, report: dict[str, Any], trust_measured: bool = False
) -> dict[str, Any]:
    """The section, or why there is none (a report is written either way, never lost to this)."""
    lane = inv.lane(lane_name)
    try:
        return report_section(inv, lane, report, lane_roofline_inputs(inv, lane), trust_measured)
    except SparkfleetError as exc:
        return {"unavailable": exc.message, "hint": exc.hint}


def machine_doc(
    inv: Inventory, lane: Lane, inputs: dict[str, Any], trust_measured: bool = False
) -> dict[str, Any]:
    return primitives_doc(figures_for(inv, lane, inputs, trust_measured))


def _step_doc(terms: StepTerms, draft_tokens: int | None) -> dict:
    return {
        "memory_ms": terms.memory_s * 1000,
        "compute_ms": None if terms.compute_s is None else terms.compute_s * 1000,
        "fabric_ms": None if terms.fabric_s is None else terms.fabric_s * 1000,
        "bound_step_ms": terms.bound_s * 1000,
        "binding": terms.binding(),
        "bound_tps_at_1_token_per_step": 1.0 / terms.bound_s,
        "bound_tps_if_every_draft_accepted": (draft_tokens + 1) / terms.bound_s if draft_tokens else None,
    }


def lane_roofline(
    inv: Inventory, lane: Lane, host: Host | None, context: int, trust_measured: bool = False
) -> dict[str, Any]:
    """`sparkfleet roofline LANE`: what one token costs the lane's model and the decode bound it sets.

    A missing bandwidth figure leaves the model's side standing on its own: no step, a note says why.
    """
    inputs = lane_roofline_inputs(inv, lane, host)
    figures = figures_for(inv, lane, inputs, trust_measured)
    shape = lane_shape(lane)
    target = cost_from_doc(inputs["target"])
    drafter = cost_from_doc(inputs["drafter"]) if inputs.get("drafter") else None
    try:
        terms, notes = decode_terms(target, figures, shape, context, drafter)
    except SparkfleetError as exc:  # no bandwidth figure: the model's side still stands on its own
        terms, notes = None, [f"no decode bound: {exc.message} ({exc.hint})"]
    return {
        "lane": lane.name,
        "host": inputs["host"],
        "read_from": inputs["origin"],
        "tp": shape.tp,
        "context": context,
        "model": {
            "name": target.name,
            "total_bytes": target.total_bytes,
            "decode_bytes_per_token": target.step_weight_bytes(1),
            "decode_bytes_per_token_per_rank": target.step_weight_bytes(1) / shape.tp,
            "breakdown": target.decode_breakdown(1),
            "kv_bytes_per_token": target.kv_bytes_per_token,
            "flops_per_token": target.flops_per_token(context),
        },
        "step": _step_doc(terms, shape.draft_tokens) if terms else None,
        "machine": machine_doc(inv, lane, inputs, trust_measured),
        "notes": list(dict.fromkeys([*figures.warnings, *notes, *target.notes])),
    }
