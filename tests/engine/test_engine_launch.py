"""`launch` of a lane whose command is the real `vllm serve`, through the process runtime.

On this machine (LocalHost, the process runtime as in tests/launch/test_launch_local.py); the same
lane on a namespace host over ssh is test_engine_fleet.py. The lane serves the tiny Qwen2 from the
hub cache the host declares, sparkfleet waits for vLLM's own ready line, reads /v1/models and
/health, and `stop` leaves no process behind.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launch"))
from vllm_lane import engine_cores, tiny_pin, vllm_recipe  # noqa: E402

from sparkfleet.base import procs  # noqa: E402
from sparkfleet.base.http import free_port  # noqa: E402
from sparkfleet.bench.client import chat_request, stream_chat  # noqa: E402
from sparkfleet.bench.metrics import measure  # noqa: E402
from sparkfleet.demo.tinyqwen import build_tiny_qwen  # noqa: E402
from sparkfleet.fleet import inventory  # noqa: E402
from sparkfleet.launch import lane as lanes  # noqa: E402
from sparkfleet.ops.supervisor import WatchSettings, watch_lane  # noqa: E402
from support.lanefleet import write_fleet  # noqa: E402

# make test's xdist: with the other modules that launch lanes on this machine (their ports), one worker
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800), pytest.mark.xdist_group("local_lanes")]


def vllm_fleet(vllm: Path, tmp_path: Path, watch: str = "", key_guard: bool = True):
    """A fleet of this machine with one lane, `vllm`, serving the tiny model from its NAS hub."""
    port = free_port()
    nas = build_tiny_qwen(tmp_path / "nas" / "hub")
    host = {
        "address": "localhost",
        "ssh_user": "root",
        "local_hub": str(tmp_path / "nvme" / "hub"),
        "nas_hub": str(nas.hub),
        "state_dir": str(tmp_path / "state"),
    }
    pins = tiny_pin(nas.repo)
    recipe = vllm_recipe(vllm, nas.hub, nas.repo, port, key_guard=key_guard) + watch
    root = write_fleet(tmp_path / "fleet", {"spark": host}, {"vllm": recipe}, pins)
    return inventory.load(root), nas, port


def test_launch_a_lane_whose_command_is_real_vllm_serve(vllm_cli, tmp_path):
    inv, nas, port = vllm_fleet(vllm_cli, tmp_path)
    try:
        report = lanes.launch(inv, "vllm", allow_nas_weights=True)  # the NAS hub only
        assert report.ready is not None and report.ready.ok, report.ready
        assert report.ready.models == [nas.repo] and report.ready.health == 200
        st = lanes.status(inv, "vllm")
        assert st.running == 1
        pid = st.ranks[0].pid
        ep = report_endpoint(port, nas.repo, tmp_path / "state")
        m = measure(stream_chat(ep, chat_request(ep, "Say hello.", 8, ignore_eos=True)))
        assert m.ok and m.completion_tokens == 8, m.error
        assert "Application startup complete." in lanes.logs(inv, "vllm")["spark"]["0"]
        # vLLM's own key guards only /v1 paths; the lane's guard ({vllm_key_guard}) takes the rest
        key = ep.api_key
        body = {"model": nas.repo, "prompt": "Say hello.", "max_tokens": 2}
        for method, path in (("POST", "/invocations"), ("POST", "/tokenize"), ("GET", "/version"),
                             ("POST", "/v1/completions"), ("GET", "/v1/models")):  # fmt: skip
            for wrong in (None, key + "x"):
                assert ask(port, method, path, wrong, body)[0] == 401, (method, path, wrong)
        status, answer = ask(port, "POST", "/invocations", key, body)
        assert status == 200 and json.loads(answer)["choices"], answer[:300]
        for path in ("/health", "/metrics"):  # open, as docs/serving.md says: health, counters
            status, answer = ask(port, "GET", path, None)
            assert status == 200 and key.encode() not in answer, path
    finally:
        res = lanes.stop(inv, "vllm", 30)
    assert [r["stopped"] for r in res] == [True]
    assert procs.group_members(pid) == []  # the API server and its EngineCore child are gone


def test_a_vllm_lane_that_serves_beyond_v1_without_its_key_is_not_called_ready(vllm_cli, tmp_path):
    """Without the guard, vLLM's POST /invocations serves completions to anyone, key or not:
    launch asks it before it calls the lane ready, refuses, and stops the lane; one kept running
    (--keep-on-failure) fails doctor's API key check."""
    from sparkfleet.ops.doctor import doctor

    inv, nas, port = vllm_fleet(vllm_cli, tmp_path, key_guard=False)
    try:
        report = lanes.launch(inv, "vllm", allow_nas_weights=True)
        assert not report.ready.ok and "POST /invocations without the lane's key" in report.ready.reason, (
            report.ready
        )
        assert lanes.status(inv, "vllm").running == 0  # stopped, not left serving
        assert not lanes.launch(inv, "vllm", allow_nas_weights=True, keep_on_failure=True).ready.ok
        (check,) = [c for c in doctor(inv, "vllm").checks if c.name == "API key"]
        assert check.ok is False and "POST /invocations WITHOUT a key" in check.detail, check
    finally:
        lanes.stop(inv, "vllm", 30)


