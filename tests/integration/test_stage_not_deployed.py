"""`nix run .#stage -- dgx1` against a host that was never deployed: one clear error, the fix in it.

The flake's stage app sets SPARKFLEET_REMOTE to the deploy profile's bin/ and
SPARKFLEET_REMOTE_ROOT to the content-addressed store copy of the fleet it was built from
(pkgs/apps.nix). A real sshd in a network namespace stands in for the Spark; it has neither.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.stagefleet import write_lane_fleet

pytestmark = [pytest.mark.netns]

PROFILE_BIN = "/nix/var/nix/profiles/sparkfleet/bin/sparkfleet"


@pytest.fixture
def one_host(tmp_path, fleet_hosts, ssh_config):
    hosts = fleet_hosts(["dgx1"])
    root = write_lane_fleet(
        tmp_path / "fleet", {"dgx1": hosts["dgx1"].nvme / "hub"}, {"dgx1": tmp_path / "nas" / "hub"}, "lane"
    )
    return root, ssh_config(hosts)


def stage(root: Path, config: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkfleet", "--root", str(root), "stage", "dgx1"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "SPARKFLEET_SSH_CONFIG": str(config), **env},
    )


def test_host_without_the_deployed_tooling(one_host) -> None:
    root, config = one_host
    assert not Path(PROFILE_BIN).exists()
    proc = stage(root, config, SPARKFLEET_REMOTE=PROFILE_BIN)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"dgx1: sparkfleet is not installed there ({PROFILE_BIN}: command not found)" in out
    assert "deploy .#dgx1" in out and "sparkfleet bootstrap dgx1" in out


def test_host_deployed_from_another_fleet(one_host) -> None:
    root, config = one_host
    other = "/nix/store/00000000000000000000000000000000-sparkfleet-fleet-spec"
    here = f"{sys.executable} -m sparkfleet"  # the tooling is there; the fleet spec is not
    proc = stage(root, config, SPARKFLEET_REMOTE=here, SPARKFLEET_REMOTE_ROOT=other)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"dgx1: this fleet (hosts/fleet.toml + recipes, {other}) was not deployed there" in out
    assert "deploy .#dgx1" in out

    # the same fleet deployed (the remote root exists there): no such refusal
    proc = stage(root, config, SPARKFLEET_REMOTE=here, SPARKFLEET_REMOTE_ROOT=str(root))
    assert "was not deployed there" not in proc.stdout + proc.stderr
