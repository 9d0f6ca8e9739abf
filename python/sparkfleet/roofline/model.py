"""What one token costs a model, in bytes and FLOPs, read from the checkpoint itself.

Decode on a Spark is bound by how many bytes each rank must stream from unified memory per step,
so the model's side of the roofline is an exact byte count, not a parameter-count estimate: every
tensor's size comes from its safetensors header (offsets only, `safetensors_header`), and every
tensor is put in one category by its name. Per decode token the model reads all of its dense
parts (attention, dense/shared MLPs, router, norms, LM head), one embedding row, the top-k routed
experts of each MoE layer and the engram rows it looks up; KV bytes come from config.json
(MLA latent or per-head K/V). Quantized formats need no special case: the bytes are whatever the
headers say (EXL3 trellis tensors, FP8 weights with their scales).

What cannot be read from the files (how many engram rows a token looks up, the KV cache dtype) comes
from the lane's recipe, and whatever is assumed is written into `notes`, so a figure never hides
an assumption.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.errors import SourceError
from ..facts.safetensors_header import read_header
from .modelconfig import check_config

# Tensor categories, first match wins (names of both HF `model.layers.N.mlp...` and the reference
# `layers.N.ffn...` styles). `.gate.` (router) must not match `gate_proj` (a dense/expert matrix).
# `linear_attn` is the linear-attention mixer of hybrid models (Qwen3-Next's Gated DeltaNet).
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("engram", re.compile(r"(^|\.)engram\.")),
    ("routed_expert", re.compile(r"\.experts\.\d+\.")),
    ("shared_expert", re.compile(r"shared_expert")),
    ("router", re.compile(r"\.(mlp|ffn|moe)\.gate\.|\.router\.")),
    ("embedding", re.compile(r"(^|\.)(embed_tokens|embed|wte|tok_embeddings)\.")),
    ("head", re.compile(r"(^|\.)(lm_head|head)\.")),
    ("norm", re.compile(r"norm")),
    ("attention", re.compile(r"\.(self_attn|attn|attention|linear_attn)\.")),
    ("dense_mlp", re.compile(r"\.(mlp|ffn|feed_forward)\.")),
)
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
# MTP modules named as such (Qwen3-Next `mtp.layers.0...`, `mtp.fc`; DeepSeek's reference `mtp.0...`;
# MiMo `model.mtp_layers.0...`), beside the DeepSeek-V3 HF style of layer indices past the last.
_MTP = re.compile(r"(?:^|\.)mtp(?:\.|_layers\.)")
_EXPERT = re.compile(r"\.experts\.(\d+)\.")
# Always read in full once per decode step.
DENSE_CATEGORIES = ("attention", "dense_mlp", "shared_expert", "router", "norm", "head", "other")
# The weights a token multiplies with (FLOPs = 2 x their elements); block scales are not weights,
# and neither are vectors (biases, norms' gains, a router's correction bias, A_log): only tensors of
# two or more dimensions count. The router is a matmul too (hidden x experts per MoE layer).
MATMUL_CATEGORIES = ("attention", "dense_mlp", "shared_expert", "router", "head", "routed_expert")
FLOAT_DTYPES = ("F8_E4M3", "F8_E5M2", "F16", "BF16", "F32", "F64")
_SCALE = re.compile(r"scale")


def category_of(name: str, num_layers: int | None) -> str:
    """The category of tensor `name`; `mtp.*` and layers past `num_layers` are the MTP head.

    The MTP head is not on the decode path (a drafter's own cost, where a lane uses it).
    """
    if _MTP.search(name):
        return "mtp"
    layer = _LAYER.search(name)
    if layer and num_layers is not None and int(layer.group(1)) >= num_layers:
        return "mtp"
    for category, rule in _RULES:
        if rule.search(name):
            return category
    return "other"


@dataclass(frozen=True)
class CostOptions:
    """What the files cannot say (from the recipe's [roofline] table), each default a stated assumption."""

    engram_rows_per_token: int | None = None  # hash lookups per token per engram layer
    kv_cache_bytes: int = 2  # bytes per KV element (2 = BF16 cache; 1 = FP8 cache)


@dataclass
class ModelCost:
    """One checkpoint's cost per token (whole model, all ranks together; divide by the world)."""

    name: str
    architecture: str | None
    num_layers: int | None
    hidden_size: int | None
    total_bytes: int
    bytes_by_category: dict[str, int]
    # Routed experts per MoE layer: expert count and mean bytes of one expert.
    moe_layers: dict[int, tuple[int, float]]
    experts_per_token: int | None
    embedding_row_bytes: float
    engram_row_bytes: dict[int, int]  # engram layer -> bytes of one looked-up row (all its tensors)
    engram_rows_per_token: int | None
    # KV cache: bytes one context token adds (all layers) and whether TP ranks split it.
    kv_bytes_per_token: int | None
    kv_split_by_tp: bool
    kv_heads: int | None
    attended_cap: int | None  # sparse attention (DSA index_topk): tokens attended at most
    indexer_bytes_per_token: int  # DSA indexer keys read over the whole context
    active_params: int | None  # elements of the weights one token multiplies with (float dtypes)
    attention_flops_per_ctx_token: float | None  # FLOPs per token per attended context token
    weight_dtype: str | None  # the dtype holding most of the dense weights (picks the peak FLOP/s)
    notes: list[str] = field(default_factory=list)

    def routed_bytes(self, tokens: int) -> float:
        """Routed-expert bytes a step over `tokens` tokens reads (expected distinct experts per layer)."""
        k = self.experts_per_token or 0
        return sum(expected_experts(n, k, tokens) * mean for n, mean in self.moe_layers.values())

    def step_weight_bytes(self, tokens: int = 1) -> float:
        """Weight bytes one forward step over `tokens` tokens reads (batch 1, all ranks)."""
        dense = sum(self.bytes_by_category.get(c, 0) for c in DENSE_CATEGORIES)
        routed = self.routed_bytes(tokens)
        embed = tokens * self.embedding_row_bytes
        engram = tokens * (self.engram_rows_per_token or 0) * sum(self.engram_row_bytes.values())
        return dense + routed + embed + engram

    def decode_breakdown(self, tokens: int = 1) -> dict[str, float]:
        """`step_weight_bytes` by category, for the report."""
        out = {c: float(self.bytes_by_category.get(c, 0)) for c in DENSE_CATEGORIES}
        out["routed_expert"] = self.routed_bytes(tokens)
        out["embedding"] = tokens * self.embedding_row_bytes
        out["engram"] = tokens * (self.engram_rows_per_token or 0) * sum(self.engram_row_bytes.values())
        return {k: v for k, v in out.items() if v}

    def attended(self, context: int) -> int:
        return min(context, self.attended_cap) if self.attended_cap else context

    def kv_read_bytes(self, context: int, tp: int) -> float:
        """KV bytes one decode token reads on one rank at `context` tokens of context."""
        if self.kv_bytes_per_token is None:
            return 0.0
        split = min(tp, self.kv_heads or tp) if self.kv_split_by_tp else 1
        latent = self.attended(context) * self.kv_bytes_per_token / split
        return latent + context * self.indexer_bytes_per_token

    def flops_per_token(self, mean_context: float) -> float | None:
        """Forward FLOPs of one token attending `mean_context` tokens (all ranks together)."""
        if self.active_params is None:
            return None
        attn = (self.attention_flops_per_ctx_token or 0.0) * self.attended(int(mean_context))
        return 2.0 * self.active_params + attn


def expected_experts(experts: int, k: int, tokens: int) -> float:
    """Distinct experts `tokens` tokens touch in one layer when each picks `k` of `experts` uniformly.

    One token touches exactly k; a speculative step verifying several tokens touches more, but
    fewer than tokens x k, because tokens share experts: E * (1 - (1 - k/E)^tokens).
    """
    if experts <= 0 or k <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - min(k, experts) / experts) ** tokens)