def ask(port: int, method: str, path: str, key: str | None, body: dict | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    try:
        conn.request(method, path, json.dumps(body) if body and method == "POST" else None, headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_watch_detects_a_wedged_real_engine(vllm_cli, tmp_path):
    """vLLM's engine core stopped (SIGSTOP, by the PID in this lane's own process group): /health
    stays 200 while generation hangs. watch must catch it within the latency bound, bundle an
    incident, and (no restart budget) stop the lane and hand it to a human."""
    inv, nas, port = vllm_fleet(vllm_cli, tmp_path)
    stopped: list[int] = []
    try:
        assert lanes.launch(inv, "vllm", allow_nas_weights=True).ready.ok
        pid = lanes.status(inv, "vllm").ranks[0].pid
        ep = report_endpoint(port, nas.repo, tmp_path / "state")
        prompt = "Name one colour."
        # the random model's own greedy answer is the known answer (nothing else is right for it)
        reply = measure_text(ep, prompt, 16)
        expect = next(w for w in reply.replace("\n", " ").split(" ") if w.isalpha())
        settings = WatchSettings(interval_s=4.0, latency_s=4.0, prompt=prompt, expect=expect, max_tokens=16,
                                 max_restarts=0, backoff_s=0.2)  # fmt: skip
        healthy = watch_lane(inv, "vllm", settings, max_probes=2)
        assert healthy.failures == 0 and not healthy.needs_human, healthy
        cores = engine_cores(pid)
        assert len(cores) == 1, cores
        os.kill(cores[0], signal.SIGSTOP)
        stopped.append(cores[0])
        assert report_health(port) == 200  # the wedge: healthy by /health, dead to generation
        out = watch_lane(inv, "vllm", settings, max_probes=3)
        assert out.needs_human and out.restarts == 0 and len(out.incidents) == 1, out
        assert out.incidents[0].reason.startswith(
            "generation probe failed: no answer within the latency bound"
        )
        assert all(d <= 2 * settings.interval_s for d in out.detect_s)
    finally:
        for p in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGCONT)
        lanes.stop(inv, "vllm", 30)
    assert procs.group_members(pid) == []


def measure_text(ep, prompt: str, tokens: int) -> str:
    result = stream_chat(ep, chat_request(ep, prompt, tokens))
    assert result.ok, result.error
    return result.answer


def report_health(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status
    finally:
        conn.close()


def report_endpoint(port: int, model: str, state_dir: Path):
    """The lane's endpoint with the lane's own key (launch made it; vLLM reads it as VLLM_API_KEY)."""
    from sparkfleet.bench.client import Endpoint
    from sparkfleet.facts.apikeys import read_key

    key = read_key(state_dir, "vllm")
    assert key, "launch gives every lane a key"
    return Endpoint(f"http://127.0.0.1:{port}/v1", model, key, timeout=300.0)
