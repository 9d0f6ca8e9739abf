"""Smoke judges the answer of a reasoning model, never its reasoning.

The demo server's reasoning ends with the right result; with --wrong-answer the final answer is
one less. A smoke that glued reasoning to answer (vLLM's mixed delta) or took the whole `content`
of a server without a reasoning parser (`…11303</think> 11302`) would pass the wrong answer.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sparkfleet.bench.client import Endpoint, chat_request, stream_chat
from sparkfleet.bench.probes import DEFAULT_SMOKE_MAX_TOKENS, SmokeCase, run_smoke_case

pytestmark = pytest.mark.slow

ASK = "What is 127*89? Answer with the number only."
SHAPES = {
    "parser": ("--reasoning-tokens", "30", "--tokens-per-chunk", "3"),
    "mixed-deltas": ("--reasoning-tokens", "31", "--tokens-per-chunk", "3", "--mixed-deltas"),
    "no-parser": ("--reasoning-tokens", "30", "--think-in-content", "--tokens-per-chunk", "2"),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_right_answer_passes_and_a_wrong_one_fails_whatever_the_reasoning_said(fake_lane, shape):
    right = fake_lane(*SHAPES[shape], "--decode-tps", "5000")
    wrong = fake_lane(*SHAPES[shape], "--decode-tps", "5000", "--wrong-answer")
    case = SmokeCase(ASK, "11303", 256)
    good = run_smoke_case(Endpoint(right.url, "m"), case)
    assert good.passed and good.answer == "11303", good
    bad = run_smoke_case(Endpoint(wrong.url, "m"), case)
    assert not bad.passed and bad.answer == "11302" and "expected '11303'" in bad.problem, bad


def test_mixed_delta_keeps_reasoning_and_answer_apart(fake_lane):
    lane = fake_lane(*SHAPES["mixed-deltas"], "--decode-tps", "5000", "--usage", "continuous")
    endpoint = Endpoint(lane.url, "m")
    result = stream_chat(endpoint, chat_request(endpoint, ASK, 256))
    mixed = [c for c in result.chunks if c.reasoning and c.content]
    assert len(mixed) == 1 and mixed[0].reasoning.endswith("11303") and mixed[0].content == "11303"
    assert result.answer == "11303" and result.reasoning_text.split()[-1] == "11303"
    assert result.usage["completion_tokens"] == 32 and len(result.output_text.split()) == 32


def test_cut_off_reasoning_says_so_and_names_the_knob(fake_lane):
    lane = fake_lane("--reasoning-tokens", "100", "--decode-tps", "5000")
    outcome = run_smoke_case(Endpoint(lane.url, "m"), SmokeCase(ASK, "11303", 64))
    assert not outcome.passed and outcome.finish_reason == "length"
    assert outcome.problem.startswith("cut off after 64 tokens") and "still reasoning" in outcome.problem
    assert "--max-tokens" in outcome.problem  # a bare URL: no recipe to name


def test_the_default_budget_leaves_room_to_think(fake_lane):
    lane = fake_lane("--reasoning-tokens", "100", "--decode-tps", "20000")
    assert DEFAULT_SMOKE_MAX_TOKENS >= 1024
    done = subprocess.run(
        [sys.executable, "-m", "sparkfleet", "smoke", "--url", lane.url, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert [c["answer"] for c in json.loads(done.stdout)["cases"]] == ["11303", "42"]
    cut = subprocess.run(
        [sys.executable, "-m", "sparkfleet", "smoke", "--url", lane.url, "--max-tokens", "50"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cut.returncode == 1 and "cut off after 50 tokens" in cut.stdout
