"""Host runners: OpenSSH argv (BatchMode, per-host user/port/key, quoted argv), LocalHost, agent calls."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from sparkfleet.fleet.inventory import Host
from sparkfleet.node.runtimes import ContainerRuntime, RuntimeError_
from sparkfleet.remote.hosts import HostUnreachable, LocalHost, RunResult, SshHost, check_reachable, connect
from sparkfleet.remote.nodecall import AgentError, call_agent
from support.launch_fleet import fake_roce_sysfs

pytestmark = pytest.mark.slow


def inv_host(**kw) -> Host:
    base = dict(name="dgx3", address="10.1.2.3", ssh_user="kilork", ssh_port=2222, local_hub=Path("/l"),
                nas_hub=Path("/n"), reserve_bytes=0, ssh_key=Path("/keys/id_ed25519"))  # fmt: skip
    base.update(kw)
    return Host(**base)


def test_ssh_argv_exact_and_quoted(monkeypatch):
    monkeypatch.delenv("SPARKFLEET_SSH_CONFIG", raising=False)
    runner = connect(inv_host())
    assert isinstance(runner, SshHost)
    evil = ["rm", "-rf", "/tmp/x; echo pwned", "$(id)", "it's"]
    argv = runner.ssh_argv(evil)
    assert argv == [
        "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=15",
        "-p", "2222", "-l", "kilork", "-i", "/keys/id_ed25519", "-o", "IdentitiesOnly=yes",
        "10.1.2.3", "--", shlex.join(evil),
    ]  # fmt: skip
    assert shlex.split(argv[-1]) == evil  # the remote shell gets back exactly these arguments


def test_ssh_config_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARKFLEET_SSH_CONFIG", str(tmp_path / "cfg"))
    argv = connect(inv_host(ssh_key=None)).ssh_argv(["true"])
    assert argv[:3] == ["ssh", "-F", str(tmp_path / "cfg")] and "-i" not in argv


def test_loopback_is_local():
    for addr in ("localhost", "127.0.0.1", "::1"):
        assert isinstance(connect(inv_host(address=addr)), LocalHost)
    res = LocalHost("me").run(["printf", "%s|", "a b", "$(id)"])
    assert res.ok and res.stdout == "a b|$(id)|"


def test_unreachable_is_a_clear_error():
    with pytest.raises(HostUnreachable, match="dgx3: ssh failed: ssh: connect to host"):
        check_reachable(
            RunResult("dgx3", ("true",), 255, "", "ssh: connect to host 10.1.2.3 port 22: No route")
        )
    res = RunResult("dgx3", ("false",), 1, "", "")
    assert check_reachable(res) is res


def test_agent_probe_reads_fake_sysfs_and_refuses_cleanly(tmp_path):
    sysfs = fake_roce_sysfs(
        tmp_path / "sys", {"rocep1s0f0": {"gids": {3: ("10.0.0.5", "RoCE v2", "enp1s0f0np0")}}}
    )
    ans = call_agent(LocalHost("me"), "probe", {"fabric": {"needed": True, "fabric_ip": "10.0.0.5",
                                                           "sysfs": str(sysfs)}, "models": []})  # fmt: skip
    assert ans["fabric"] == {"fabric_ip": "10.0.0.5", "hcas": ["rocep1s0f0"], "gid_index": 3,
                             "netdev": "enp1s0f0np0"}  # fmt: skip
    bad = call_agent(LocalHost("me"), "probe", {"fabric": {"needed": True, "fabric_ip": "10.0.0.9",
                                                           "sysfs": str(sysfs)}, "models": []})  # fmt: skip
    assert "10.0.0.9" in bad["fabric_error"]["error"]
    with pytest.raises(AgentError, match="the start request lacks '"):  # an answer, not a crash
        call_agent(LocalHost("me"), "start", {"spec": json.loads("{}")})


def test_container_runtime_without_engine(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RuntimeError_, match="docker is not installed on this node"):
        ContainerRuntime("docker").image_present("x@sha256:" + "0" * 64)


def test_a_host_without_sparkfleet_gets_one_clear_error(monkeypatch):
    """ssh worked, but the remote shell has no `sparkfleet` (exit 127): say deploy/bootstrap first."""
    class NoSparkfleet:
        name = "dgx3"

        def run(self, argv, *, input=None, timeout=None):
            return RunResult(self.name, tuple(argv), 127, "", "bash: line 1: sparkfleet: command not found\n")

    monkeypatch.delenv("SPARKFLEET_REMOTE", raising=False)
    with pytest.raises(AgentError) as err:
        call_agent(NoSparkfleet(), "probe", {})
    assert err.value.message == "dgx3: sparkfleet is not installed there (sparkfleet: command not found)"
    assert "sparkfleet bootstrap dgx3" in err.value.hint and "deploy .#dgx3" in err.value.hint
