"""A DeepSeek-shaped synthetic checkpoint whose cost per token is known by construction.

The roofline model reads bytes from safetensors headers and categories from tensor names; this
writes a small checkpoint with the real names and shapes of a DeepSeek-V3-style MoE with MLA
(HF naming: `model.layers.N.self_attn.q_a_proj.weight`, `...mlp.experts.J.gate_proj.weight`,
`...mlp.shared_experts...`, `...mlp.gate.weight`), and computes what one token must cost from the
spec's own arithmetic — never by reading the files back — so a test can hold one against the other.
The demo hub fixture stages it as the demo lane's weights, so `make demo`'s report carries a
roofline section computed from files the demo really staged.
"""

from __future__ import annotations

import json
import math
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass

F8, BF16 = "F8_E4M3", "BF16"
DTYPE_SIZE = {F8: 1, BF16: 2}


@dataclass(frozen=True)
class SynthSpec:
    """The dimensions, all derived from `hidden` so one number scales the checkpoint."""

    hidden: int = 64
    layers: int = 4
    dense_layers: int = 0  # first_k_dense_replace
    experts: int = 8
    top_k: int = 2
    shared: int = 1
    heads: int = 4
    vocab: int = 256
    mtp_layers: int = 0
    index_topk: int | None = None
    tie_embeddings: bool = True

    @property
    def q_lora(self) -> int:
        return self.hidden // 2

    @property
    def kv_lora(self) -> int:
        return self.hidden // 4

    @property
    def nope(self) -> int:
        return self.hidden // 8

    @property
    def rope(self) -> int:
        return self.hidden // 16

    @property
    def v_dim(self) -> int:
        return self.hidden // 8

    @property
    def moe_inter(self) -> int:
        return self.hidden // 2

    @property
    def dense_inter(self) -> int:
        return self.hidden * 2

    @classmethod
    def for_layer_bytes(cls, layer_bytes: int, layers: int, **kw: object) -> SynthSpec:
        """A spec whose MoE layers are each about `layer_bytes` (hidden a multiple of 16)."""
        probe = cls(hidden=16, layers=1)
        per_h2 = probe.moe_layer_bytes() / 16**2  # layer bytes grow with hidden^2
        hidden = max(16, 16 * round(math.sqrt(layer_bytes / per_h2) / 16))
        vocab = max(16, layer_bytes // (4 * hidden))
        return cls(hidden=hidden, layers=layers, vocab=vocab, **kw)  # type: ignore[arg-type]

    # -- the tensors -------------------------------------------------------------------------------
    def config(self) -> dict:
        cfg = {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            "hidden_size": self.hidden,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.heads,
            "q_lora_rank": self.q_lora,
            "kv_lora_rank": self.kv_lora,
            "qk_nope_head_dim": self.nope,
            "qk_rope_head_dim": self.rope,
            "v_head_dim": self.v_dim,
            "n_routed_experts": self.experts,
            "num_experts_per_tok": self.top_k,
            "n_shared_experts": self.shared,
            "moe_intermediate_size": self.moe_inter,
            "intermediate_size": self.dense_inter,
            "first_k_dense_replace": self.dense_layers,
            "vocab_size": self.vocab,
            "tie_word_embeddings": self.tie_embeddings,
            "num_nextn_predict_layers": self.mtp_layers,
        }
        if self.index_topk is not None:
            cfg["index_topk"] = self.index_topk
        return cfg

    def layer_tensors(self, i: int) -> dict[str, tuple[str, list[int]]]:
        h, p = self.hidden, f"model.layers.{i}."
        t = {
            p + "input_layernorm.weight": (BF16, [h]),
            p + "post_attention_layernorm.weight": (BF16, [h]),
            p + "self_attn.q_a_proj.weight": (F8, [self.q_lora, h]),
            p + "self_attn.q_a_layernorm.weight": (BF16, [self.q_lora]),
            p + "self_attn.q_b_proj.weight": (F8, [self.heads * (self.nope + self.rope), self.q_lora]),
            p + "self_attn.kv_a_proj_with_mqa.weight": (F8, [self.kv_lora + self.rope, h]),
            p + "self_attn.kv_a_layernorm.weight": (BF16, [self.kv_lora]),
            p + "self_attn.kv_b_proj.weight": (F8, [self.heads * (self.nope + self.v_dim), self.kv_lora]),
            p + "self_attn.o_proj.weight": (F8, [h, self.heads * self.v_dim]),
        }
        if i < self.dense_layers:
            for proj, shape in self._mlp(self.dense_inter).items():
                t[p + f"mlp.{proj}.weight"] = (F8, shape)
            return t
        t[p + "mlp.gate.weight"] = (BF16, [self.experts, h])
        for j in range(self.experts):
            for proj, shape in self._mlp(self.moe_inter).items():
                t[p + f"mlp.experts.{j}.{proj}.weight"] = (F8, shape)
        for proj, shape in self._mlp(self.moe_inter * self.shared).items():
            t[p + f"mlp.shared_experts.{proj}.weight"] = (F8, shape)
        return t

    def _mlp(self, inter: int) -> dict[str, list[int]]:
        h = self.hidden
        return {"gate_proj": [inter, h], "up_proj": [inter, h], "down_proj": [h, inter]}

    def mtp_tensors(self) -> dict[str, tuple[str, list[int]]]:
        h = self.hidden
        return {
            f"model.layers.{self.layers + m}.eh_proj.weight": (F8, [h, 2 * h]) for m in range(self.mtp_layers)
        }

    def top_tensors(self) -> dict[str, tuple[str, list[int]]]:
        t = {
            "model.embed_tokens.weight": (BF16, [self.vocab, self.hidden]),
            "model.norm.weight": (BF16, [self.hidden]),
        }
        if not self.tie_embeddings:
            t["lm_head.weight"] = (BF16, [self.vocab, self.hidden])
        return t

    # -- the answer, by arithmetic on the spec -----------------------------------------------------
    def moe_layer_bytes(self) -> int:
        return sum(_nbytes(d, s) for d, s in self.layer_tensors(self.dense_layers).values())

    def expert_bytes(self) -> int:
        return 3 * self.moe_inter * self.hidden  # F8: one byte an element

    def decode_bytes_per_token(self) -> int:
        """Bytes one decode token reads: everything but the untouched experts, one embedding row."""
        h = self.hidden
        per_layer_dense = 2 * h * 2 + self.q_lora * 2 + self.kv_lora * 2  # norms (BF16)
        per_layer_dense += (
            self.q_lora * h
            + self.heads * (self.nope + self.rope) * self.q_lora
            + (self.kv_lora + self.rope) * h
            + self.heads * (self.nope + self.v_dim) * self.kv_lora
            + h * self.heads * self.v_dim
        )
        moe_layers = self.layers - self.dense_layers
        total = self.layers * per_layer_dense
        total += self.dense_layers * 3 * self.dense_inter * h
        total += moe_layers * (self.experts * h * 2 + 3 * self.moe_inter * self.shared * h)
        total += moe_layers * self.top_k * self.expert_bytes()
        head = self.vocab * h * 2
        return total + h * 2 + head + h * 2  # final norm, head, one embedding row

    def kv_bytes_per_token(self, cache_bytes: int = 2) -> int:
        return (self.kv_lora + self.rope) * self.layers * cache_bytes

    def active_params(self) -> int:
        """Elements of the weights one token multiplies with (norms excluded; the router is a matmul)."""
        h = self.hidden
        attn = (
            self.q_lora * h
            + self.heads * (self.nope + self.rope) * self.q_lora
            + (self.kv_lora + self.rope) * h
            + self.heads * (self.nope + self.v_dim) * self.kv_lora
            + h * self.heads * self.v_dim
        )
        moe_layers = self.layers - self.dense_layers
        mlp = self.dense_layers * 3 * self.dense_inter * h
        mlp += moe_layers * (3 * self.moe_inter * self.shared * h + self.top_k * 3 * self.moe_inter * h)
        mlp += moe_layers * self.experts * h  # the router: hidden -> one logit per expert
        return self.layers * attn + mlp + self.vocab * h


def tensors_file_bytes(tensors: dict[str, tuple[str, list[int], bytes]]) -> bytes:
    """A valid safetensors file of tensors given as name -> (dtype, shape, raw bytes), in order."""
    header, offset = {}, 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + b"".join(t[2] for t in tensors.values())


def _nbytes(dtype: str, shape: list[int]) -> int:
    return math.prod(shape) * DTYPE_SIZE[dtype]


def filled(
    tensors: dict[str, tuple[str, list[int]]], noise: Callable[[int], bytes]
) -> dict[str, tuple[str, list[int], bytes]]:
    """The tensors with `noise(n)` bytes as their data."""
    return {name: (dtype, shape, noise(_nbytes(dtype, shape))) for name, (dtype, shape) in tensors.items()}


def checkpoint_files(
    spec: SynthSpec, noise: Callable[[int], bytes] | None = None, per_file_layers: int = 1
) -> dict[str, bytes]:
    """File name -> bytes: config.json, one shard per `per_file_layers` layers, top tensors, index."""
    noise = noise or (lambda n: bytes(n))
    groups: list[dict[str, tuple[str, list[int]]]] = []
    for start in range(0, spec.layers, per_file_layers):
        group: dict[str, tuple[str, list[int]]] = {}
        for i in range(start, min(spec.layers, start + per_file_layers)):
            group.update(spec.layer_tensors(i))
        groups.append(group)
    groups.append({**spec.top_tensors(), **spec.mtp_tensors()})
    names = [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    files = {n: tensors_file_bytes(filled(g, noise)) for n, g in zip(names, groups, strict=True)}
    weight_map = {t: n for n, g in zip(names, groups, strict=True) for t in g}
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": sum(len(b) for b in files.values())}, "weight_map": weight_map}
    ).encode()
    files["config.json"] = json.dumps(spec.config(), indent=1).encode()
    return files


def seeded_noise(seed: int) -> Callable[[int], bytes]:
    rng = random.Random(seed)
    return lambda n: rng.randbytes(n)
