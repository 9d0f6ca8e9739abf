"""Engram from the checkpoint: config.json states the tables, the recipe only confirms.

The stand-in checkpoint's config.json uses DeepSeek-V4.1-Flash's own key names under
`text_config` (engram_layer_ids, engram_num_embeddings, engram_n_heads, engram_head_dim,
engram_max_ngram_size); its tensors are `layers.{L}.engram.embed.weight` F8_E4M3 [N, 256] and
`.scale` F8_E8M0 [N, 8].
"""

from __future__ import annotations

import pytest
from engram_helpers import write_fleet

from sparkfleet.base.errors import SourceError
from sparkfleet.demo.hubfixture import build_engram_repo, checkpoint_engram_config
from sparkfleet.engram.checkpoint import from_config, reconcile_rows_per_token
from sparkfleet.engram.pack import plan

ROWS = {1: 1001, 14: 1003}
PATTERN = 'pattern = ["layers.{layer}.engram.embed.weight", "layers.{layer}.engram.embed.scale"]\n'


@pytest.fixture
def ckpt_fleet(tmp_path):
    nas = tmp_path / "nas" / "hub"
    truth = build_engram_repo(nas, rows=ROWS, text_config=checkpoint_engram_config(ROWS))
    return write_fleet(tmp_path, truth, nas, ("h1", "h2", "h3", "h4"))


def test_tables_layers_rows_and_width_come_from_the_checkpoint(ckpt_fleet):
    ckpt_fleet.add_lane("ck", ["h1", "h2", "h3", "h4"], PATTERN)  # no layers, no rows, no row_bytes
    p = plan(ckpt_fleet.inv(), "ck", "h2")
    assert [(f.header.layer, f.header.total_rows, f.header.row_bytes) for f in p.files] == [
        (1, 1001, 264), (14, 1003, 264)
    ]  # fmt: skip
    assert [(f.header.lo, f.header.hi) for f in p.files] == [(250, 500), (250, 501)]  # rank 1 of 4
    ck = p.source.checkpoint
    assert ck is not None and ck.layers == (1, 14) and ck.rows == ROWS
    assert ck.rows_per_token == 24 and ck.head_dim == 256


def test_a_recipe_that_confirms_is_accepted(ckpt_fleet):
    ckpt_fleet.add_lane(
        "ck", ["h1", "h2"], PATTERN + "layers = [14, 1]\nrows = { 1 = 1001, 14 = 1003 }\nrow_bytes = 264\n"
    )
    assert [f.header.layer for f in plan(ckpt_fleet.inv(), "ck", "h1").files] == [1, 14]


def test_contradicting_rows_are_refused_naming_both(ckpt_fleet):
    ckpt_fleet.add_lane("ck", ["h1", "h2"], PATTERN + "rows = { 1 = 1003, 14 = 1001 }\n")  # swapped
    with pytest.raises(SourceError) as err:
        plan(ckpt_fleet.inv(), "ck", "h1")
    msg = err.value.message
    assert "recipe.toml: engram.rows.1 = 1003" in msg
    assert "config.json" in msg and "text_config.engram_num_embeddings for layer 1 = 1001" in msg


def test_contradicting_layers_are_refused_naming_both(ckpt_fleet):
    ckpt_fleet.add_lane("ck", ["h1", "h2"], PATTERN + "layers = [1, 2]\n")
    with pytest.raises(SourceError) as err:
        plan(ckpt_fleet.inv(), "ck", "h1")
    assert "engram.layers = [1, 2] contradicts" in err.value.message
    assert "text_config.engram_layer_ids = [1, 14]" in err.value.message


def test_header_disagreeing_with_config_is_refused(tmp_path):
    nas = tmp_path / "nas" / "hub"
    truth = build_engram_repo(nas, rows=ROWS, text_config=checkpoint_engram_config({1: 1001, 14: 9999}))
    f = write_fleet(tmp_path, truth, nas, ("h1",))
    f.add_lane("ck", ["h1"], PATTERN)
    with pytest.raises(SourceError) as err:
        plan(f.inv(), "ck", "h1")
    assert "says 9999 rows" in err.value.message and "with 1003" in err.value.message


def test_rows_per_token_from_config_and_recipe_confirms_or_is_refused():
    ck = from_config({"text_config": checkpoint_engram_config({1: 5, 14: 6})}, "config.json")
    assert ck is not None and ck.rows_per_token == (4 - 1) * 8
    assert reconcile_rows_per_token(ck, None, "r.toml: roofline") == 24
    assert reconcile_rows_per_token(ck, 24, "r.toml: roofline") == 24
    with pytest.raises(SourceError) as err:
        reconcile_rows_per_token(ck, 2, "r.toml: roofline")
    assert "r.toml: roofline.engram_rows_per_token = 2 contradicts config.json" in err.value.message
    assert reconcile_rows_per_token(None, 2, "r.toml: roofline") == 2  # no engram block: the recipe's
    assert from_config({"architectures": ["X"]}, "config.json") is None


def test_roofline_reads_rows_per_token_from_the_checkpoint(tmp_path):
    """The roofline's engram_rows_per_token comes from config.json; a contradicting recipe is refused."""
    from sparkfleet.fleet.inventory import Pin
    from sparkfleet.roofline.lane import snapshot_dir
    from sparkfleet.roofline.model import CostOptions, model_cost, snapshot_files

    nas = tmp_path / "hub"
    truth = build_engram_repo(nas, rows=ROWS, text_config=checkpoint_engram_config(ROWS))
    pin = Pin("ck", "hf", truth.commit, truth.repo)
    config, files = snapshot_files(snapshot_dir(nas, pin), nas)
    cost = model_cost("ck", config, files)
    assert cost.engram_rows_per_token == 24 and cost.engram_row_bytes == {1: 264, 14: 264}
    with pytest.raises(SourceError) as err:
        model_cost("ck", config, files, CostOptions(engram_rows_per_token=2))
    assert "engram_rows_per_token = 2 contradicts ck: config.json" in err.value.message
