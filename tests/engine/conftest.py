"""A real inference engine for the bench: vLLM's CPU build serving a tiny Qwen2 built here.

The engine venv is `make engine-venv` (the Makefile target `make test` depends on); the model is
`sparkfleet.demo.tinyqwen` (a tokenizer trained on the shipped corpus, random weights) in a hub
cache layout, served by repo id from that cache, offline (`sparkfleet.demo.vllm_engine`). One
server for the whole session, and one more with n-gram speculative decoding for the accept
length; each runs in its own process group and is stopped by that group's id in teardown, also on
failure. The modules that use these servers are marked `serial`: `make test` runs them in its
serial pass (one session, so each server boots once), where no xdist worker's load skews the timing
they compare with the engine's own; `xdist_group("vllm_engine")` keeps them on one worker if they
are ever run with -n.
Without the engine venv every test here is skipped, saying how to build it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.demo.tinyqwen import TinyModel, build_tiny_qwen
from sparkfleet.demo.vllm_engine import engine_ready, start_engine

REPO_ROOT = Path(__file__).resolve().parents[2]
ENGINE_VENV = Path(os.environ.get("SPARKFLEET_ENGINE_VENV", REPO_ROOT / ".venv-vllm"))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> TinyModel:
    return build_tiny_qwen(tmp_path_factory.mktemp("hub"))


def _serve(model: TinyModel, log: Path, speculative: bool = False):
    vllm = engine_ready(ENGINE_VENV)
    if vllm is None:
        pytest.skip(f"no vLLM CPU engine venv at {ENGINE_VENV}: build it with `make engine-venv`")
    try:
        server = start_engine(vllm, model, log, speculative)
    except SparkfleetError as exc:
        pytest.fail(exc.message)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def vllm_cli() -> Path:
    """The engine venv's `vllm` (skips without it)."""
    vllm = engine_ready(ENGINE_VENV)
    if vllm is None:
        pytest.skip(f"no vLLM CPU engine venv at {ENGINE_VENV}: build it with `make engine-venv`")
    return vllm


@pytest.fixture(scope="session")
def engine(tiny_model, tmp_path_factory):
    """The plain engine: one token a step."""
    yield from _serve(tiny_model, tmp_path_factory.mktemp("engine") / "vllm-serve.log")


@pytest.fixture(scope="session")
def spec_engine(tiny_model, tmp_path_factory):
    """The same model with n-gram speculative decoding (several tokens a step)."""
    yield from _serve(tiny_model, tmp_path_factory.mktemp("spec") / "vllm-serve.log", True)
