"""`verify HOST` over ssh (like `stage HOST`), `verify --lane L` every host; status and logs over ssh.

Proof that the check runs on the host, not on the operator's disk: after dgx2 is staged, an
empty tmpfs is mounted over dgx2's hub *on the operator's side only* (each host's sshd has its
own mount namespace, copied when it started), so the operator sees an empty hub while dgx2 sees
its real one. `verify dgx2` must pass; `verify dgx2 --here` (the control) must find it missing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparkfleet.base.errors import ExitCode
from sparkfleet.demo.hubfixture import build_nas_hub

try:
    from support.fleetnet import is_mounted, tmpfs_mount
    from support.lanefleet import HostPool, use_ssh
    from support.stagefleet import write_lane_fleet
except ImportError:  # tests/ imported as a package
    from tests.support.fleetnet import is_mounted, tmpfs_mount
    from tests.support.lanefleet import HostPool, use_ssh
    from tests.support.stagefleet import write_lane_fleet

# One worker runs this module (make test's xdist): its module-scoped fixture is built once.
pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.xdist_group("fleet_verify")]
LANE = "lane2"


def cli(root: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkfleet", "--root", str(root), *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pool(fleetnet):
    """dgx1 and dgx2, with their sshd, for the whole module; torn down even on failure."""
    pool = HostPool(fleetnet)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def fleet(tmp_path, pool, monkeypatch):
    nas = build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=256 * 1024)
    hosts = pool.fresh(["dgx1", "dgx2"])  # as new: empty trees, nothing left running
    root = write_lane_fleet(
        tmp_path / "fleet", {h: hosts[h].nvme / "hub" for h in hosts}, {h: nas.root for h in hosts}, LANE
    )
    with (root / "hosts" / "fleet.toml").open("a") as fh:  # a host that does not answer
        fh.write(f'[hosts.ghost]\naddress = "ghost.invalid"\nlocal_hub = "{tmp_path}/ghost/hub"\n'
                 f'nas_hub = "{nas.root}"\n')  # fmt: skip
    use_ssh(monkeypatch, tmp_path / "ssh_config", hosts)
    return root, hosts


def test_verify_host_runs_on_the_host_and_lane_checks_every_host(fleet):
    root, hosts = fleet
    staged = cli(root, "stage", "dgx2", "--json")
    assert staged.returncode == 0, staged.stdout + staged.stderr
    hub = hosts["dgx2"].nvme / "hub"
    with tmpfs_mount(1024 * 1024, hub) as hidden:  # the operator's view of dgx2's hub: empty
        assert is_mounted(hidden) and not any(hidden.iterdir())
        here = cli(root, "verify", "dgx2", "--here")
        assert here.returncode == ExitCode.SHORTFALL and "missing: 0" not in here.stdout  # the control

        remote = cli(root, "-v", "verify", "dgx2")
        assert remote.returncode == ExitCode.OK, remote.stdout + remote.stderr
        assert "dgx2: links ok: 12, dangling: 0, mismatches: 0, missing: 0" in remote.stdout
        assert "dgx2$ " in remote.stderr and "verify dgx2 --here --json" in remote.stderr  # over ssh

        lane = cli(root, "verify", "--lane", LANE, "--json")
        assert lane.returncode == ExitCode.SHORTFALL  # dgx1 was never staged
        doc = json.loads(lane.stdout)
        by_host = {h["host"]: h for h in doc["hosts"]}
        assert by_host["dgx2"]["ok"] and not by_host["dgx1"]["ok"]
        assert by_host["dgx1"]["report"]["missing"] > 0


def test_verify_unreachable_host_exits_unreachable(fleet):
    root, _ = fleet
    res = cli(root, "verify", "ghost")
    assert res.returncode == ExitCode.UNREACHABLE, res.stdout + res.stderr
    assert "ghost: error: ghost: ssh failed" in res.stdout


def test_status_and_logs_over_ssh_tell_the_truth(fleet):
    """The same lane over real ssh: status exits 0 only while both ranks run; after stop, logs
    still shows each host's last run."""
    from sparkfleet.demo.lane import demo_launch_tables

    root, _ = fleet
    recipe = root / "recipes" / LANE / "recipe.toml"
    # no canary: its rendezvous dials the hosts' inventory names, which only the tests' ssh config
    # resolves (the canary itself is tests/launch/test_gates_fleet.py's, on addresses)
    recipe.write_text(recipe.read_text() + demo_launch_tables(boot_delay=0.5, canary=False))
    try:
        up = cli(root, "launch", LANE, "--allow-nas-weights")  # dgx1 is not staged
        assert up.returncode == ExitCode.OK, up.stdout + up.stderr
        assert cli(root, "status", LANE).returncode == ExitCode.OK
    finally:
        assert cli(root, "stop", LANE).returncode == ExitCode.OK
    down = cli(root, "status", LANE)
    assert down.returncode == ExitCode.SHORTFALL and "0/2 ranks running" in down.stdout
    logs = cli(root, "logs", LANE)
    assert logs.returncode == ExitCode.OK, logs.stderr
    for host, rank in (("dgx1", 0), ("dgx2", 1)):
        assert f"==> {host} rank {rank} (last run; the lane is stopped)" in logs.stdout
    assert logs.stdout.count("The server is fired up and ready to roll!") == 2


def test_stage_dry_run_runs_each_hosts_space_preflight_over_ssh(fleet):
    root, hosts = fleet
    ok = cli(root, "stage", "dgx2", "--dry-run")
    assert ok.returncode == ExitCode.OK, ok.stdout + ok.stderr
    assert f"dgx2: space on {hosts['dgx2'].nvme / 'hub'}: need " in ok.stdout and ": ok" in ok.stdout
    short = cli(root, "stage", "--lane", LANE, "--dry-run", "--reserve-gib", "1000000")
    assert short.returncode == ExitCode.SPACE, short.stdout + short.stderr
    assert short.stdout.count("NOT ENOUGH") == 2  # each host answers for its own disk
    assert not (hosts["dgx1"].nvme / "hub").exists()
