"""A recipe's [bench.quality] table is input `bench` acts on: a skip reason it prints and records,
and a per-request deadline it holds the harness to. Whatever stands there, the inventory refuses
it with a named key, or bench reads a finite positive deadline (else the default) and a reason
that reaches no terminal with a control character in it."""

from __future__ import annotations

import json

import pytest

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.bench.target import for_lane
from sparkfleet.demo.fleet import DEMO_LANE, write_demo_fleet
from sparkfleet.fleet import inventory

from .tally import bad_input

SURFACE = "recipe-bench-quality"
ESC = "\x1b]0;pwned\x07\x1b[2J"

# (the [bench.quality] body, what bench must read as (skip, request_timeout_s), or None: refused)
CASES = [
    ('request_timeout_s = nan', (None, None)),
    ('request_timeout_s = inf', None),
    ('request_timeout_s = -1', None),
    ('request_timeout_s = 0', None),
    ('request_timeout_s = "soon"', None),
    ('request_timeout_s = true', None),
    ('skip = ""', None),
    (f'skip = "{"x" * 301}"', None),
    ('skip = 3', None),
    ('unknown = 1', None),
    (f"skip = {json.dumps('no model' + ESC)}", ("no model", None)),
    ('request_timeout_s = 30', (None, 30.0)),
]


def _fleet(tmp_path, body: str):
    demo = write_demo_fleet(tmp_path, shard_bytes=16 * 1024)
    recipe = demo.root / "recipes" / DEMO_LANE / "recipe.toml"
    text = recipe.read_text()
    head, tail = text.split("[bench.quality]\n", 1)
    recipe.write_text(head + "[bench.quality]\n" + body + "\n" + tail.split("\n", 1)[1])
    return demo


@pytest.mark.surface("file:recipe.toml", "cli:bench")
@pytest.mark.parametrize(("body", "expect"), CASES, ids=[c[0][:30] for c in CASES])
def test_a_hostile_bench_quality_table_is_refused_or_read_safely(tmp_path, figures, body, expect):
    demo = _fleet(tmp_path, body)
    bad = body != "request_timeout_s = 30"  # the oracle: every case but the last is hostile
    try:
        target = for_lane(inventory.load(demo.root), DEMO_LANE)
    except SparkfleetError as exc:
        bad_input(figures, SURFACE, refused=True)
        assert expect is None, exc.message
        assert "bench" in str(exc)  # the refusal names where
        return
    read = (target.quality_skip, target.quality_request_timeout_s)
    if bad:
        bad_input(figures, SURFACE, refused=read == expect)  # read safely: the deadline dropped, text clean
    assert read == expect, read
