"""API keys on every lane: a 0600 key file per host, into the engine through the env file only, and
every client (smoke, bench target, watch, doctor, status) sending it as a Bearer token.

Real processes throughout: the demo OpenAI server (which refuses without the key) launched by the
process runtime on this machine; its command is wrapped so it also prints the key to its log, as an
engine that logs its own arguments does (SGLang prints its ServerArgs), to prove logs, incident
bundles and `ps` never carry it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.base.procs import group_members
from sparkfleet.cli import main as cli
from sparkfleet.demo.hubfixture import build_nas_hub
from sparkfleet.facts import apikeys
from sparkfleet.fleet import inventory
from sparkfleet.launch import lane as lanes
from sparkfleet.ops.doctor import doctor
from sparkfleet.ops.supervisor import collect_incident
from support.lanefleet import demo_recipe, free_port, write_fleet

# The serve command prints the key it got (like an engine logging its arguments), then execs the
# demo server, which takes the key from the env file's SPARKFLEET_API_KEY (never from argv).
_LOGS_KEY = (
    "import os, sys; print('server_args api_key=' + os.environ.get('SPARKFLEET_API_KEY', ''), flush=True); "
    "os.execv(sys.executable, [sys.executable, '-m', 'sparkfleet.demo.openai_server', *sys.argv[1:]])"
)


def keyed_recipe(port: int) -> str:
    text = demo_recipe(["spark"], port, ', "--api-key-env", "SPARKFLEET_API_KEY"')
    return text.replace(
        f'command = ["{sys.executable}", "-m", "sparkfleet.demo.openai_server",',
        f'command = [{json.dumps(sys.executable)}, "-c", {json.dumps(_LOGS_KEY)},',
    )


def _get(url: str, key: str | None = None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _cmdlines() -> str:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):  # a process that ended meanwhile
                out.append((d / "cmdline").read_bytes().decode(errors="replace"))
    return "\n".join(out)


# ---- the key file ------------------------------------------------------------------------------


def test_key_file_is_0600_in_a_0700_dir_and_a_readable_one_is_refused(tmp_path):
    assert apikeys.read_key(tmp_path, "lane") is None
    key = apikeys.new_key()
    assert apikeys.write_key(tmp_path, "lane", key)
    path = apikeys.key_path(tmp_path, "lane")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(apikeys.config_path(tmp_path, "lane").stat().st_mode) == 0o600
    assert apikeys.config_path(tmp_path, "lane").read_text() == f"api-key: {key}\n"
    assert apikeys.read_key(tmp_path, "lane") == key
    assert not apikeys.write_key(tmp_path, "lane", key)  # same key: nothing rewritten
    os.chmod(path, 0o644)
    with pytest.raises(SparkfleetError, match="lets others read"):
        apikeys.read_key(tmp_path, "lane")
    with pytest.raises(SparkfleetError, match="printable"):
        apikeys.write_key(tmp_path, "lane", "two words")


# ---- the demo server ---------------------------------------------------------------------------


def _wait_port(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError("demo server did not listen")


def test_demo_server_refuses_without_the_key_it_reads_from_the_env():
    port, key = free_port(), apikeys.new_key()
    argv = [sys.executable, "-m", "sparkfleet.demo.openai_server", "--host", "127.0.0.1",
            "--port", str(port), "--api-key-env", "LANE_KEY"]  # fmt: skip
    env = {**os.environ, "LANE_KEY": key}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_port(port, proc)
        url = f"http://127.0.0.1:{port}/v1/models"
        assert _get(url) == 401
        assert _get(url, key + "x") == 401
        assert _get(url, key) == 200
        assert key not in Path(f"/proc/{proc.pid}/cmdline").read_text()
    finally:
        proc.terminate()
        proc.wait(10)
    # no key in the variable: it will not serve open
    cp = subprocess.run(argv, env={k: v for k, v in os.environ.items() if k != "LANE_KEY"},
                        capture_output=True, text=True, timeout=30)  # fmt: skip
    assert cp.returncode == 2 and "refusing to serve without a key" in cp.stderr


# ---- a keyed lane end to end -------------------------------------------------------------------


@pytest.fixture
def keyed_fleet(tmp_path):
    nas = build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=16 * 1024)
    port, open_port = free_port(), free_port()
    hosts = {
        "spark": {
            "address": "127.0.0.1",
            "ssh_user": "root",
            "local_hub": str(tmp_path / "nvme" / "hub"),
            "nas_hub": str(nas.root),
            "state_dir": str(tmp_path / "state"),
        }
    }
    root = write_fleet(
        tmp_path / "fleet", hosts, {"keyed": keyed_recipe(port), "open": demo_recipe(["spark"], open_port)}
    )
    inv = inventory.load(root)
    yield inv, port, open_port, tmp_path
    for lane in ("keyed", "open"):
        lanes.stop(inv, lane, 5)


def test_a_lane_serves_only_with_its_key_and_every_client_sends_it(keyed_fleet, monkeypatch):
    inv, port, open_port, tmp = keyed_fleet
    monkeypatch.delenv("SPARKFLEET_API_KEY", raising=False)
    state = tmp / "state"
    # readiness reads /v1/models through the agent, with the key
    report = lanes.launch(inv, "keyed", allow_nas_weights=True)
    assert report.ready is not None and report.ready.ok, report.ready
    key = apikeys.read_key(state, "keyed")
    assert key and key.startswith(apikeys.KEY_PREFIX)  # launch made the lane's key: none existed

    url = f"http://127.0.0.1:{port}/v1/models"
    assert _get(url) == 401 and _get(url, key) == 200
    st = lanes.status(inv, "keyed")
    assert st.endpoints["models"] == ["deepseek-v4.1-flash"]

    # the engine got it through the 0600 env file / env, never argv
    pid = st.ranks[0].pid
    server = max(group_members(pid))
    environ = Path(f"/proc/{server}/environ").read_bytes().decode()
    assert f"SPARKFLEET_API_KEY={key}" in environ and f"VLLM_API_KEY={key}" in environ
    assert key not in _cmdlines()
    rec_dir = state / "lanes" / "keyed"
    assert key not in "".join(p.read_text(errors="replace") for p in rec_dir.rglob("*.json"))

    runner = CliRunner()
    res = runner.invoke(cli, ["--root", str(inv.root), "smoke", "keyed"])
    assert res.exit_code == 0, res.output
    assert key not in res.output

    # bench (with a quality scenario: tool-eval-bench takes the key from its env) through the lane
    out = tmp / "reports"
    argv = ["--root", str(inv.root), "bench", "keyed", "--quick", "--out", str(out)]
    res = runner.invoke(cli, [*argv, "--quality-scenarios", "TC-01", "--json"])
    assert res.exit_code in (0, 1), res.output  # 1: a shortfall, never an auth failure
    assert "401" not in res.output and key not in res.output
    written = [p for p in out.rglob("*") if p.is_file()]
    assert written and not any(key in p.read_text(errors="replace") for p in written)

    # the engine printed it; logs and the incident bundle show it redacted
    text = lanes.logs(inv, "keyed")["spark"]["0"]
    assert "server_args api_key=<redacted>" in text and key not in text
    bundle = collect_incident(inv, "keyed", "test", root=tmp / "incidents")
    dumped = "".join(p.read_text(errors="replace") for p in Path(bundle).rglob("*") if p.is_file())
    assert "server_args api_key=<redacted>" in dumped and key not in dumped

    # doctor: the keyed lane refuses without a key
    checks = {c.name: c for c in doctor(inv, "keyed").checks}
    assert checks["API key"].ok is True, checks["API key"]

    # rotate: a new key on the host, never printed; the running lane still has the old one
    runner = CliRunner()
    res = runner.invoke(cli, ["--root", str(inv.root), "keys", "rotate", "keyed"])
    assert res.exit_code == 0, res.output
    new = apikeys.read_key(state, "keyed")
    assert new != key and new not in res.output and key not in res.output
    stale = next(c for c in doctor(inv, "keyed").checks if c.name == "API key")
    assert stale.ok is False and "rotated since launch" in stale.detail
    lanes.stop(inv, "keyed", 5)

    # a lane whose command takes no key answers anyone: doctor fails it
    assert lanes.launch(inv, "open", allow_nas_weights=True).ready.ok
    open_check = next(c for c in doctor(inv, "open").checks if c.name == "API key")
    assert open_check.ok is False and "WITHOUT a key" in open_check.detail
    res = runner.invoke(cli, ["--root", str(inv.root), "doctor", "open"])
    assert res.exit_code != 0 and "WITHOUT a key" in res.output
    lanes.stop(inv, "open", 5)

    assert lanes.launch(inv, "keyed", allow_nas_weights=True).ready.ok
    assert _get(url, key) == 401 and _get(url, new) == 200
