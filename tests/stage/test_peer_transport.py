"""Fan-out's tree and peer transports: pure rules, plus a real rsync daemon on loopback."""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sparkfleet.base.errors import ExitCode, SourceError, SparkfleetError
from sparkfleet.stage.fanout import tree_position, tree_rounds, tree_sources
from sparkfleet.stage.peerserve import DaemonSpec, serve
from sparkfleet.stage.transport import SECRET_ENV, PeerMiss, PeerSource, resolve_transport


@pytest.mark.parametrize("hosts", [2, 3, 4, 8, 16])
def test_tree_reaches_every_host_in_log2_rounds(hosts):
    """Binomial tree: position p receives in round bit_length(p) from a parent that had it earlier,
    each holder sends to at most one child per round, and the last round is ceil(log2(hosts))."""
    for seed in range(hosts):
        got_in = {seed: 0}
        sends: set[tuple[int, int]] = set()
        for h in sorted(set(range(hosts)) - {seed}, key=lambda h: tree_position(h, seed, hosts)):
            parent = tree_sources(h, seed, hosts)[0]
            rnd = tree_position(h, seed, hosts).bit_length()
            assert got_in[parent] < rnd
            assert (parent, rnd) not in sends
            sends.add((parent, rnd))
            got_in[h] = rnd
        assert max(got_in.values()) == tree_rounds(hosts) == (hosts - 1).bit_length()


def test_tree_sources_ask_the_parent_then_the_seed_then_everyone_else():
    assert tree_sources(7, 0, 8)[:2] == [3, 0]  # position 7: parent 3, then the seed
    assert tree_sources(2, 0, 8)[:2] == [0, 1]  # parent is the seed: then the ring
    assert tree_sources(3, 3, 8) != []  # the seed itself still has fallbacks (never used)
    for hosts in (4, 16):
        for seed in range(hosts):
            for h in range(hosts):
                order = tree_sources(h, seed, hosts)
                assert sorted(order) == sorted(set(range(hosts)) - {h})  # every peer once, never me
                if h != seed:
                    assert seed in order[:2]  # at most one miss before the host that surely has it


def test_no_host_serves_more_children_than_the_flat_seed():
    """Per file, the seed serves at most log2(n) children directly; the flat scheme served n-1."""
    hosts = 16
    for seed in range(hosts):
        children: dict[int, int] = {}
        for h in range(hosts):
            if h != seed:
                parent = tree_sources(h, seed, hosts)[0]
                children[parent] = children.get(parent, 0) + 1
        assert max(children.values()) == tree_rounds(hosts) == 4


def test_ssh_fast_asks_for_aes_gcm_and_rsyncd_keeps_the_secret_off_argv(tmp_path):
    ssh = ("ssh", "-o", "BatchMode=yes", "-p", "22")
    fast = PeerSource("dgx2", Path("/hub"), ssh, "dgx2", "ssh-fast").rsync_argv("blobs/x", tmp_path / "t")
    assert fast[fast.index("-e") + 1].startswith("ssh -c aes128-gcm@openssh.com")
    plain = PeerSource("dgx2", Path("/hub"), ssh, "dgx2", "ssh").rsync_argv("blobs/x", tmp_path / "t")
    assert "-c" not in plain[plain.index("-e") + 1].split()
    secret = secrets.token_urlsafe(32)
    peer = PeerSource("dgx2", Path("/hub"), (), "10.1.2.3", "rsyncd", 8730, secret)
    argv = peer.rsync_argv("blobs/x", tmp_path / "t")
    assert argv[-2] == "rsync://sparkfleet-peer@10.1.2.3:8730/hub/blobs/x"
    assert not any(secret in a for a in argv)
    assert peer.env()[SECRET_ENV] == secret and not peer.protects_bytes
    with pytest.raises(ValueError, match="secret"):
        PeerSource("dgx2", Path("/hub"), (), "10.1.2.3", "rsyncd", 8730, None)


def test_auto_is_rsyncd_only_on_a_declared_fabric():
    assert resolve_transport("auto", fabric_declared=True) == "rsyncd"
    assert resolve_transport("auto", fabric_declared=False) == "ssh-fast"
    assert resolve_transport("ssh", fabric_declared=True) == "ssh"


