"""Fleet-wide staging over real SSH: remote stage, parallel lanes, fan-out with NAS byte counters.

Topology: a NAS namespace serving its hub over sshd; four host namespaces dgx1..dgx4, each with
its own sshfs mount of the NAS (its own cache, like each Spark's own NFS mount) and its own NVMe
dir. Bytes leaving the NAS are read from the NAS namespace's interface counters.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkfleet.demo.hubfixture import EMBED_FILE, WEIGHTS_REPO, build_nas_hub
from sparkfleet.facts.hubcache import repo_folder
from support.fleetnet import netns_pids, qdisc_kinds, shape_egress, shaped, tc_skip_reason
from support.lanefleet import use_ssh
from support.stagefleet import nas_tx_bytes, shape_fleet, write_lane_fleet

pytestmark = [pytest.mark.netns, pytest.mark.fuse, pytest.mark.slow]

HOSTS = ["dgx1", "dgx2", "dgx3", "dgx4"]
LANE = "lane4"


@pytest.fixture
def fleet(tmp_path, fleet_hosts, nas_host, sshfs, monkeypatch):
    fixture = build_nas_hub(
        nas_host.root / "share" / "hub", shard_bytes=4 * 1024 * 1024, absolute_links=False
    )
    # Mount first: `ip netns exec` gives each host's sshd a mount namespace copied at its start.
    mounts = {
        h: sshfs(
            nas_host, nas_host.root / "share", tmp_path / f"nas-{h}", extra_opts=("no_contain_symlinks",)
        )
        for h in HOSTS
    }
    hosts = fleet_hosts(HOSTS)
    root = write_lane_fleet(
        tmp_path / "fleet",
        {h: hosts[h].nvme / "hub" for h in HOSTS},
        {h: mounts[h] / "hub" for h in HOSTS},
        LANE,
        {h: hosts[h].addr for h in HOSTS},  # fabric_ip: the namespace address (rsyncd binds there)
    )
    use_ssh(monkeypatch, tmp_path / "ssh_config", hosts)
    return {"root": root, "hosts": hosts, "nas": nas_host, "fixture": fixture}


def cli(root: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkfleet", "--root", str(root), *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def staged_bytes(fleet) -> int:
    """Bytes one host needs (every file the lane stages once)."""
    hub = fleet["hosts"]["dgx1"].nvme / "hub"
    return sum(
        p.stat().st_size
        for p in hub.rglob("*")
        if p.is_file() and not p.is_symlink() and ".locks" not in p.parts
    )


def assert_complete(fleet, host: str) -> None:
    hub = fleet["hosts"][host].nvme / "hub"
    commit = fleet["fixture"].weights.commits["main"]
    snap = hub / repo_folder(WEIGHTS_REPO) / "snapshots" / commit
    for path, data in fleet["fixture"].weights.files[commit].items():
        if not path.startswith("page15/"):
            assert (snap / path).read_bytes() == data, (host, path)
            assert os.path.realpath(snap / path).startswith(str(hub.resolve())), (host, path)


def test_remote_stage_runs_on_the_host(fleet):
    before = nas_tx_bytes(fleet["nas"].netns)
    proc = cli(fleet["root"], "stage", "dgx2", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads(proc.stdout)
    (outcome,) = record["hosts"]
    assert outcome["host"] == "dgx2" and outcome["ok"]
    assert outcome["run"]["dest_hub"] == str(fleet["hosts"]["dgx2"].nvme / "hub")
    assert_complete(fleet, "dgx2")
    assert not (fleet["hosts"]["dgx1"].nvme / "hub").exists()
    assert nas_tx_bytes(fleet["nas"].netns) - before >= staged_bytes(fleet)
    verify = cli(fleet["root"], "verify", "dgx2")  # verify runs where the trees are: same filesystem here
    assert "dangling: 0, mismatches: 0" in verify.stdout


def test_lane_parallel_then_fanout_nas_bytes(fleet):
    # Independent: every host reads everything from the NAS.
    before = nas_tx_bytes(fleet["nas"].netns)
    proc = cli(fleet["root"], "stage", "--lane", LANE, "--full", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    independent = nas_tx_bytes(fleet["nas"].netns) - before
    one_copy = staged_bytes(fleet)
    for h in HOSTS:
        assert_complete(fleet, h)
    assert independent >= 3.0 * one_copy  # one_copy counts the hardlinked drafter blob twice

    # Fan-out from empty hubs: each blob leaves the NAS once; peers share the rest.
    for h in fleet["hosts"].values():
        subprocess.run(["rm", "-rf", str(h.nvme / "hub")], check=True)
    before = nas_tx_bytes(fleet["nas"].netns)
    proc = cli(fleet["root"], "stage", "--lane", LANE, "--fanout", "--full", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fanout = nas_tx_bytes(fleet["nas"].netns) - before
    record = json.loads(proc.stdout)
    assert record["fanout"] and all(o["ok"] for o in record["hosts"])
    assert sum(o["run"]["peer_bytes"] for o in record["hosts"]) >= 2.5 * one_copy
    for h in HOSTS:
        assert_complete(fleet, h)
    assert fanout <= 1.1 * one_copy + 2 * 1024 * 1024, (fanout, one_copy)
    print(
        f"NAS bytes for 4 hosts: independent {independent / one_copy:.2f}x, fan-out {fanout / one_copy:.2f}x"
    )


def test_fanout_dry_run_shows_who_pulls_what(fleet):
    proc = cli(fleet["root"], "stage", "--lane", LANE, "--fanout", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = json.loads(proc.stdout)
    reads = plan["nas_reads"]
    assert set(reads) == set(HOSTS) and all(v > 0 for v in reads.values())
    assert max(reads.values()) < 0.5 * sum(reads.values())  # balanced shares
    assert {p["seed"] for p in plan["pulls"]} == set(HOSTS)
    assert not (fleet["hosts"]["dgx1"].nvme / "hub").exists()


def test_dead_peer_falls_back(fleet):
    """Wave 1 done, then dgx2 dies: dgx1's wave 2 takes dgx2's share from other peers or the NAS."""
    root = fleet["root"]
    for i, h in enumerate(HOSTS):
        proc = cli(root, "stage", h, "--here", "--share", f"{i}/4", "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    os.kill(fleet["hosts"]["dgx2"].sshd_pid, 9)
    proc = cli(root, "stage", "dgx1", "--here", "--peers", ",".join(HOSTS), "--full", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = json.loads(proc.stdout)
    failures = [f for r in run["repos"] for f in r["peer_failures"]]
    dead = [f for f in failures if f.startswith("dgx2:")]
    assert dead, failures  # dgx2's share was tried there first, then elsewhere
    dgx2_share = {f.split(": ")[1] for f in dead}
    # every other failure is a peer that simply did not have one of dgx2's files
    assert all(f.split(": ")[1] in dgx2_share for f in failures)
    assert run["nas_bytes"] > 0 and run["peer_bytes"] > 0
    assert_complete(fleet, "dgx1")


def test_unreachable_host_is_named(fleet):
    os.kill(fleet["hosts"]["dgx3"].sshd_pid, 9)
    proc = cli(fleet["root"], "stage", "dgx3")
    assert proc.returncode != 0
    assert "dgx3" in proc.stdout + proc.stderr


# ---- links shaped like the fleet's (tc), peer transports, 8 hosts with a peer dying mid-wave ----

NAS_BIT = 80_000_000  # the NAS's one shared link; hosts get FABRIC_RATIO x that
FABRIC_RATIO = 20


def shape_or_skip(nas, hosts) -> dict:
    """Shape like the fleet, or skip naming why (a kernel without sch_tbf, no `tc`)."""
    reason = tc_skip_reason()
    if reason:
        pytest.skip(reason)
    try:
        return shape_fleet(nas, hosts, NAS_BIT, FABRIC_RATIO)
    except RuntimeError as exc:
        if "qdisc kind is unknown" in str(exc):
            pytest.skip(f"this kernel cannot shape links with tbf: {exc}")
        raise


def listeners(host) -> list[str]:
    """Local addresses with a TCP listener inside the host's namespace."""
    out = subprocess.run(host.exec_argv("ss", "-Hltn"), capture_output=True, text=True, check=True).stdout
    return sorted(line.split()[3] for line in out.splitlines() if line.strip())


