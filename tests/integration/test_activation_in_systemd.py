"""The DGX OS activation (pkgs/sparkfleet-profile/activate.sh) against a real systemd as PID 1.

systemd runs here as PID 1 of a podman container (`--systemd=always`, runc, cgroupfs): the root
filesystem is a scratch directory with this machine's /usr bound read-only, so systemd, bash and
coreutils are Debian's. The profile's units are small real ones written by the test (a oneshot
service with a timer, and two "lane" services running `sleep`), not the rendered lane units
(tests/nix/test_activation.py covers those, with a recording systemctl). Asserted against
systemd's own state: added units are loaded and enabled, the timer is active, a rerun calls
nothing, an edited lane restarts while the other keeps its invocation, a removed unit is stopped,
disabled and deleted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

try:
    from support.engines import podman_cleanup, podman_env
except ImportError:  # tests/ imported as a package
    from tests.support.engines import podman_cleanup, podman_env

REPO = Path(__file__).resolve().parents[2]
ACTIVATE = REPO / "pkgs" / "sparkfleet-profile" / "activate.sh"
SYSTEMD = Path("/usr/lib/systemd/systemd")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (podman)"),
    pytest.mark.skipif(shutil.which("podman") is None or shutil.which("runc") is None, reason="podman/runc"),
    pytest.mark.skipif(not SYSTEMD.exists(), reason="systemd not installed (Debian package systemd)"),
    pytest.mark.skipif(not ACTIVATE.exists(), reason="no pkgs/sparkfleet-profile/activate.sh"),
]

LANE = "[Unit]\nDescription=lane {name} ({version})\n[Service]\nExecStart=/usr/bin/sleep infinity\n" \
       "[Install]\nWantedBy=multi-user.target\n"  # fmt: skip
UNITS = {
    "sparkfleet-stage.service": "[Unit]\nDescription=stage\n[Service]\nType=oneshot\n"
    "ExecStart=/usr/bin/true\n",
    "sparkfleet-stage.timer": "[Unit]\nDescription=stage timer\n[Timer]\nOnCalendar=daily\n"
    "[Install]\nWantedBy=timers.target\n",
    "sparkfleet-lane-a.service": LANE.format(name="a", version=1),
    "sparkfleet-lane-b.service": LANE.format(name="b", version=1),
}


@pytest.fixture
def systemd_box(tmp_path):
    base = tmp_path / "podman"
    env = {**os.environ, **podman_env(base)}
    rootfs = tmp_path / "rootfs"
    for d in ("etc/systemd/system", "proc", "sys", "dev", "run", "tmp", "var/lib", "root", "usr"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    for link in ("bin", "sbin", "lib", "lib64"):
        if Path(f"/usr/{link}").exists():
            (rootfs / link).symlink_to(f"usr/{link}")
    shutil.copy(Path("/etc/os-release"), rootfs / "etc/os-release")
    (rootfs / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (rootfs / "etc/group").write_text("root:x:0:\n")
    (rootfs / "etc/machine-id").write_text("")
    profile = tmp_path / "profile"
    profile.mkdir()
    name = f"sf-systemd-{os.getpid()}-{tmp_path.name[-8:]}"
    run = subprocess.run(
        ["podman", "run", "-d", "--name", name, "--systemd=always", "--network", "none",
         "-v", "/usr:/usr:ro", "-v", f"{profile}:/profile:ro", "-v", f"{ACTIVATE.parent}:/activate:ro",
         "--rootfs", str(rootfs), str(SYSTEMD)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    try:
        assert run.returncode == 0, run.stderr

        def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
            cp = subprocess.run(["podman", "exec", name, *argv], env=env, capture_output=True, text=True,
                                timeout=120)  # fmt: skip
            if check:
                assert cp.returncode == 0, (argv, cp.stdout, cp.stderr)
            return cp

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = sh("/usr/bin/systemctl", "is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"systemd did not come up: {state}")
        yield sh, profile, rootfs
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], env=env, capture_output=True, timeout=120)
        podman_cleanup(podman_env(base), base)


def ship(profile: Path, units: dict[str, str]) -> None:
    d = profile / "share" / "sparkfleet" / "units"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    for name, text in units.items():
        (d / name).write_text(text)


def show(sh, unit: str, prop: str) -> str:
    return sh("/usr/bin/systemctl", "show", "-p", prop, "--value", unit).stdout.strip()


def test_activation_against_a_real_systemd(systemd_box):
    sh, profile, rootfs = systemd_box
    assert sh("/usr/bin/cat", "/proc/1/comm").stdout.strip() == "systemd"
    activate = ["/usr/bin/env", "PROFILE=/profile", "/usr/bin/bash", "/activate/activate.sh"]

    ship(profile, UNITS)
    first = sh(*activate).stdout
    assert "added:" in first
    for unit in UNITS:
        assert show(sh, unit, "LoadState") == "loaded", unit
    assert show(sh, "sparkfleet-stage.timer", "ActiveState") == "active"  # enable --now
    assert show(sh, "sparkfleet-lane-a.service", "UnitFileState") == "enabled"
    sh("/usr/bin/systemctl", "start", "sparkfleet-lane-a.service", "sparkfleet-lane-b.service")
    ids = {u: show(sh, u, "InvocationID") for u in ("sparkfleet-lane-a.service", "sparkfleet-lane-b.service")}
    assert all(ids.values())

    again = sh(*activate).stdout
    assert "nothing restarted" in again
    assert {u: show(sh, u, "InvocationID") for u in ids} == ids

    ship(profile, {**UNITS, "sparkfleet-lane-a.service": LANE.format(name="a", version=2)})
    sh(*activate)
    deadline = time.monotonic() + 30
    while (
        time.monotonic() < deadline
        and show(sh, "sparkfleet-lane-a.service", "InvocationID") == ids["sparkfleet-lane-a.service"]
    ):
        time.sleep(0.3)  # try-restart is queued (--no-block)
    assert show(sh, "sparkfleet-lane-a.service", "InvocationID") != ids["sparkfleet-lane-a.service"]
    assert show(sh, "sparkfleet-lane-a.service", "Description") == "lane a (2)"
    assert show(sh, "sparkfleet-lane-b.service", "InvocationID") == ids["sparkfleet-lane-b.service"]

    without_b = {k: v for k, v in UNITS.items() if k != "sparkfleet-lane-b.service"}
    ship(profile, {**without_b, "sparkfleet-lane-a.service": LANE.format(name="a", version=2)})
    sh(*activate)
    assert show(sh, "sparkfleet-lane-b.service", "ActiveState") == "inactive"
    assert not (rootfs / "etc/systemd/system/sparkfleet-lane-b.service").exists()
