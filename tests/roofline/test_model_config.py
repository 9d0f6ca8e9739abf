"""A staged config.json with impossible dimensions is refused naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkfleet.base.errors import SourceError
from sparkfleet.demo.synthmodel import SynthSpec, checkpoint_files
from sparkfleet.roofline.model import CostOptions, model_cost, snapshot_files
from sparkfleet.roofline.modelconfig import check_config


def staged(tmp_path: Path, **changes) -> Path:
    snap = tmp_path / "snap"
    snap.mkdir()
    for name, data in checkpoint_files(SynthSpec(experts=8, top_k=2)).items():
        (snap / name).write_bytes(data)
    config = json.loads((snap / "config.json").read_text())
    config.update(changes)
    (snap / "config.json").write_text(json.dumps(config))
    return snap


def test_the_untouched_synthetic_config_passes(tmp_path: Path) -> None:
    config, files = snapshot_files(staged(tmp_path))
    assert model_cost("ok", config, files, CostOptions()).num_layers == SynthSpec().layers


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"num_hidden_layers": -4}, "num_hidden_layers = -4 is out of range"),  # once -3,036,119 tok/s
        ({"num_hidden_layers": 0}, "num_hidden_layers = 0 is out of range"),
        ({"kv_lora_rank": 1e21}, "kv_lora_rank = 1e+21 is not a whole number"),  # once 0.0 tok/s
        ({"kv_lora_rank": 10**21}, "kv_lora_rank = 1000000000000000000000 is out of range"),
        ({"num_experts_per_tok": 100000}, "num_experts_per_tok = 100000 is more than n_routed_experts = 8"),
        ({"num_attention_heads": True}, "num_attention_heads = True is not a whole number"),
        ({"hidden_size": "4096"}, "hidden_size = '4096' is not a whole number"),
        ({"hidden_size": 4096.0}, "hidden_size = 4096.0 is not a whole number"),
        ({"qk_rope_head_dim": -1}, "qk_rope_head_dim = -1 is out of range"),
        ({"num_key_value_heads": 3}, "num_key_value_heads = 3 does not divide num_attention_heads"),
        ({"layer_types": ["full_attention"]}, "layer_types lists 1 layers but num_hidden_layers"),
        ({"layer_types": "full_attention"}, "layer_types must be a list"),
        ({"full_attention_interval": 1000}, "full_attention_interval = 1000 is more than"),
    ],
)
def test_impossible_dimensions_are_refused_naming_the_key(tmp_path: Path, changes: dict, key: str) -> None:
    snap = staged(tmp_path, **changes)
    with pytest.raises(SourceError) as err:
        snapshot_files(snap)
    assert key in err.value.message and "config.json" in err.value.message


def test_a_deeply_nested_config_is_a_clean_error(tmp_path: Path) -> None:
    snap = staged(tmp_path)
    (snap / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SourceError, match="nested too deeply|not a JSON object|cannot read"):
        snapshot_files(snap)


def test_zero_is_allowed_where_it_means_none_and_unread_keys_are_the_engines() -> None:
    check_config({"qk_rope_head_dim": 0, "intermediate_size": [1024, 2048], "n_shared_experts": 0}, "c")
    check_config({"num_hidden_layers": 3, "layer_types": ["conv", "full_attention", "conv"]}, "c")
