"""The lanes' recipes turn on what an honest bench needs from the engine."""

from __future__ import annotations

import tomllib
from pathlib import Path

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def _command(lane: str) -> list[str]:
    with (RECIPES / lane / "recipe.toml").open("rb") as f:
        return tomllib.load(f)["launch"]["command"]


def test_sglang_lane_reports_cached_tokens_and_parses_reasoning():
    command = _command("dsv41-flash-4x-mia")
    assert "--enable-cache-report" in command
    parser = command[command.index("--reasoning-parser") + 1]
    assert parser == "deepseek-v3"  # hybrid thinking via chat_template_kwargs.thinking; r1 would eat answers
    text = (RECIPES / "dsv41-flash-4x-mia" / "recipe.toml").read_text()
    assert "separate_reasoning" in text  # the recipe says which parser and why, with its source


def test_vllm_lane_reports_cached_tokens():
    assert "--enable-prompt-tokens-details" in _command("dsv41-flash-exl3-2x")