@pytest.mark.parametrize("transport", ["rsyncd", "ssh-fast"])
def test_shaped_fanout_reads_the_nas_once(fleet, transport):
    """NAS link shaped (tbf), host links 20x: each blob leaves the NAS once, every byte checked.

    sha256-named blobs are hashed on arrival, so peers' bytes cost no NAS reads; the daemons
    (rsyncd) listen on the fabric address only, and are gone when the run ends.
    """
    nas, hosts = fleet["nas"], fleet["hosts"]
    record = shape_or_skip(nas, hosts.values())
    assert qdisc_kinds(nas) == ["tbf"] and all(qdisc_kinds(h) == ["tbf"] for h in hosts.values())
    assert record["host_bit"] == NAS_BIT * FABRIC_RATIO
    before = nas_tx_bytes(nas.netns)
    proc = cli(fleet["root"], "stage", "--lane", LANE, "--fanout", "--peer-transport", transport, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    nas_bytes = nas_tx_bytes(nas.netns) - before
    record = json.loads(proc.stdout)
    assert all(o["ok"] for o in record["hosts"])
    for h in HOSTS:
        assert_complete(fleet, h)
    one_copy = staged_bytes(fleet) - len(
        fleet["fixture"].weights.files[fleet["fixture"].weights.commits["main"]][EMBED_FILE]
    )
    assert nas_bytes <= 1.05 * one_copy + 512 * 1024, (nas_bytes, one_copy)
    served = {}
    for o in record["hosts"]:
        for r in o["run"]["repos"]:
            for peer, n in r["peer_bytes_from"].items():
                served[peer] = served.get(peer, 0) + n
    assert set(served) == set(HOSTS)  # every host served its share
    for h in hosts.values():
        assert listeners(h) == [f"{h.addr}:22"], listeners(h)  # no daemon left behind
    print(f"shaped fan-out ({transport}): NAS {nas_bytes / one_copy:.3f}x one copy")


HOSTS8 = [f"dgx{i}" for i in range(1, 9)]


@pytest.fixture
def fleet8(tmp_path, fleet_hosts, nas_host, sshfs, monkeypatch):
    fixture = build_nas_hub(
        nas_host.root / "share" / "hub", shard_bytes=2 * 1024 * 1024, absolute_links=False
    )
    mounts = {
        h: sshfs(
            nas_host, nas_host.root / "share", tmp_path / f"nas-{h}", extra_opts=("no_contain_symlinks",)
        )
        for h in HOSTS8
    }
    hosts = fleet_hosts(HOSTS8)
    root = write_lane_fleet(
        tmp_path / "fleet8",
        {h: hosts[h].nvme / "hub" for h in HOSTS8},
        {h: mounts[h] / "hub" for h in HOSTS8},
        "lane8",
        {h: hosts[h].addr for h in HOSTS8},
    )
    use_ssh(monkeypatch, tmp_path / "ssh_config", hosts)
    return {"root": root, "hosts": hosts, "nas": nas_host, "fixture": fixture}


def serving_pids(host) -> list[int]:
    """PIDs in the host's namespace sending a file to a peer right now: rsync --server --sender
    under sshd, or a connection child of its rsync daemon (the daemon itself is the oldest)."""
    senders, daemons = [], []
    for pid in netns_pids(host.netns):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--sender" in argv:
            senders.append(pid)
        elif b"--daemon" in argv:
            daemons.append(pid)
    return senders + sorted(daemons)[1:]


def test_eight_hosts_peer_dies_mid_wave_and_the_rest_fall_back(fleet8):
    """dgx2 is killed while it is sending to a peer: the others take its share elsewhere, verified.

    Default transport: rsyncd here (every host declares a fabric_ip)."""
    nas, hosts = fleet8["nas"], fleet8["hosts"]
    shape_or_skip(nas, hosts.values())
    shape_egress(hosts["dgx2"], 16_000_000)  # slow, so its pulls are in flight when it dies
    argv = [sys.executable, "-m", "sparkfleet", "--root", str(fleet8["root"]), "stage", "--lane", "lane8"]
    proc = subprocess.Popen(
        [*argv, "--fanout", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not serving_pids(hosts["dgx2"]):
            assert proc.poll() is None and time.monotonic() < deadline, "dgx2 never served a peer"
            time.sleep(0.05)
        for pid in netns_pids(hosts["dgx2"].netns):  # the host dies: sshd, its stage, its senders
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0  # dgx2 itself did not finish, and says so
    record = json.loads(out)
    outcomes = {o["host"]: o for o in record["hosts"]}
    assert not outcomes["dgx2"]["ok"]
    failures = []
    for h in HOSTS8:
        if h == "dgx2":
            continue
        assert outcomes[h]["ok"], outcomes[h]
        assert_complete(fleet8, h)
        failures += [f for r in outcomes[h]["run"]["repos"] for f in r["peer_failures"]]
    assert any(f.startswith("dgx2:") for f in failures), failures


def test_shaping_is_removed_even_when_the_body_fails(fleet):
    nas = fleet["nas"]
    shape_or_skip(nas, [])
    with pytest.raises(RuntimeError, match="boom"), shaped(nas, NAS_BIT):
        assert qdisc_kinds(nas) == ["tbf"]
        raise RuntimeError("boom")
    assert "tbf" not in qdisc_kinds(nas)
