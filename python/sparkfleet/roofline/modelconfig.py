"""A staged config.json's dimensions, checked before any figure is computed from them.

The roofline multiplies these numbers together: a `num_hidden_layers` of -4 made a bound of
-3,036,119 tok/s, a `kv_lora_rank` of 1e21 a bound of 0.0, and 100000 experts per token out of 8
were accepted. A dimension must be a whole JSON number (never a bool, never a
float such as 1e21), inside a range no published model comes near the edges of, and consistent
with its neighbours; otherwise the config is refused, naming the key.
"""

from __future__ import annotations

from typing import Any

from ..base.errors import SourceError

# Far above any published model (DeepSeek-V3: 61 layers, 7168 hidden, 256 experts, vocab 129280;
# Llama 4: vocab 202048), far below where a product overflows into nonsense.
LIMIT = 1 << 24

# Only what the roofline reads (model.py) and the expert counts its top-k is held to: every other
# key is the engine's business, and an exotic model's list-valued intermediate_size stays legal.
# At least 1 wherever a config states them:
POSITIVE = (
    "num_hidden_layers", "n_layers", "num_attention_heads", "n_heads", "num_key_value_heads",
    "n_kv_heads", "hidden_size", "dim", "head_dim", "kv_lora_rank", "v_head_dim", "qk_nope_head_dim",
    "num_experts_per_tok", "moe_topk", "n_activated_experts", "n_routed_experts", "num_experts",
    "num_local_experts", "index_topk", "index_head_dim", "full_attention_interval",
)  # fmt: skip
# Where 0 is meaningful (no rope part of the query/key head):
NON_NEGATIVE = ("qk_rope_head_dim",)
_LAYERS = ("num_hidden_layers", "n_layers")
_HEADS = ("num_attention_heads", "n_heads")
_KV_HEADS = ("num_key_value_heads", "n_kv_heads")
_TOP_K = ("num_experts_per_tok", "moe_topk", "n_activated_experts")
_EXPERTS = ("n_routed_experts", "num_experts", "num_local_experts")


def _first(config: dict[str, Any], keys: tuple[str, ...]) -> tuple[str, int] | None:
    for key in keys:
        if config.get(key) is not None:
            return key, config[key]
    return None


def check_config(config: dict[str, Any], shown: str) -> None:
    """Refuse a config whose dimensions are not whole, in range and consistent (SourceError names the key)."""
    for key in (*POSITIVE, *NON_NEGATIVE):
        value = config.get(key)
        if value is None:
            continue
        low = 1 if key in POSITIVE else 0
        if not isinstance(value, int) or isinstance(value, bool):
            raise SourceError(f"{shown}: {key} = {value!r} is not a whole number")
        if not low <= value <= LIMIT:
            raise SourceError(f"{shown}: {key} = {value} is out of range ({low} to {LIMIT})")
    heads, kv_heads = _first(config, _HEADS), _first(config, _KV_HEADS)
    if heads and kv_heads and (kv_heads[1] > heads[1] or heads[1] % kv_heads[1]):
        raise SourceError(f"{shown}: {kv_heads[0]} = {kv_heads[1]} does not divide {heads[0]} = {heads[1]}")
    top_k, experts = _first(config, _TOP_K), _first(config, _EXPERTS)
    if top_k and experts and top_k[1] > experts[1]:
        raise SourceError(f"{shown}: {top_k[0]} = {top_k[1]} is more than {experts[0]} = {experts[1]}")
    layers = _first(config, _LAYERS)
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise SourceError(f"{shown}: layer_types must be a list of layer kinds (strings)")
        if layers and len(types) != layers[1]:
            raise SourceError(f"{shown}: layer_types lists {len(types)} layers but {layers[0]} = {layers[1]}")
    interval = config.get("full_attention_interval")
    if interval is not None and layers and interval > layers[1]:
        raise SourceError(
            f"{shown}: full_attention_interval = {interval} is more than {layers[0]} = {layers[1]}"
        )
