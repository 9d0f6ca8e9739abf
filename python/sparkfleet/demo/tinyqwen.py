"""A tiny Qwen2-architecture model a real engine can serve: a locally trained tokenizer + random weights.

Why: every bench figure used to be checked against sparkfleet's own demo server. A real engine
(vLLM's CPU build) serving a real architecture is the counterpart that shows where the bench is
wrong; it needs a model, and the tests may not download one. So this builds one from nothing the
network gives: a byte-level BPE tokenizer trained (`tokenizers`) on the public-domain corpus the
package ships plus the bench's own prompt shapes, and Qwen2 safetensors of seeded random BF16
weights, in the huggingface hub cache layout sparkfleet stages (`models--org--name/blobs`,
`snapshots/<commit>`, `refs/main`).

The special tokens' output rows are zero, so greedy decoding never picks one: every generated
token then decodes to visible text, and a usage count can be held to the text streamed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .hubfixture import write_repo
from .synthmodel import tensors_file_bytes

TINY_REPO = "sparkfleet-test/tiny-qwen2"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# ChatML, as Qwen2 instruct models template it.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class TinyQwenSpec:
    """Small enough for 2 shared CPU cores; head_dim 64 is one the CPU attention kernels take."""

    hidden: int = 128
    intermediate: int = 256
    layers: int = 2
    heads: int = 2
    kv_heads: int = 1
    vocab_target: int = 2048  # BPE stops earlier when the corpus has no more merges
    max_positions: int = 8192
    seed: int = 18

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


@dataclass(frozen=True)
class TinyModel:
    hub: Path
    repo: str
    commit: str
    snapshot: Path
    vocab_size: int


def training_text() -> list[str]:
    """What the tokenizer learns from: the shipped corpus and the bench's own prompt shapes."""
    from ..bench.prompts import make_prompt, sentences

    return [*sentences(), *(make_prompt(512, f"sf-train-{i}") for i in range(8))]


def train_tokenizer(spec: TinyQwenSpec) -> str:
    """A byte-level BPE tokenizer.json (every byte is a token, so any text round-trips)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_target,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(), trainer)
    return tok.to_str()


def _bf16(values: object) -> bytes:
    import numpy as np

    arr = np.asarray(values, dtype=np.float32)
    return (arr.view(np.uint32) >> 16).astype("<u2").tobytes()


def weights(spec: TinyQwenSpec, vocab: int, special_ids: list[int]) -> bytes:
    """Qwen2ForCausalLM tensors (HF names), seeded random BF16; untied lm_head, specials' rows zero."""
    import numpy as np

    rng = np.random.default_rng(spec.seed)
    h, kv = spec.hidden, spec.kv_heads * spec.head_dim

    def normal(*shape: int, std: float = 0.02) -> tuple[str, list[int], bytes]:
        return ("BF16", list(shape), _bf16(rng.standard_normal(shape) * std))

    def ones(n: int) -> tuple[str, list[int], bytes]:
        return ("BF16", [n], _bf16(np.ones(n)))

    tensors = {"model.embed_tokens.weight": normal(vocab, h, std=1.0)}
    for i in range(spec.layers):
        p = f"model.layers.{i}"
        tensors.update({
            f"{p}.input_layernorm.weight": ones(h),
            f"{p}.self_attn.q_proj.weight": normal(h, h),
            f"{p}.self_attn.q_proj.bias": normal(h),
            f"{p}.self_attn.k_proj.weight": normal(kv, h),
            f"{p}.self_attn.k_proj.bias": normal(kv),
            f"{p}.self_attn.v_proj.weight": normal(kv, h),
            f"{p}.self_attn.v_proj.bias": normal(kv),
            f"{p}.self_attn.o_proj.weight": normal(h, h),
            f"{p}.post_attention_layernorm.weight": ones(h),
            f"{p}.mlp.gate_proj.weight": normal(spec.intermediate, h),
            f"{p}.mlp.up_proj.weight": normal(spec.intermediate, h),
            f"{p}.mlp.down_proj.weight": normal(h, spec.intermediate),
        })  # fmt: skip
    tensors["model.norm.weight"] = ones(h)
    head = rng.standard_normal((vocab, h))
    head[special_ids] = 0.0
    tensors["lm_head.weight"] = ("BF16", [vocab, h], _bf16(head))
    return tensors_file_bytes(tensors)


def model_files(spec: TinyQwenSpec = TinyQwenSpec()) -> dict[str, bytes]:
    """Every file of the repo: config, generation config, tokenizer files, weights."""
    tokenizer_json = train_tokenizer(spec)
    vocab_map = json.loads(tokenizer_json)["model"]["vocab"]
    ids = {t: vocab_map[t] for t in SPECIAL_TOKENS}
    vocab = -(-len(vocab_map) // 64) * 64  # padded, as real checkpoints pad the embedding
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_positions,
        "max_window_layers": spec.layers,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "sliding_window": None,
        "use_sliding_window": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": vocab,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": spec.max_positions,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }
    generation = {"bos_token_id": ids["<|endoftext|>"], "eos_token_id": [ids["<|im_end|>"]]}
    return {
        "config.json": json.dumps(config, indent=1).encode(),
        "generation_config.json": json.dumps(generation, indent=1).encode(),
        "tokenizer.json": tokenizer_json.encode(),
        "tokenizer_config.json": json.dumps(tokenizer_config, indent=1).encode(),
        "model.safetensors": weights(spec, vocab, list(ids.values())),
    }


def build_tiny_qwen(hub: Path, spec: TinyQwenSpec = TinyQwenSpec(), repo: str = TINY_REPO) -> TinyModel:
    """Write the model into the hub cache at `hub` (created); the commit is the content's hash."""
    files = model_files(spec)
    digest = hashlib.sha1(usedforsecurity=False)
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    commit = digest.hexdigest()
    snapshot = write_repo(Path(hub), repo, commit, files)
    vocab = json.loads(files["config.json"])["vocab_size"]
    return TinyModel(Path(hub).resolve(), repo, commit, snapshot, vocab)
