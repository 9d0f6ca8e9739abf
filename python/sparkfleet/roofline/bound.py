"""The figure itself: how far a measured rate is from what the hardware allows, and why.

Decode, one step (batch 1): every rank streams its share of the weights the step touches plus the
KV of the context from unified memory, multiplies, and takes part in the tensor-parallel
all-reduces (two per layer). The step can be no faster than the slowest of memory time
(bytes / bandwidth) and compute time (FLOPs / peak), plus the fabric time (collectives are on the
critical path in TP decode). Tokens per step is 1, or the measured accept length with speculative
decoding, where the target verifies `draft_tokens + 1` tokens a step and the drafter's weights are
read once per drafted token. So two questions get two numbers:
  - step efficiency: bound step time / measured step time — is the engine slow?
  - draft yield: accept length / (draft_tokens + 1) — are drafts rejected?
Whatever the bound cannot explain is named: "unexplained overhead: X ms/step".

Prefill of P tokens at depth d is bound by compute (2 x active params + attention over the mean
attended context d + P/2, per token) or, for small P, by reading the weights once.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.errors import SparkfleetError
from .machine import MachineFigures
from .model import ModelCost

ACTIVATION_BYTES = 2  # BF16 activations in the TP all-reduces


@dataclass(frozen=True)
class LaneShape:
    """What the bound needs of the lane: its tensor-parallel width and speculative decoding."""

    tp: int
    draft_tokens: int | None = None  # tokens drafted per step; None = no speculative decoding


@dataclass(frozen=True)
class StepTerms:
    """Time one step needs from each resource (seconds; None = unknown)."""

    memory_s: float
    compute_s: float | None
    fabric_s: float | None
    weight_bytes_per_rank: float
    kv_bytes_per_rank: float

    @property
    def bound_s(self) -> float:
        return max(self.memory_s, self.compute_s or 0.0) + (self.fabric_s or 0.0)

    def binding(self) -> str:
        terms = {"memory": self.memory_s, "compute": self.compute_s or 0.0, "fabric": self.fabric_s or 0.0}
        return max(terms, key=lambda k: terms[k])


def peak_flops(machine: MachineFigures, weight_dtype: str | None) -> float | None:
    """The tensor-core peak for the dtype the weights are in (FP8 weights run FP8 matmuls)."""
    if weight_dtype and weight_dtype.startswith("F8"):
        return machine.value("peak_fp8") or machine.value("peak_bf16")
    return machine.value("peak_bf16")


def fabric_seconds(
    cost: ModelCost, machine: MachineFigures, tp: int, tokens: int
) -> tuple[float | None, str]:
    """Two ring all-reduces a layer over `tokens` activations; latency only when measured."""
    if tp <= 1:
        return 0.0, "one rank: no collectives"
    link = machine.value("fabric_link")
    if link is None or cost.num_layers is None or cost.hidden_size is None:
        return None, "fabric term unknown (no link rate or no layer shape)"
    collectives = 2 * cost.num_layers
    message = tokens * cost.hidden_size * ACTIVATION_BYTES
    wire = collectives * 2 * (tp - 1) / tp * message / link
    latency = machine.value("fabric_latency")
    if latency is None:
        return wire, "fabric latency not measured: the fabric term counts link bandwidth only (a floor)"
    return wire + collectives * latency, f"{collectives} all-reduces a step at the measured latency"


def decode_terms(
    cost: ModelCost,
    machine: MachineFigures,
    shape: LaneShape,
    context: int,
    drafter: ModelCost | None = None,
) -> tuple[StepTerms, list[str]]:
    """Resource times of one decode step at `context` tokens of context."""
    notes = []
    bw = machine.value("memory_bandwidth")
    if bw is None:
        raise SparkfleetError(
            f"{machine.host}: no memory_bandwidth figure (host kind {machine.kind!r})",
            hint="give the host a `kind` with [host_kinds.<kind>] memory_bandwidth in hosts/fleet.toml",
        )
    verify = (shape.draft_tokens or 0) + 1
    weights = cost.step_weight_bytes(verify) / shape.tp
    if drafter is not None and shape.draft_tokens:
        weights += shape.draft_tokens * drafter.step_weight_bytes(1) / shape.tp
    kv = verify * cost.kv_read_bytes(context, shape.tp)
    flops = cost.flops_per_token(context)
    peak = peak_flops(machine, cost.weight_dtype)
    compute = verify * flops / shape.tp / peak if flops is not None and peak else None
    if compute is None:
        notes.append("compute term unknown (no FLOPs for these weights or no peak figure)")
    fabric, fabric_note = fabric_seconds(cost, machine, shape.tp, verify)
    notes.append(fabric_note)
    return StepTerms((weights + kv) / bw, compute, fabric, weights, kv), notes


@dataclass(frozen=True)
class DecodeFigure:
    measured_tps: float
    bound_tps: float
    pct_of_bound: float
    binding: str
    context: int
    tokens_per_step: float
    verify_tokens: int
    memory_ms: float
    compute_ms: float | None
    fabric_ms: float | None
    bound_step_ms: float
    measured_step_ms: float
    overhead_ms_per_step: float
    weight_bytes_per_rank: float
    kv_bytes_per_rank: float
    step_efficiency_pct: float
    draft_yield_pct: float | None


def assess_decode(
    cost: ModelCost,
    machine: MachineFigures,
    shape: LaneShape,
    measured_tps: float,
    context: int,
    accept_length: float | None = None,
    drafter: ModelCost | None = None,
) -> tuple[DecodeFigure, list[str]]:
    """Measured decode against the bound; the binding resource or the unexplained overhead named."""
    notes = []
    speculative = shape.draft_tokens is not None
    if speculative and accept_length is None:
        notes.append("speculative decoding without a measured accept length: bound taken at 1 token/step")
    per_step = accept_length if (speculative and accept_length) else 1.0
    terms, term_notes = decode_terms(cost, machine, shape, context, drafter if speculative else None)
    notes += term_notes
    bound_step = terms.bound_s
    measured_step = per_step / measured_tps
    overhead = max(0.0, measured_step - bound_step)
    binding = terms.binding()
    if overhead > bound_step:
        binding = f"unexplained overhead: {overhead * 1000:.2f} ms/step"
    verify = (shape.draft_tokens or 0) + 1
    figure = DecodeFigure(
        measured_tps=measured_tps,
        bound_tps=per_step / bound_step,
        pct_of_bound=100.0 * measured_tps / (per_step / bound_step),
        binding=binding,
        context=context,
        tokens_per_step=per_step,
        verify_tokens=verify,
        memory_ms=terms.memory_s * 1000,
        compute_ms=terms.compute_s * 1000 if terms.compute_s is not None else None,
        fabric_ms=terms.fabric_s * 1000 if terms.fabric_s is not None else None,
        bound_step_ms=bound_step * 1000,
        measured_step_ms=measured_step * 1000,
        overhead_ms_per_step=overhead * 1000,
        weight_bytes_per_rank=terms.weight_bytes_per_rank,
        kv_bytes_per_rank=terms.kv_bytes_per_rank,
        step_efficiency_pct=100.0 * bound_step / measured_step,
        draft_yield_pct=100.0 * per_step / verify if speculative and accept_length else None,
    )
    return figure, notes


@dataclass(frozen=True)
class PrefillFigure:
    test: str
    depth: int
    tokens: int
    measured_tps: float
    bound_tps: float
    pct_of_bound: float
    binding: str


def assess_prefill(
    cost: ModelCost, machine: MachineFigures, shape: LaneShape, test: str, tokens: int, depth: int, tps: float
) -> PrefillFigure | None:
    """One pp row against compute (or the one weight read a chunk needs); None when unknowable."""
    flops = cost.flops_per_token(depth + tokens / 2)
    peak = peak_flops(machine, cost.weight_dtype)
    bw = machine.value("memory_bandwidth")
    if flops is None or not peak or not bw:
        return None
    compute = tokens * flops / shape.tp / peak
    memory = cost.step_weight_bytes(tokens) / shape.tp / bw
    fabric, _ = fabric_seconds(cost, machine, shape.tp, tokens)
    bound = max(compute, memory) + (fabric or 0.0)
    bound_tps = tokens / bound
    binding = "compute" if compute >= memory else "memory"
    if fabric and fabric > max(compute, memory):
        binding = "fabric"
    return PrefillFigure(test, depth, tokens, tps, bound_tps, 100.0 * tps / bound_tps, binding)

