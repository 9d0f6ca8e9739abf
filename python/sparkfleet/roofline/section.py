"""The roofline section of a bench report: built from the report's own measurements.

A report is the record of one run; this adds what that run's numbers mean against the machine:
`build_section(report, inputs, machine, shape)` reads the decode probe, the pp rows and the
accept length out of the report document, the model's cost from `lane_inputs`, the primitives from
`machine_figures`, and returns plain JSON (`report["roofline"]`). `markdown_lines` is its view in
the report's Markdown. A figure that cannot be stood behind is left out with the reason.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any

from ..base import units
from .bound import LaneShape, assess_decode, assess_prefill
from .lane import cost_from_doc
from .machine import MachineFigures, primitives_doc
from .model import ModelCost

_PP = re.compile(r"^pp(\d+)$")


def _model_doc(cost: ModelCost, tp: int, context: int) -> dict[str, Any]:
    return {
        "name": cost.name,
        "architecture": cost.architecture,
        "total_bytes": cost.total_bytes,
        "decode_bytes_per_token": cost.step_weight_bytes(1),
        "decode_bytes_per_token_per_rank": cost.step_weight_bytes(1) / tp,
        "decode_breakdown": cost.decode_breakdown(1),
        "kv_bytes_per_token": cost.kv_bytes_per_token,
        "kv_read_bytes_per_rank_at_context": cost.kv_read_bytes(context, tp),
        "active_params": cost.active_params,
        "flops_per_token_at_context": cost.flops_per_token(context),
        "weight_dtype": cost.weight_dtype,
        "notes": list(cost.notes),
    }


def _number(value: Any) -> float | None:
    return (
        float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None
    )


def _get(doc: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def build_section(
    report: dict[str, Any], inputs: dict[str, Any], machine: MachineFigures, shape: LaneShape
) -> dict[str, Any]:
    """The roofline section for `report` (a report document as `bench` writes it)."""
    target = cost_from_doc(inputs["target"])
    drafter = cost_from_doc(inputs["drafter"]) if inputs.get("drafter") else None
    probe = _get(report, "settings", "probe") or {}
    prompt = int(probe.get("prompt_tokens") or 0)
    max_tokens = int(probe.get("max_tokens") or 0)
    context = prompt + max_tokens // 2  # the mean context a probe token decodes at
    notes: list[str] = list(machine.warnings)
    section: dict[str, Any] = {
        "host": inputs.get("host"),
        "read_from": inputs.get("origin"),
        "tp": shape.tp,
        "draft_tokens": shape.draft_tokens,
        "machine": primitives_doc(machine),
        "model": _model_doc(target, shape.tp, context),
        "drafter": _model_doc(drafter, shape.tp, context) if drafter else None,
        "decode": None,
        "prefill": [],
        "notes": notes,
    }
    decode_tps = _number(_get(report, "decode_probe", "metrics", "decode_tps"))
    accept = _number(_get(report, "spec_accept", "value"))
    if machine.value("memory_bandwidth") is None:
        notes.append("no memory_bandwidth figure for this host kind: no decode bound")
    elif decode_tps is None:
        notes.append("the decode probe measured no decode rate: no % of bound")
    else:
        figure, decode_notes = assess_decode(target, machine, shape, decode_tps, context, accept, drafter)
        section["decode"] = asdict(figure)
        notes += decode_notes
    for row in report.get("table") or []:
        match = _PP.match(str(row.get("test", "")))
        tps = _number(row.get("tps_mean"))
        if not match or tps is None:
            continue
        figure = assess_prefill(
            target, machine, shape, row["test"], int(match.group(1)), int(row.get("depth") or 0), tps
        )
        if figure is None:
            notes.append(f"{row['test']}: no prefill bound (FLOPs or peak unknown)")
            continue
        section["prefill"].append(asdict(figure))
    return section


def _pct(value: float) -> str:
    """A percentage a reader can tell from zero: 2 significant digits below 10 %."""
    return f"{value:.0f} %" if value >= 10 else f"{value:.2g} %"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} ms"


def _rate(value: float | None, unit: str) -> str:
    return units.BY_UNIT[unit](value)  # the one unit formatter (sparkfleet/base/units.py)


def markdown_lines(section: dict[str, Any]) -> list[str]:
    """The section as Markdown (a heading, the decode and prefill figures, the inputs, the notes)."""
    out = ["## How far from the physical limit (roofline)", ""]
    if section.get("unavailable"):
        return [*out, f"- unavailable: {section['unavailable']}"]
    decode = section.get("decode")
    if decode:
        out += [
            f"Decode: **{decode['measured_tps']:.1f} tok/s measured = {_pct(decode['pct_of_bound'])} of the "
            f"{decode['bound_tps']:.1f} tok/s bound**; binding: **{decode['binding']}**.",
            "",
            "| term (one step) | value |",
            "|---|---|",
            f"| weights read per rank | {decode['weight_bytes_per_rank'] / 1e9:.4f} GB |",
            f"| KV read per rank at {decode['context']} tokens | "
            f"{decode['kv_bytes_per_rank'] / 1e9:.6f} GB |",
            f"| memory time | {_ms(decode['memory_ms'])} |",
            f"| compute time | {_ms(decode['compute_ms'])} |",
            f"| fabric time | {_ms(decode['fabric_ms'])} |",
            f"| bound step / measured step | {_ms(decode['bound_step_ms'])} / "
            f"{_ms(decode['measured_step_ms'])} |",
            f"| unexplained overhead | {_ms(decode['overhead_ms_per_step'])} per step |",
            f"| tokens per step | {decode['tokens_per_step']:.2f} (verifies {decode['verify_tokens']}) |",
            f"| step efficiency | {_pct(decode['step_efficiency_pct'])} |",
        ]
        if decode.get("draft_yield_pct") is not None:
            out.append(f"| draft yield (accept / verified) | {decode['draft_yield_pct']:.0f} % |")
        out.append("")
    if section.get("prefill"):
        out += ["| prefill | depth | measured | bound | % of bound | binding |", "|---|---|---|---|---|---|"]
        for p in section["prefill"]:
            out.append(
                f"| {p['test']} | {p['depth']} | {p['measured_tps']:.0f} t/s | {p['bound_tps']:.0f} t/s | "
                f"{_pct(p['pct_of_bound'])} | {p['binding']} |"
            )
        out.append("")
    figures = section.get("machine", {}).get("figures", {})
    if figures:
        out += ["| figure | value used | origin | source |", "|---|---|---|---|"]
        for name, f in figures.items():
            unit = "FLOP/s" if name.startswith("peak") else "B/s"
            value = (
                f"{f['value'] * 1e6:.1f} µs"
                if name == "fabric_latency" and f["value"]
                else _rate(f["value"], unit)
            )
            source = f["source"] or (f["measured"] or {}).get("method", "")
            out.append(f"| {name} | {value} | {f['origin']} | {source} |")
        out.append("")
    model = section.get("model") or {}
    if model:
        out.append(
            f"Model {model['name']}: {model['total_bytes'] / 1e9:.3f} GB on disk, "
            f"{model['decode_bytes_per_token'] / 1e9:.4f} GB read per decode token "
            f"({model['decode_bytes_per_token_per_rank'] / 1e9:.4f} GB per rank at TP{section['tp']}), "
            f"read from {section.get('read_from')} on {section.get('host')}."
        )
        out.append("")
    notes = [*section.get("notes", []), *model.get("notes", [])]
    out += [f"- {n}" for n in dict.fromkeys(notes)]
    return out
