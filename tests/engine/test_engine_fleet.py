"""The real `vllm serve` as a lane on the namespace fleet: launched over ssh, watched, wedged.

The host is a network namespace with its own sshd (tests/support/fleetnet.py), as the launch tests
run their 4-node lane; the lane's command is the engine venv's `vllm serve` of the tiny Qwen2 from
the NAS hub, through the process runtime. One engine boot for the module (minutes on 2 shared
cores): launch, then `smoke`, `bench` and `watch` as an operator runs them (the lane's key read
over ssh, never printed), then vLLM's EngineCore is stopped by its PID (SIGSTOP: /health stays
200, generation hangs) and `watch` must catch it, bundle an incident and hand the lane to a
human. `stop` must leave nothing but sshd in the namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from vllm_lane import engine_cores, tiny_pin, vllm_recipe

from sparkfleet.base.procs import group_members
from sparkfleet.bench.client import Endpoint, chat_request, stream_chat
from sparkfleet.demo.tinyqwen import build_tiny_qwen
from sparkfleet.fleet import inventory
from sparkfleet.launch import lane as lanes
from support.fleetnet import netns_pids
from support.lanefleet import netns_fields, use_ssh, write_fleet

# serial: its bench through the lanes times a real engine, which other workers' load starved ("too few
# chunks to time decode" in a parallel run); make test runs the module alone, its fleet built once.
pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(1800),
              pytest.mark.xdist_group("engine_fleet"), pytest.mark.serial]
PORT = 30000
LANE = "vllm"


def sparkfleet(root: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """The CLI in a fresh process, as an operator runs it (its environment: this session's ssh config)."""
    argv = [sys.executable, "-m", "sparkfleet", "--root", str(root), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=root)


@pytest.fixture(scope="module")
def vllm_lane(vllm_cli, fleetnet, tmp_path_factory):
    """One netns host running the lane; stopped, and the host removed, even on failure."""
    tmp = tmp_path_factory.mktemp("engine-fleet")
    host = fleetnet.add_host("spark1")
    try:
        with pytest.MonkeyPatch.context() as mp:
            use_ssh(mp, tmp / "ssh_config")
            nas = build_tiny_qwen(fleetnet.unique_dir("nas") / "hub")
            fields = netns_fields(host, nas.hub)
            recipe = vllm_recipe(vllm_cli, nas.hub, nas.repo, PORT, hosts=("spark1",), bind="0.0.0.0")
            root = write_fleet(tmp / "fleet", {"spark1": fields}, {LANE: recipe}, tiny_pin(nas.repo))
            inv = inventory.load(root)
            try:
                yield inv, host, nas
            finally:
                lanes.stop(inv, LANE, 30)
    finally:
        fleetnet.remove_host(host)


def keyed_get(url: str, key: str | None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_launch_real_vllm_on_a_namespace_host(vllm_lane):
    inv, host, nas = vllm_lane
    report = lanes.launch(inv, LANE, allow_nas_weights=True)  # the NAS hub only: nothing staged
    assert report.ready is not None and report.ready.ok, (report.ready.reason, report.ready.tail)
    assert report.ready.models == [nas.repo] and report.ready.health == 200
    st = lanes.status(inv, LANE)
    assert st.running == 1 and st.endpoints is not None and st.endpoints["health"] == 200
    pid = st.ranks[0].pid
    assert pid in netns_pids(host.netns)  # the engine runs inside the host's network namespace
    assert len(engine_cores(pid)) == 1  # the API server and its EngineCore, one process group
    # the lane's key: launch wrote it 0600 on the host and handed it to vLLM (VLLM_API_KEY)
    key_file = host.root / "state" / "keys" / f"{LANE}.key"
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    key = key_file.read_text().strip()
    assert keyed_get(f"http://{host.addr}:{PORT}/v1/models", None) == 401
    assert keyed_get(f"http://{host.addr}:{PORT}/v1/models", key) == 200
    assert "Application startup complete." in lanes.logs(inv, LANE)["spark1"]["0"]


def _known_answer(inv, host) -> tuple[str, str]:
    """The random model's own greedy answer to a prompt: nothing else is right for it."""
    key = (host.root / "state" / "keys" / f"{LANE}.key").read_text().strip()
    model = inventory.load(inv.root).lane(LANE).sections.launch.served_model_name
    ep = Endpoint(f"http://{host.addr}:{PORT}/v1", model, key, timeout=300.0)
    prompt = "Name one colour."
    result = stream_chat(ep, chat_request(ep, prompt, 16))
    assert result.ok, result.error
    return prompt, next(w for w in result.answer.replace("\n", " ").split(" ") if w.isalpha())


def test_smoke_and_bench_through_the_lanes_key(vllm_lane, tmp_path):
    """The key is read over ssh by the launch agent and never printed. The random model never stops
    (its special tokens cannot be sampled), so smoke is a clean shortfall whose replies came back."""
    inv, host, nas = vllm_lane
    key = (host.root / "state" / "keys" / f"{LANE}.key").read_text().strip()
    done = sparkfleet(inv.root, "smoke", LANE, "--max-tokens", "16", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["lane"] == LANE and doc["model"] == nas.repo and doc["cases"], doc
    for case in doc["cases"]:  # answered (not 401), cut off at 16 tokens
        assert case["answer"] and case["finish_reason"] == "length" and not case["passed"], case
    assert "Traceback" not in done.stderr and key not in done.stdout + done.stderr

    out = tmp_path / "reports"
    args = ["bench", LANE, "--quick", "--no-smoke", "--concurrency", "1", "--requests", "1",
            "--max-tokens", "64", "--tg", "32", "--pp", "128", "--out", str(out), "--json"]  # fmt: skip
    done = sparkfleet(inv.root, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert key not in done.stdout + done.stderr
    report = json.loads(Path(json.loads(done.stdout)["report"]["json"]).read_text())
    assert report["status"] == "ok" and report["model"] == nas.repo
    probe = report["decode_probe"]["metrics"]
    assert probe["completion_tokens"] == 64 and probe["token_source"] == "continuous_usage"
    assert key not in json.dumps(report)


def test_watch_catches_a_wedged_real_engine_on_the_namespace_host(vllm_lane):
    """vLLM's EngineCore stopped by its PID: /health 200, generation hangs; watch hands it to a human."""
    inv, host, _ = vllm_lane
    pid = lanes.status(inv, LANE).ranks[0].pid
    prompt, expect = _known_answer(inv, host)
    recipe = inv.root / "recipes" / LANE / "recipe.toml"
    recipe.write_text(
        recipe.read_text() + "\n[smoke]\nmax_tokens = 16\n"  # watch's budget: the smoke's
        f"\n[watch]\nprompt = {json.dumps(prompt)}\nexpect = {json.dumps(expect)}\n"
    )
    assert tomllib.loads(recipe.read_text())["watch"]["expect"] == expect
    opts = ["--interval", "4", "--latency", "4", "--max-restarts", "0", "--backoff", "0.2", "--json"]
    healthy = sparkfleet(inv.root, "watch", LANE, *opts, "--probes", "2")  # the recipe's [watch] case
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert json.loads(healthy.stdout)["failures"] == 0
    cores = engine_cores(pid)
    assert len(cores) == 1, cores
    os.kill(cores[0], signal.SIGSTOP)
    try:
        key = (host.root / "state" / "keys" / f"{LANE}.key").read_text().strip()
        assert keyed_get(f"http://{host.addr}:{PORT}/health", key) == 200  # the wedge: healthy by /health
        done = sparkfleet(inv.root, "watch", LANE, *opts, "--probes", "3")
        assert done.returncode == 1, done.stdout + done.stderr  # a human is needed
        out = json.loads(done.stdout)
        assert out["needs_human"] and out["restarts"] == 0 and len(out["incidents"]) == 1, out
        assert out["incidents"][0]["reason"].startswith(
            "generation probe failed: no answer within the latency bound"
        )
        assert all(d <= 2 * 4 for d in out["detect_s"])
        assert Path(out["incidents"][0]["bundle"]).is_dir()
        # watch stopped the lane: the stopped EngineCore went with its group (SIGKILL ends it)
        assert group_members(pid) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(cores[0], signal.SIGCONT)
    assert lanes.status(inv, LANE).running == 0
    # nothing but sshd is left in the namespace (an ssh session of the last call may take a moment)
    deadline = time.monotonic() + 15
    while netns_pids(host.netns) != [host.sshd_pid] and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {p: cmdline(p) for p in netns_pids(host.netns) if p != host.sshd_pid}
    assert not left, left


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()[:200].replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "(gone)"
