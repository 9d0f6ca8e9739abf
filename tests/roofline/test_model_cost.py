"""The model's cost per token, read from safetensors headers, against checkpoints known by construction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkfleet.base.errors import SourceError
from sparkfleet.demo.synthmodel import SynthSpec, checkpoint_files, tensors_file_bytes
from sparkfleet.roofline.model import CostOptions, category_of, expected_experts, model_cost, snapshot_files


def write(tmp_path: Path, spec: SynthSpec, **kw) -> Path:
    snap = tmp_path / "snap"
    snap.mkdir()
    for name, data in checkpoint_files(spec, **kw).items():
        (snap / name).write_bytes(data)
    return snap


def cost_of(snap: Path, options: CostOptions | None = None):
    config, files = snapshot_files(snap)
    return model_cost("synthetic", config, files, options or CostOptions())


@pytest.mark.parametrize(
    "spec",
    [
        SynthSpec(),
        SynthSpec(hidden=128, layers=3, dense_layers=1, experts=16, top_k=4, shared=2, vocab=512),
        SynthSpec(hidden=32, layers=5, experts=4, top_k=1, tie_embeddings=False, mtp_layers=1),
    ],
    ids=["moe", "dense-first", "untied-mtp"],
)
def test_decode_bytes_kv_and_params_match_the_construction(tmp_path: Path, spec: SynthSpec) -> None:
    cost = cost_of(write(tmp_path, spec, per_file_layers=2))
    assert cost.step_weight_bytes(1) == spec.decode_bytes_per_token()
    assert cost.kv_bytes_per_token == spec.kv_bytes_per_token()
    assert cost.active_params == spec.active_params()
    assert cost.num_layers == spec.layers
    assert cost.experts_per_token == spec.top_k
    assert len(cost.moe_layers) == spec.layers - spec.dense_layers
    assert all(n == spec.experts and mean == spec.expert_bytes() for n, mean in cost.moe_layers.values())
    assert cost.weight_dtype == "F8_E4M3"
    if spec.mtp_layers:
        assert cost.bytes_by_category["mtp"] == spec.mtp_layers * 2 * spec.hidden**2
        assert any("MTP" in n for n in cost.notes)


def test_a_speculative_step_reads_shared_experts_once(tmp_path: Path) -> None:
    spec = SynthSpec(experts=8, top_k=2)
    cost = cost_of(write(tmp_path, spec))
    routed_one, routed_six = cost.routed_bytes(1), cost.routed_bytes(6)
    assert routed_one == spec.layers * spec.top_k * spec.expert_bytes()
    # Six tokens touch more experts than one token, never more than all of them ...
    assert routed_one < routed_six < spec.layers * spec.experts * spec.expert_bytes()
    # ... and every dense weight is read once for the whole step; only embedding rows scale.
    embed_row = spec.hidden * 2
    assert cost.step_weight_bytes(6) - cost.step_weight_bytes(1) == routed_six - routed_one + 5 * embed_row
    assert expected_experts(8, 2, 1) == 2
    assert expected_experts(8, 2, 6) == pytest.approx(8 * (1 - 0.75**6))
    assert expected_experts(8, 8, 3) == 8


def test_sparse_attention_caps_the_kv_read(tmp_path: Path) -> None:
    spec = SynthSpec(index_topk=64)
    cost = cost_of(write(tmp_path, spec))
    per_token = spec.kv_bytes_per_token()
    assert cost.kv_read_bytes(32, tp=4) == 32 * per_token  # MLA latent: whole on every rank
    assert cost.kv_read_bytes(10_000, tp=4) == 64 * per_token
    assert cost.flops_per_token(10_000) == cost.flops_per_token(64)


def test_engram_rows_count_only_when_declared(tmp_path: Path) -> None:
    snap = write(tmp_path, SynthSpec())
    engram = {
        "layers.1.engram.embed.weight": ("F8_E4M3", [100, 256], bytes(100 * 256)),
        "layers.1.engram.embed.scale": ("F8_E8M0", [100, 8], bytes(800)),
    }
    (snap / "engram.safetensors").write_bytes(tensors_file_bytes(engram))
    silent = cost_of(snap)
    declared = cost_of(snap, CostOptions(engram_rows_per_token=3))
    assert declared.step_weight_bytes(1) - silent.step_weight_bytes(1) == 3 * 264
    assert any("engram rows per token not declared" in n for n in silent.notes)


def test_categories_of_both_naming_styles() -> None:
    assert category_of("model.layers.3.mlp.experts.17.down_proj.weight", 61) == "routed_expert"
    assert category_of("layers.3.ffn.experts.300.w1.trellis", 61) == "routed_expert"
    assert category_of("model.layers.3.mlp.gate.weight", 61) == "router"
    assert category_of("model.layers.3.mlp.gate_proj.weight", 61) == "dense_mlp"
    assert category_of("layers.3.ffn.shared_experts.w2.weight", 61) == "shared_expert"
    assert category_of("model.layers.61.eh_proj.weight", 61) == "mtp"
    assert category_of("layers.1.engram.embed.weight", 61) == "engram"
    assert category_of("head.weight", 61) == "head"
    assert category_of("embed.weight", 61) == "embedding"
    assert category_of("model.layers.0.self_attn.kv_a_layernorm.weight", 61) == "norm"


def test_quantized_integer_tensors_give_bytes_but_no_flops(tmp_path: Path) -> None:
    snap = tmp_path / "exl3"
    snap.mkdir()
    (snap / "config.json").write_text(
        json.dumps(
            {"num_hidden_layers": 1, "num_experts_per_tok": 1, "hidden_size": 16, "num_attention_heads": 2}
        )
    )
    tensors = {
        "model.layers.0.mlp.experts.0.w1.trellis": ("I16", [4, 4, 48], bytes(4 * 4 * 48 * 2)),
        "model.layers.0.mlp.experts.1.w1.trellis": ("I16", [4, 4, 48], bytes(4 * 4 * 48 * 2)),
        "model.layers.0.self_attn.q_proj.trellis": ("I16", [2, 2, 48], bytes(2 * 2 * 48 * 2)),
    }
    (snap / "model.safetensors").write_bytes(tensors_file_bytes(tensors))
    cost = cost_of(snap)
    assert cost.step_weight_bytes(1) == 2 * 2 * 48 * 2 + 4 * 4 * 48 * 2
    assert cost.active_params is None and cost.flops_per_token(100) is None
    assert any("FLOPs per token are not derivable" in n for n in cost.notes)


def test_a_snapshot_without_config_or_weights_is_named(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="no config.json"):
        snapshot_files(tmp_path / "empty")
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(SourceError, match="no .safetensors"):
        snapshot_files(tmp_path / "empty")


def test_a_link_leaving_the_hub_is_refused(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    snap = hub / "snap"
    snap.mkdir(parents=True)
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    (snap / "config.json").symlink_to(outside)
    with pytest.raises(SourceError, match="outside the hub"):
        snapshot_files(snap, hub)
