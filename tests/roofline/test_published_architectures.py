"""The roofline held to published architectures: hybrid linear attention, `mtp.*` tensors, the router.

Each checkpoint is built from a published config.json's shapes, tensor by tensor with the names
the model's transformers implementation gives them, as sparse files (header written, data a hole),
so a full-width layer costs no disk. Layers are fewer than published (the per-layer shapes are
the point). The expected figures are computed here from the config's numbers, the way the
architecture defines them, never read back from the code under test.

Sources (config.json at the hub's main; tensor names and shapes from huggingface/transformers
src/transformers/models/qwen3_next/{configuration,modeling}_qwen3_next.py at 7515843b — in_proj_qkvz
2·key_dim + 2·value_dim rows, in_proj_ba 2·value heads, a depthwise conv [conv_dim, 1, kernel],
layer i full when (i + 1) % full_attention_interval == 0 — and deepseek_v3's modeling code):
- Qwen/Qwen3-Next-80B-A3B-Instruct: hidden 2048, 16 heads, 2 KV heads, head_dim 256, gated q_proj,
  full_attention_interval 4, Gated DeltaNet with 16 key / 32 value heads of 128, conv kernel 4,
  512 experts, 10 per token, moe and shared intermediate 512, vocab 151936; `mtp.*` tensors.
- deepseek-ai/DeepSeek-V3: hidden 7168, 128 heads, q_lora 1536, kv_lora 512, nope 128, rope 64,
  v 128, 256 routed experts, 8 per token, 1 shared, moe intermediate 2048, dense intermediate
  18432, first_k_dense_replace 3, vocab 129280, router `mlp.gate.weight` [256, 7168] plus
  `mlp.gate.e_score_correction_bias` [256].
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import pytest

from sparkfleet.roofline.model import CostOptions, model_cost, snapshot_files

BF16 = 2


def sparse_safetensors(path: Path, tensors: dict[str, list[int]]) -> None:
    """A valid BF16 safetensors file of `tensors` (name -> shape) whose data is a hole."""
    header, offset = {}, 0
    for name, shape in tensors.items():
        nbytes = math.prod(shape) * BF16
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(head)) + head)
    os.truncate(path, 8 + len(head) + offset)


def snapshot(tmp_path: Path, config: dict, tensors: dict[str, list[int]]):
    snap = tmp_path / "snap"
    snap.mkdir()
    (snap / "config.json").write_text(json.dumps(config))
    sparse_safetensors(snap / "model.safetensors", tensors)
    config, files = snapshot_files(snap)
    return model_cost("published", config, files, CostOptions())


# ---- Qwen3-Next: hybrid linear attention --------------------------------------------------------

QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"],
    "hidden_size": 2048,
    "num_hidden_layers": 8,  # published: 48; every 4th layer is full attention either way
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "full_attention_interval": 4,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "num_nextn_predict_layers": 1,
}


def qwen3_next_tensors(c: dict) -> dict[str, list[int]]:
    h, experts, mi, si = (
        c["hidden_size"],
        c["num_experts"],
        c["moe_intermediate_size"],
        c["shared_expert_intermediate_size"],
    )
    heads, kv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    key_dim = c["linear_num_key_heads"] * c["linear_key_head_dim"]
    value_dim = c["linear_num_value_heads"] * c["linear_value_head_dim"]
    t: dict[str, list[int]] = {"model.embed_tokens.weight": [c["vocab_size"], h]}

    def moe(p: str) -> None:
        t[p + "mlp.gate.weight"] = [experts, h]
        for e in range(experts):
            t[p + f"mlp.experts.{e}.gate_proj.weight"] = [mi, h]
            t[p + f"mlp.experts.{e}.up_proj.weight"] = [mi, h]
            t[p + f"mlp.experts.{e}.down_proj.weight"] = [h, mi]
        t[p + "mlp.shared_expert.gate_proj.weight"] = [si, h]
        t[p + "mlp.shared_expert.up_proj.weight"] = [si, h]
        t[p + "mlp.shared_expert.down_proj.weight"] = [h, si]
        t[p + "mlp.shared_expert_gate.weight"] = [1, h]

    def full_attention(p: str) -> None:
        t[p + "self_attn.q_proj.weight"] = [heads * hd * 2, h]  # query and its output gate
        t[p + "self_attn.k_proj.weight"] = [kv * hd, h]
        t[p + "self_attn.v_proj.weight"] = [kv * hd, h]
        t[p + "self_attn.o_proj.weight"] = [h, heads * hd]
        t[p + "self_attn.q_norm.weight"] = [hd]
        t[p + "self_attn.k_norm.weight"] = [hd]

    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = [h]
        t[p + "post_attention_layernorm.weight"] = [h]
        if (i + 1) % c["full_attention_interval"]:
            t[p + "linear_attn.in_proj_qkvz.weight"] = [2 * key_dim + 2 * value_dim, h]
            t[p + "linear_attn.in_proj_ba.weight"] = [2 * c["linear_num_value_heads"], h]
            t[p + "linear_attn.conv1d.weight"] = [2 * key_dim + value_dim, 1, c["linear_conv_kernel_dim"]]
            t[p + "linear_attn.dt_bias"] = [c["linear_num_value_heads"]]
            t[p + "linear_attn.A_log"] = [c["linear_num_value_heads"]]
            t[p + "linear_attn.norm.weight"] = [c["linear_value_head_dim"]]
            t[p + "linear_attn.out_proj.weight"] = [h, value_dim]
        else:
            full_attention(p)
        moe(p)
    t["model.norm.weight"] = [h]
    t["lm_head.weight"] = [c["vocab_size"], h]
    # The MTP module, named as Qwen3-Next names it: off the decode path, out of every figure.
    t["mtp.fc.weight"] = [h, 2 * h]
    t["mtp.pre_fc_norm_embedding.weight"] = [h]
    full_attention("mtp.layers.0.")
    moe("mtp.layers.0.")
    t["mtp.norm.weight"] = [h]
    return t


def test_qwen3_next_kv_only_on_full_attention_layers_and_linear_attention_in_flops(tmp_path: Path) -> None:
    c = QWEN3_NEXT
    cost = snapshot(tmp_path, c, qwen3_next_tensors(c))
    h, layers, interval = c["hidden_size"], c["num_hidden_layers"], c["full_attention_interval"]
    full = layers // interval  # layers 3 and 7
    linear = layers - full
    heads, kv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]

    # KV: K and V of the full-attention layers only, BF16 cache.
    assert cost.kv_bytes_per_token == 2 * kv * hd * full * BF16 == 4096
    assert any("KV cache on 2 of 8 layers" in n for n in cost.notes)

    # FLOPs per token at no context: 2 x every weight a token multiplies with.
    key_dim = c["linear_num_key_heads"] * c["linear_key_head_dim"]
    value_dim = c["linear_num_value_heads"] * c["linear_value_head_dim"]
    linear_attn = (
        (2 * key_dim + 2 * value_dim) * h  # in_proj_qkvz
        + 2 * c["linear_num_value_heads"] * h  # in_proj_ba
        + (2 * key_dim + value_dim) * c["linear_conv_kernel_dim"]  # depthwise causal conv
        + h * value_dim  # out_proj
    )
    full_attn = heads * hd * 2 * h + 2 * kv * hd * h + h * heads * hd
    mi, si, experts, k = (
        c["moe_intermediate_size"],
        c["shared_expert_intermediate_size"],
        c["num_experts"],
        c["num_experts_per_tok"],
    )
    moe = experts * h + 3 * si * h + h + k * 3 * mi * h  # router, shared expert and its gate, k experts
    active = linear * linear_attn + full * full_attn + layers * moe + c["vocab_size"] * h
    assert cost.active_params == active
    # Attention over the context: QK^T and AV on the full layers only.
    assert cost.attention_flops_per_ctx_token == 2.0 * full * heads * 2 * hd
    assert cost.flops_per_token(1000) == 2.0 * active + 1000 * 2.0 * full * heads * 2 * hd

    # The MTP module's bytes are its own category, not decode bytes, and its experts not layer 0's.
    mtp = sum(math.prod(s) * BF16 for n, s in qwen3_next_tensors(c).items() if n.startswith("mtp."))
    assert cost.bytes_by_category["mtp"] == mtp
    assert sorted(cost.moe_layers) == list(range(layers))
    assert all(n == experts for n, _ in cost.moe_layers.values())
    assert cost.total_bytes - cost.bytes_by_category["mtp"] == sum(
        math.prod(s) * BF16 for n, s in qwen3_next_tensors(c).items() if not n.startswith("mtp.")
    )


# ---- DeepSeek-V3: the router in the FLOPs; DeepSeek's reference `mtp.N.*` naming ------------------

DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 7168,
    "num_hidden_layers": 4,  # published: 61 (first 3 dense, as here)
    "first_k_dense_replace": 3,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "n_shared_experts": 1,
    "moe_intermediate_size": 2048,
    "intermediate_size": 18432,
    "vocab_size": 129280,
    "tie_word_embeddings": False,
}


def deepseek_v3_tensors(c: dict, mtp_prefix: str | None) -> dict[str, list[int]]:
    h, heads = c["hidden_size"], c["num_attention_heads"]
    nope, rope, v, ql, kl = (
        c["qk_nope_head_dim"],
        c["qk_rope_head_dim"],
        c["v_head_dim"],
        c["q_lora_rank"],
        c["kv_lora_rank"],
    )
    mi, di, experts = c["moe_intermediate_size"], c["intermediate_size"], c["n_routed_experts"]
    t: dict[str, list[int]] = {"model.embed_tokens.weight": [c["vocab_size"], h]}

    def layer(p: str, moe: bool) -> None:
        t[p + "input_layernorm.weight"] = [h]
        t[p + "post_attention_layernorm.weight"] = [h]
        t[p + "self_attn.q_a_proj.weight"] = [ql, h]
        t[p + "self_attn.q_a_layernorm.weight"] = [ql]
        t[p + "self_attn.q_b_proj.weight"] = [heads * (nope + rope), ql]
        t[p + "self_attn.kv_a_proj_with_mqa.weight"] = [kl + rope, h]
        t[p + "self_attn.kv_a_layernorm.weight"] = [kl]
        t[p + "self_attn.kv_b_proj.weight"] = [heads * (nope + v), kl]
        t[p + "self_attn.o_proj.weight"] = [h, heads * v]
        if not moe:
            for proj, shape in (("gate_proj", [di, h]), ("up_proj", [di, h]), ("down_proj", [h, di])):
                t[p + f"mlp.{proj}.weight"] = shape
            return
        t[p + "mlp.gate.weight"] = [experts, h]
        t[p + "mlp.gate.e_score_correction_bias"] = [experts]
        for e in range(experts):
            t[p + f"mlp.experts.{e}.gate_proj.weight"] = [mi, h]
            t[p + f"mlp.experts.{e}.up_proj.weight"] = [mi, h]
            t[p + f"mlp.experts.{e}.down_proj.weight"] = [h, mi]
        si = mi * c["n_shared_experts"]
        t[p + "mlp.shared_experts.gate_proj.weight"] = [si, h]
        t[p + "mlp.shared_experts.up_proj.weight"] = [si, h]
        t[p + "mlp.shared_experts.down_proj.weight"] = [h, si]

    for i in range(c["num_hidden_layers"]):
        layer(f"model.layers.{i}.", moe=i >= c["first_k_dense_replace"])
    t["model.norm.weight"] = [h]
    t["lm_head.weight"] = [c["vocab_size"], h]
    if mtp_prefix is not None:  # the MTP block: embedding/hidden projection, then a MoE layer
        t[mtp_prefix + "eh_proj.weight"] = [h, 2 * h]
        t[mtp_prefix + "enorm.weight"] = [h]
        layer(mtp_prefix, moe=True)
    return t


@pytest.mark.parametrize(
    "mtp_prefix", [None, "model.layers.4.", "mtp.0."], ids=["no-mtp", "hf-layer-index", "mtp-named"]
)
def test_deepseek_v3_router_counts_in_flops_and_mtp_either_name_is_left_out(
    tmp_path: Path, mtp_prefix
) -> None:
    c = DEEPSEEK_V3
    tensors = deepseek_v3_tensors(c, mtp_prefix)
    cost = snapshot(tmp_path, c, tensors)
    h, heads, layers = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    nope, rope, v, ql, kl = (
        c["qk_nope_head_dim"],
        c["qk_rope_head_dim"],
        c["v_head_dim"],
        c["q_lora_rank"],
        c["kv_lora_rank"],
    )
    mi, experts, k = c["moe_intermediate_size"], c["n_routed_experts"], c["num_experts_per_tok"]
    dense, moe_layers = c["first_k_dense_replace"], layers - c["first_k_dense_replace"]
    attention = (
        ql * h + heads * (nope + rope) * ql + (kl + rope) * h + heads * (nope + v) * kl + h * heads * v
    )
    router = experts * h  # [256, 7168] per MoE layer; its correction bias is no matmul
    moe = router + 3 * mi * c["n_shared_experts"] * h + k * 3 * mi * h
    active = (
        layers * attention + dense * 3 * c["intermediate_size"] * h + moe_layers * moe + c["vocab_size"] * h
    )
    assert cost.active_params == active
    assert cost.flops_per_token(0) == 2.0 * active
    # KV per token: the MLA latent and the rope key of every layer, BF16.
    assert cost.kv_bytes_per_token == (kl + rope) * layers * BF16
    mtp = sum(math.prod(s) * BF16 for n, s in tensors.items() if mtp_prefix and n.startswith(mtp_prefix))
    assert cost.bytes_by_category.get("mtp", 0) == mtp
    assert sorted(cost.moe_layers) == list(range(dense, layers))  # no MTP experts among layer 3's
    decode_dense = sum(
        math.prod(s) * BF16
        for n, s in tensors.items()
        if not (mtp_prefix and n.startswith(mtp_prefix)) and ".experts." not in n and "embed_tokens" not in n
    )
    one_expert = 3 * mi * h * BF16
    assert cost.step_weight_bytes(1) == decode_dense + moe_layers * k * one_expert + h * BF16


def test_kv_layers_follow_layer_types_when_given() -> None:
    from sparkfleet.roofline.model import kv_layers

    # Qwen3-Next's layer_types as transformers derives it for 48 layers and interval 4: 12 full.
    derived = ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(48)]
    assert kv_layers({"layer_types": derived}, 48) == 12 == kv_layers({"full_attention_interval": 4}, 48)
    # Gemma-3 style: sliding and full layers both keep K/V; LFM2-style conv layers keep none.
    assert kv_layers({"layer_types": ["sliding_attention"] * 5 + ["full_attention"]}, 6) == 6
    assert kv_layers({"layer_types": ["conv", "conv", "full_attention"]}, 3) == 1
    assert kv_layers({}, 61) == 61
