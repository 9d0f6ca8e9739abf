"""Prompts look like real use (prose, code, JSON from the shipped public-domain corpus), are unique
per request, and have the size asked for: in words, or in the model's own tokens when a
tokenizer.json is at hand (offline)."""

from __future__ import annotations

import json

import pytest

from sparkfleet.bench.prompts import blocks, make_prompt, sentences


def test_the_corpus_ships_with_the_package_and_reads_offline():
    assert sentences()[0].startswith("Four score and seven years ago")
    assert any(s.startswith("We the People") for s in sentences())


@pytest.mark.parametrize("size", [1, 2, 8, 9, 10, 64, 487, 4096])
def test_exact_word_counts_and_the_prefix_first(size):
    prompt = make_prompt(size, "sf-test-r3")
    assert len(prompt.split()) == size and prompt.split()[0] == "sf-test-r3"


def test_prose_code_and_json_all_appear_and_parse():
    code, record = next(blocks(0, "code")), next(blocks(2, "json"))
    compile(code, "<prompt>", "exec")  # real Python
    assert json.loads(record)["words"] == len(json.loads(record)["sentence"].split())
    mixed = make_prompt(600, "sf-test-r4")
    assert "def " in mixed and '"sentence":' in mixed and "Liberty" in mixed


def test_unique_per_request_from_the_first_words():
    a, b = make_prompt(512, "sf-run1-r1"), make_prompt(512, "sf-run1-r2")
    assert a != b and a.split()[0] != b.split()[0]
    assert make_prompt(512, "sf-run1-r1") == a  # deterministic for a given prefix


def test_sized_by_the_models_own_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from sparkfleet.bench.tokens import LocalTokenizer

    # a character-level tokenizer: every character is a token, so words and tokens differ a lot
    alphabet = sorted({c for s in sentences() for c in s} | set("sf-tr0123456789_:{}\"',.()[]=\n +"))
    vocab = {"[UNK]": 0, **{c: i + 1 for i, c in enumerate(alphabet)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Split("", behavior="isolated")
    tok.save(str(tmp_path / "tokenizer.json"))
    counter = LocalTokenizer(tmp_path)
    prompt = make_prompt(300, "sf-tok-r1", counter)
    n = counter.count(prompt)
    assert 280 <= n <= 300, n  # as many tokens as fit, never more
    assert len(prompt.split()) < 100  # ~5 characters a word: far fewer words than tokens


def test_a_lane_uses_the_tokenizer_its_staged_hub_holds(tmp_path):
    from bench_fleet import write_fleet_root

    from sparkfleet.bench.target import for_lane
    from sparkfleet.fleet import inventory

    hub, nas = tmp_path / "hub", tmp_path / "nas"
    name = write_fleet_root(tmp_path, 30000, local_hub=str(hub), nas_hub=str(nas))
    assert for_lane(inventory.load(tmp_path), name).tokenizer is None  # nothing staged: no tokenizer
    snapshot = nas / "models--org--model" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "tokenizer.json").write_text("{}")
    assert for_lane(inventory.load(tmp_path), name).tokenizer == snapshot / "tokenizer.json"
    local = hub / "models--org--model" / "snapshots" / ("a" * 40)
    local.mkdir(parents=True)
    (local / "tokenizer.json").write_text("{}")
    assert for_lane(inventory.load(tmp_path), name).tokenizer == local / "tokenizer.json"  # staged first