def _config_int(config: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def kv_layers(config: dict[str, Any], layers: int) -> int:
    """Layers that keep a KV cache: the attention layers, not the linear-attention (or conv) ones.

    Hybrid models name each layer's kind in `layer_types` ("full_attention", "sliding_attention",
    "linear_attention", ...), or put one full-attention layer every `full_attention_interval` layers
    (Qwen3-Next: layer i is full when (i + 1) % interval == 0, as transformers' Qwen3NextConfig
    derives `layer_types`). A sliding-window layer is counted whole: an upper bound past its window.
    """
    types = config.get("layer_types")
    if isinstance(types, list):
        return sum(1 for t in types if "attention" in str(t) and "linear" not in str(t))
    interval = _config_int(config, "full_attention_interval")
    if interval:
        return sum(1 for i in range(layers) if (i + 1) % interval == 0)
    return layers


def _kv_layout(config: dict[str, Any], all_layers: int | None, options: CostOptions, notes: list[str]):
    """(bytes per context token, split by TP?, kv heads, attention FLOPs per context token)."""
    heads = _config_int(config, "num_attention_heads", "n_heads")
    hidden = _config_int(config, "hidden_size", "dim")
    if all_layers is None or heads is None:
        notes.append("config.json lacks num_hidden_layers/num_attention_heads: KV and attention unknown")
        return None, False, None, None
    layers = kv_layers(config, all_layers)
    if layers != all_layers:
        notes.append(
            f"hybrid attention: a KV cache on {layers} of {all_layers} layers; the linear-attention "
            "layers keep a fixed-size state, not counted per context token"
        )
    kv_lora = _config_int(config, "kv_lora_rank")
    if kv_lora is not None:
        rope = _config_int(config, "qk_rope_head_dim") or 0
        nope = _config_int(config, "qk_nope_head_dim") or 0
        v_dim = _config_int(config, "v_head_dim") or nope
        per_token = (kv_lora + rope) * layers * options.kv_cache_bytes
        # Prefill runs MLA unabsorbed: QK^T over nope+rope dims and AV over v dims, 2 FLOPs a MAC.
        flops = 2.0 * layers * heads * ((nope + rope) + v_dim)
        notes.append(f"MLA: the latent KV ({kv_lora}+{rope} values a layer) is held whole on every TP rank")
        return per_token, False, 1, flops
    kv_heads = _config_int(config, "num_key_value_heads", "n_kv_heads") or heads
    head_dim = _config_int(config, "head_dim") or (hidden // heads if hidden else None)
    if head_dim is None:
        notes.append("config.json gives no head_dim or hidden_size: KV unknown")
        return None, False, None, None
    per_token = 2 * kv_heads * head_dim * layers * options.kv_cache_bytes
    return per_token, True, kv_heads, 2.0 * layers * heads * 2 * head_dim


@dataclass(frozen=True)
class CheckpointFile:
    """A safetensors file of the snapshot: the name shown in errors and the file to open."""

    shown: str
    path: Path


def snapshot_files(
    snapshot: Path, hub_root: Path | None = None
) -> tuple[dict[str, Any], list[CheckpointFile]]:
    """config.json and every *.safetensors of a snapshot folder, links resolved inside `hub_root`."""
    root = os.path.realpath(hub_root) if hub_root else None

    def inside(p: Path) -> Path:
        real = os.path.realpath(p)
        if root is not None and os.path.commonpath([root, real]) != root:
            raise SourceError(f"{p}: links outside the hub cache ({real})", hint="re-stage the snapshot")
        return Path(real)

    config_path = snapshot / "config.json"
    if not config_path.exists():
        raise SourceError(
            f"{config_path}: no config.json in the snapshot",
            hint="stage the lane first (sparkfleet stage HOST --lane LANE)",
        )
    try:
        config = json.loads(inside(config_path).read_text())
    except (OSError, ValueError) as exc:
        raise SourceError(f"{config_path}: cannot read config.json: {exc}") from None
    except RecursionError:
        raise SourceError(f"{config_path}: config.json is nested too deeply to be a model config") from None
    if not isinstance(config, dict):
        raise SourceError(f"{config_path}: config.json is not a JSON object")
    check_config(config, str(config_path))
    files = [
        CheckpointFile(str(p), inside(p))
        for p in sorted(snapshot.rglob("*.safetensors"))
        if not p.name.startswith(".")
    ]
    if not files:
        raise SourceError(f"{snapshot}: no .safetensors files in the snapshot")
    return config, files


def model_cost(
    name: str, config: dict[str, Any], files: list[CheckpointFile], options: CostOptions = CostOptions()
) -> ModelCost:
    """Cost per token of the checkpoint made of `files` (headers only) described by `config`."""
    notes: list[str] = []
    layers = _config_int(config, "num_hidden_layers", "n_layers")
    by_category: dict[str, int] = defaultdict(int)
    experts: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    engram_rows: dict[int, int] = defaultdict(int)
    embed_row = 0
    dtype_bytes: dict[str, int] = defaultdict(int)
    elements: dict[str, int] = defaultdict(int)  # matmul weight elements by category
    expert_elements: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    params_known = True
    total = 0
    for f in files:
        header = read_header(f.path, f.shown)
        for tensor in header.tensors.values():
            category = category_of(tensor.name, layers)
            by_category[category] += tensor.nbytes
            total += tensor.nbytes
            layer_match = _LAYER.search(tensor.name)
            layer = int(layer_match.group(1)) if layer_match else -1
            if category == "routed_expert":
                expert = int(_EXPERT.search(tensor.name).group(1))  # type: ignore[union-attr]
                experts[layer][expert] += tensor.nbytes
            elif category == "engram":
                engram_rows[layer] += tensor.row_bytes
            elif category == "embedding":
                embed_row += tensor.row_bytes
            if category not in MATMUL_CATEGORIES or _SCALE.search(tensor.name) or len(tensor.shape) < 2:
                continue
            dtype_bytes[tensor.dtype] += tensor.nbytes
            if tensor.dtype not in FLOAT_DTYPES:
                params_known = False
            count = math.prod(tensor.shape)
            if category == "routed_expert":
                expert_elements[layer][expert] += count
            else:
                elements[category] += count
    k = _config_int(config, "num_experts_per_tok", "moe_topk", "n_activated_experts")
    moe_layers = {
        layer: (len(per_expert), sum(per_expert.values()) / len(per_expert))
        for layer, per_expert in sorted(experts.items())
    }
    if moe_layers and k is None:
        notes.append("config.json names no num_experts_per_tok: routed experts left out of the decode bytes")
    if "head" not in by_category and config.get("tie_word_embeddings"):
        by_category["head"] = by_category.get("embedding", 0)
        notes.append("tie_word_embeddings: the LM head is the embedding matrix, read in full per step")
    rows_per_token = None
    if engram_rows:  # config.json states it ((max_ngram_size - 1) x n_heads); [roofline] only confirms
        from ..engram.checkpoint import from_config, reconcile_rows_per_token

        ckpt = from_config(config, f"{name}: config.json")
        rows_per_token = reconcile_rows_per_token(ckpt, options.engram_rows_per_token, "recipe [roofline]")
    if engram_rows and rows_per_token is None:
        notes.append(
            "engram rows per token not declared ([roofline] engram_rows_per_token): engram reads left out"
        )
    if by_category.get("mtp"):
        notes.append(f"MTP tensors (mtp.*, or layer index >= {layers}) are not on the decode path: left out")
    if "head" not in elements and config.get("tie_word_embeddings"):
        elements["head"] = (by_category.get("embedding", 0) // max(embed_row, 1)) * (
            _config_int(config, "hidden_size", "dim") or 0
        )
    active = sum(elements.values()) + sum(
        expected_experts(len(per), k or 0, 1) * sum(per.values()) / len(per)
        for per in expert_elements.values()
    )
    if not params_known:
        notes.append("integer-packed (quantized) weights: FLOPs per token are not derivable from the headers")
    kv_per_token, kv_split, kv_heads, attn_flops = _kv_layout(config, layers, options, notes)
    cap = _config_int(config, "index_topk")
    index_dim = _config_int(config, "index_head_dim") or 0
    indexer = (index_dim * (layers or 0) * options.kv_cache_bytes) if cap else 0
    if cap:
        notes.append(f"sparse attention: each token attends at most index_topk = {cap} context tokens")
    return ModelCost(
        name=name,
        architecture=(config.get("architectures") or [None])[0],
        num_layers=layers,
        hidden_size=_config_int(config, "hidden_size", "dim"),
        total_bytes=total,
        bytes_by_category=dict(by_category),
        moe_layers=moe_layers,
        experts_per_token=k,
        embedding_row_bytes=embed_row,
        engram_row_bytes=dict(engram_rows),
        engram_rows_per_token=rows_per_token,
        kv_bytes_per_token=kv_per_token,
        kv_split_by_tp=kv_split,
        kv_heads=kv_heads,
        attended_cap=cap,
        indexer_bytes_per_token=indexer,
        active_params=int(active) if params_known else None,
        attention_flops_per_ctx_token=attn_flops,
        weight_dtype=_dominant(dtype_bytes),
        notes=notes,
    )


def _dominant(dtype_bytes: dict[str, int]) -> str | None:
    return max(dtype_bytes, key=lambda d: dtype_bytes[d]) if dtype_bytes else None
