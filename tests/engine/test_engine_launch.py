"""`launch` of a lane whose command is the real `vllm serve`, through the process runtime.

On this machine (LocalHost, the process runtime as in tests/launch/test_launch_local.py), not on
the namespace fleet: the lane serves the tiny Qwen2 from the hub cache the host declares, sparkfleet
waits for vLLM's own ready line, reads /v1/models and /health, and `stop` leaves no process behind.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launch"))
from launch_fleet import write_fleet  # noqa: E402

from sparkfleet import inventory  # noqa: E402
from sparkfleet.bench.client import chat_request, stream_chat  # noqa: E402
from sparkfleet.bench.metrics import measure  # noqa: E402
from sparkfleet.demo.tinyqwen import build_tiny_qwen  # noqa: E402
from sparkfleet.demo.vllm_engine import free_port  # noqa: E402
from sparkfleet.launch import lane as lanes  # noqa: E402
from sparkfleet.launch import records  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def vllm_recipe(vllm: Path, hub: Path, repo: str, port: int) -> str:
    env = [
        f"HF_HUB_CACHE={hub}", "HF_HUB_OFFLINE=1", "VLLM_TARGET_DEVICE=cpu", "VLLM_CPU_KVCACHE_SPACE=1",
        "VLLM_CPU_OMP_THREADS_BIND=nobind", "OMP_NUM_THREADS=1", "VLLM_NO_USAGE_STATS=1",
    ]  # fmt: skip
    command = [
        "env", *env, str(vllm), "serve", repo, "--host", "127.0.0.1", "--port", "{port}",
        "--served-model-name", "{served_model_name}", "--max-model-len", "2048", "--max-num-seqs", "4",
        "--dtype", "bfloat16", "--enforce-eager",
    ]  # fmt: skip
    return f"""
[lane]
hosts = ["spark"]

[world]
tp = 1

[launch]
runtime = "process"
port = {port}
served_model_name = "{repo}"
fabric = "none"
command = {json.dumps(command)}
ready_signatures = ["Application startup complete."]
receipt_roots = []
[launch.timeouts]
ready_s = 900
poll_s = 1.0
stop_s = 30

[[models]]
pin = "tiny"
"""


def test_launch_a_lane_whose_command_is_real_vllm_serve(vllm_cli, tmp_path):
    vllm = vllm_cli
    port = free_port()
    nas = build_tiny_qwen(tmp_path / "nas" / "hub")  # the same content, so the same commit
    host = {
        "address": "localhost",
        "ssh_user": "root",
        "local_hub": str(tmp_path / "nvme" / "hub"),
        "nas_hub": str(nas.hub),
        "state_dir": str(tmp_path / "state"),
    }
    pins = f'\n[pins.tiny]\nkind = "hf"\nrepo = "{nas.repo}"\nrevision = "main"\n'
    root = write_fleet(
        tmp_path / "fleet",
        {"spark": host},
        {"vllm": vllm_recipe(vllm, nas.hub, nas.repo, port)},
        pins,
    )
    inv = inventory.load(root)
    try:
        report = lanes.launch(inv, "vllm")
        assert report.ready is not None and report.ready.ok, report.ready
        assert report.ready.models == [nas.repo] and report.ready.health == 200
        st = lanes.status(inv, "vllm")
        assert st["running"] == 1
        pid = st["ranks"][0]["pid"]
        ep = report_endpoint(port, nas.repo)
        m = measure(stream_chat(ep, chat_request(ep, "Say hello.", 8, ignore_eos=True)))
        assert m.ok and m.completion_tokens == 8, m.error
        assert "Application startup complete." in lanes.logs(inv, "vllm")["spark"]["0"]
    finally:
        res = lanes.stop(inv, "vllm", 30)
    assert [r["stopped"] for r in res] == [True]
    assert records.group_members(pid) == []  # the API server and its EngineCore child are gone


def report_endpoint(port: int, model: str):
    from sparkfleet.bench.client import Endpoint

    return Endpoint(f"http://127.0.0.1:{port}/v1", model, timeout=300.0)