def test_daemon_config_is_read_only_fenced_and_refuses_odd_values(tmp_path):
    spec = DaemonSpec(tmp_path / "hub", "10.1.2.3", ("10.1.2.4", "10.1.2.5"))
    conf = spec.config(tmp_path / "secrets", 8730)
    for line in (
        "address = 10.1.2.3",
        "read only = yes",
        "list = no",
        "hosts allow = 10.1.2.4 10.1.2.5",
        "hosts deny = *",
        "auth users = sparkfleet-peer:ro",
        "strict modes = yes",
    ):
        assert line in conf
    with pytest.raises(SparkfleetError):
        DaemonSpec(tmp_path / "hub", "10.1.2.3", ("10.1.2.4\n[evil]",)).config(tmp_path / "s", 1)


def _pull(port: int, rel: str, dest: Path, password: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["rsync", "--timeout=10", f"rsync://sparkfleet-peer@127.0.0.1:{port}/hub/{rel}", str(dest)],
        capture_output=True,
        text=True,
        env={**os.environ, SECRET_ENV: password},
        timeout=30,
    )


def test_real_daemon_serves_only_with_the_run_secret_and_stops_with_the_block(tmp_path):
    hub = tmp_path / "hub"
    data = os.urandom(256 * 1024)
    name = hashlib.sha256(data).hexdigest()
    (hub / "blobs").mkdir(parents=True)
    (hub / "blobs" / name).write_bytes(data)
    secret = secrets.token_urlsafe(32)
    with serve(DaemonSpec(hub, "127.0.0.1", ("127.0.0.1",)), secret) as (port, pid):
        conf_dirs = [p for p in Path(os.environ.get("TMPDIR", "/tmp")).glob("sparkfleet-rsyncd-*")]
        assert any(oct((d / "secrets").stat().st_mode & 0o777) == "0o600" for d in conf_dirs)
        assert secret not in Path(f"/proc/{pid}/cmdline").read_text()
        ok = _pull(port, f"blobs/{name}", tmp_path / "got", secret)
        assert ok.returncode == 0, ok.stderr
        assert (tmp_path / "got").read_bytes() == data
        wrong = _pull(port, f"blobs/{name}", tmp_path / "nope", "not-the-secret")
        assert wrong.returncode != 0 and not (tmp_path / "nope").exists()
        upload = subprocess.run(
            [
                "rsync",
                "--timeout=10",
                str(tmp_path / "got"),
                f"rsync://sparkfleet-peer@127.0.0.1:{port}/hub/x",
            ],
            capture_output=True,
            env={**os.environ, SECRET_ENV: secret},
            timeout=30,
        )
        assert upload.returncode != 0 and not (hub / "x").exists()  # read-only module
        peer = PeerSource("me", hub, (), "127.0.0.1", "rsyncd", port, secret)
        peer.fill(f"blobs/{name}", tmp_path / "via-peer")
        assert (tmp_path / "via-peer").read_bytes() == data
        with pytest.raises(PeerMiss):  # up, but not holding it (yet): a miss, not a failure
            peer.fill("blobs/" + "0" * 64, tmp_path / "missing")
        with pytest.raises(SourceError, match="failed"):
            PeerSource("me", hub, (), "127.0.0.1", "rsyncd", port, "wrong").fill(
                f"blobs/{name}", tmp_path / "w"
            )
    with pytest.raises(OSError):  # the daemon is gone with the block: nothing listens any more
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_rsyncd_without_a_fabric_ip_is_refused_before_any_host_is_touched(tmp_path):
    from support.stagefleet import write_lane_fleet

    hosts = ["dgx1", "dgx2"]
    root = write_lane_fleet(
        tmp_path / "fleet",
        {h: tmp_path / h / "hub" for h in hosts},
        {h: tmp_path / "nas" / "hub" for h in hosts},
        "lane2",
        {"dgx1": "10.9.9.1"},  # dgx2 declares no fabric
    )
    argv = [sys.executable, "-m", "sparkfleet", "--root", str(root), "stage", "--lane", "lane2", "--fanout"]
    proc = subprocess.run([*argv, "--peer-transport", "rsyncd"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == ExitCode.USAGE
    assert "dgx2 has no fabric_ip" in proc.stdout + proc.stderr
    assert not (tmp_path / "dgx1").exists() and not (tmp_path / "dgx2").exists()
