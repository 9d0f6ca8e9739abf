"""`sparkfleet power on|status HOST`: a real Wake-on-LAN packet wakes a netns "Spark".

The host is a network namespace with a real sshd (tests/support/fleetnet.py). "Powered off" = its
sshd stopped; inside the namespace a listener (standing in for the NIC's WoL filter) waits on UDP
port 9 and, on the exact magic packet for the host's MAC, starts sshd again — so `power on` must
send the right bytes to the right broadcast address and then wait for ssh to come up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkfleet.base.errors import ExitCode
from sparkfleet.ops.power import magic_packet

pytestmark = [pytest.mark.netns]
MAC = "02:5f:00:00:00:33"
LISTENER = r"""
import os, socket, sys
port, expect, got = int(sys.argv[1]), bytes.fromhex(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", port))
open(got + ".ready", "w").close()
while True:
    data, _ = s.recvfrom(4096)
    with open(got, "ab") as f:
        f.write(data)
    if data == expect:
        break
s.close()
os.execv(sys.argv[4], sys.argv[4:])
"""


def cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkfleet", "--root", str(root), *args],
                          capture_output=True, text=True, timeout=180)  # fmt: skip


def test_power_on_wakes_the_host_and_waits_for_ssh(tmp_path, fleetnet, fleet_hosts, ssh_config, monkeypatch):
    h = fleet_hosts(["dgx3"])["dgx3"]
    broadcast = str(fleetnet.subnet.broadcast_address)  # written with its prefix: checked to be one
    root = tmp_path / "fleet"
    (root / "hosts").mkdir(parents=True)
    (root / "hosts" / "fleet.toml").write_text(
        f'schema_version = 1\n[defaults]\nssh_user = "root"\nnas_hub = "{tmp_path}/nas"\n'
        f'local_hub = "{tmp_path}/hub"\n[hosts.dgx3]\naddress = "dgx3"\nmac = "{MAC}"\n'
        f'wol_broadcast = "{broadcast}/{fleetnet.subnet.prefixlen}"\n'
    )
    monkeypatch.setenv("SPARKFLEET_SSH_CONFIG", str(ssh_config([h])))
    assert cli(root, "power", "status", "dgx3").stdout.startswith("dgx3: on")

    os.kill(h.sshd_pid, signal.SIGTERM)  # "power off": nothing answers ssh any more
    h._proc.wait(timeout=10)
    off = cli(root, "power", "status", "dgx3")
    assert off.returncode == ExitCode.UNREACHABLE and "dgx3: off (powered off or unreachable" in off.stdout
    doctor = cli(root, "doctor", "dgx3")
    assert "powered off or unreachable" in doctor.stdout and "sparkfleet power on dgx3" in doctor.stdout

    got = tmp_path / "wol-received.bin"
    script = tmp_path / "wol_listener.py"
    script.write_text(LISTENER)
    sshd = ["/usr/sbin/sshd", "-D", "-e", "-f", str(h.root / ".sshd" / "sshd_config")]
    log = open(tmp_path / "listener.log", "wb")  # noqa: SIM115 (closed in finally)
    listener = subprocess.Popen(
        h.exec_argv(sys.executable, str(script), "9", magic_packet(MAC).hex(), str(got), *sshd),
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    h._proc = listener  # fleetnet stops it (by pid) with the host; after exec it is the new sshd
    try:
        deadline = time.monotonic() + 20
        while not Path(str(got) + ".ready").exists():
            assert time.monotonic() < deadline and listener.poll() is None, (
                tmp_path / "listener.log"
            ).read_text()
            time.sleep(0.1)
        woke = cli(root, "power", "on", "dgx3", "--poll", "0.5", "--timeout", "60")
        assert woke.returncode == ExitCode.OK, woke.stdout + woke.stderr
        assert got.read_bytes() == magic_packet(MAC)  # the listener got exactly one, correct packet
        assert len(magic_packet(MAC)) == 102 and magic_packet(MAC)[:6] == b"\xff" * 6
        assert f"magic packet for {MAC} sent to {broadcast}:9" in woke.stderr
        assert "dgx3: on (woke: ssh answers after" in woke.stdout
        assert cli(root, "power", "status", "dgx3").returncode == ExitCode.OK
    finally:
        log.close()


def test_power_on_without_a_mac_says_how(tmp_path):
    root = tmp_path / "fleet"
    (root / "hosts").mkdir(parents=True)
    (root / "hosts" / "fleet.toml").write_text(
        f'schema_version = 1\n[defaults]\nssh_user = "root"\nnas_hub = "{tmp_path}/nas"\n'
        f'local_hub = "{tmp_path}/hub"\n[hosts.far]\naddress = "far.invalid"\n'
    )
    res = cli(root, "power", "on", "far")
    assert res.returncode == ExitCode.UNREACHABLE
    assert "no `mac` in hosts/fleet.toml" in res.stderr
