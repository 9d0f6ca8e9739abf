"""The bound and the % of it, against hand arithmetic on checkpoints known by construction."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkfleet.demo.synthmodel import SynthSpec, checkpoint_files
from sparkfleet.roofline.bound import LaneShape, assess_decode, assess_prefill, decode_terms
from sparkfleet.roofline.machine import MachineFigures, Measurement, Primitive
from sparkfleet.roofline.model import model_cost, snapshot_files

GB = 1e9


def cost_for(tmp_path: Path, spec: SynthSpec, name: str = "m"):
    snap = tmp_path / name
    snap.mkdir()
    for fname, data in checkpoint_files(spec).items():
        (snap / fname).write_bytes(data)
    config, files = snapshot_files(snap)
    return model_cost(name, config, files)


def machine(**values: float) -> MachineFigures:
    return MachineFigures(
        "h", "test", {k: Primitive(k, v, "declared", v, "test figure") for k, v in values.items()}
    )


def test_memory_bound_decode_is_bytes_over_bandwidth(tmp_path: Path) -> None:
    spec = SynthSpec(hidden=256, layers=4)
    cost = cost_for(tmp_path, spec)
    m = machine(memory_bandwidth=100 * GB, peak_fp8=1e15, peak_bf16=5e14)
    shape = LaneShape(tp=1)
    context = 100
    per_token = spec.decode_bytes_per_token() + context * spec.kv_bytes_per_token()
    bound_tps = 100 * GB / per_token
    figure, notes = assess_decode(cost, m, shape, measured_tps=bound_tps / 2, context=context)
    assert figure.bound_tps == pytest.approx(bound_tps)
    assert figure.pct_of_bound == pytest.approx(50.0)
    assert figure.binding == "memory"  # the overhead equals the bound step: not yet "unexplained"
    assert figure.overhead_ms_per_step == pytest.approx(1000 / bound_tps)
    assert "one rank: no collectives" in notes


def test_tp_divides_weights_and_adds_the_fabric(tmp_path: Path) -> None:
    spec = SynthSpec(hidden=256, layers=4)
    cost = cost_for(tmp_path, spec)
    m = machine(memory_bandwidth=100 * GB, fabric_link=25 * GB, peak_fp8=1e15)
    terms, notes = decode_terms(cost, m, LaneShape(tp=4), context=0)
    assert terms.weight_bytes_per_rank == pytest.approx(spec.decode_bytes_per_token() / 4)
    wire = 2 * spec.layers * 2 * 3 / 4 * spec.hidden * 2 / (25 * GB)
    assert terms.fabric_s == pytest.approx(wire)
    assert any("latency not measured" in n for n in notes)
    latency = MachineFigures(
        "h",
        "test",
        {
            **m.primitives,
            "fabric_latency": Primitive(
                "fabric_latency", 20e-6, "measured", None, None, Measurement(20e-6, "canary", "now")
            ),
        },
    )
    with_latency, _ = decode_terms(cost, latency, LaneShape(tp=4), context=0)
    assert with_latency.fabric_s == pytest.approx(wire + 2 * spec.layers * 20e-6)
    assert with_latency.binding() == "fabric"  # 160 µs of latency outweighs a tiny model's reads


def test_a_slow_engine_is_named_as_unexplained_overhead(tmp_path: Path) -> None:
    cost = cost_for(tmp_path, SynthSpec())
    m = machine(memory_bandwidth=100 * GB, peak_fp8=1e15)
    figure, _ = assess_decode(cost, m, LaneShape(tp=1), measured_tps=10.0, context=0)
    assert figure.binding.startswith("unexplained overhead: ")
    assert figure.overhead_ms_per_step == pytest.approx(100.0 - figure.bound_step_ms)
    assert f"{figure.overhead_ms_per_step:.2f} ms/step" in figure.binding


def test_speculative_decoding_tells_slow_model_from_rejected_drafts(tmp_path: Path) -> None:
    target = cost_for(tmp_path, SynthSpec(hidden=256), "target")
    drafter = cost_for(tmp_path, SynthSpec(hidden=64, layers=1), "drafter")
    m = machine(memory_bandwidth=100 * GB, peak_fp8=1e15)
    shape = LaneShape(tp=1, draft_tokens=3)
    terms, _ = decode_terms(target, m, shape, 0, drafter)
    step = terms.bound_s
    assert terms.weight_bytes_per_rank == pytest.approx(
        target.step_weight_bytes(4) + 3 * drafter.step_weight_bytes(1)
    )
    # Same step rate, fewer accepted tokens: the step efficiency stays, the draft yield falls.
    good, _ = assess_decode(
        target, m, shape, measured_tps=3.0 / step / 2, context=0, accept_length=3.0, drafter=drafter
    )
    poor, _ = assess_decode(
        target, m, shape, measured_tps=1.5 / step / 2, context=0, accept_length=1.5, drafter=drafter
    )
    assert good.step_efficiency_pct == pytest.approx(50.0) == poor.step_efficiency_pct
    assert (good.draft_yield_pct, poor.draft_yield_pct) == (pytest.approx(75.0), pytest.approx(37.5))
    assert good.bound_tps == pytest.approx(3.0 / step)
    missing, notes = assess_decode(target, m, shape, measured_tps=10.0, context=0, drafter=drafter)
    assert missing.tokens_per_step == 1.0 and missing.draft_yield_pct is None
    assert any("without a measured accept length" in n for n in notes)


def test_prefill_is_compute_bound_at_size_and_memory_bound_when_tiny(tmp_path: Path) -> None:
    spec = SynthSpec(hidden=256, layers=4)
    cost = cost_for(tmp_path, spec)
    m = machine(memory_bandwidth=100 * GB, peak_fp8=1e12)
    big = assess_prefill(cost, m, LaneShape(tp=1), "pp4096", 4096, 0, tps=1000.0)
    assert big is not None and big.binding == "compute"
    flops = cost.flops_per_token(2048)
    assert big.bound_tps == pytest.approx(1e12 / flops)
    assert big.pct_of_bound == pytest.approx(100 * 1000.0 / big.bound_tps)
    fast = machine(memory_bandwidth=1 * GB, peak_fp8=1e18)
    tiny = assess_prefill(cost, fast, LaneShape(tp=1), "pp1", 1, 0, tps=1.0)
    assert tiny is not None and tiny.binding == "memory"
    assert assess_prefill(cost, machine(memory_bandwidth=GB), LaneShape(tp=1), "pp1", 1, 0, 1.0) is None
