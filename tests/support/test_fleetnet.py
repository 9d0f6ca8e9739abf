"""Tests of the real-host harness itself (network namespaces + sshd, sshfs, tmpfs, teardown, sweep)."""

from __future__ import annotations

import errno
import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .fleetnet import (
    fleet_session,
    is_mounted,
    link_names,
    mounts,
    netns_list,
    netns_pids,
    pid_alive,
    requires_fuse,
    requires_netns,
    sshfs_mount,
    sweep_stale,
    tmpfs_mount,
)

pytestmark = [pytest.mark.netns, requires_netns]
fuse = [pytest.mark.fuse, requires_fuse]


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    assert not pid_alive(p.pid)
    return p.pid


def _assert_gone(
    netns: list[str], pids: list[int], links: list[str], mountpoints: list[str], dirs: list[str]
):
    left_ns = set(netns) & set(netns_list())
    assert not left_ns, f"namespaces left: {left_ns}"
    alive = [p for p in pids if Path(f"/proc/{p}").exists() and pid_alive(p)]
    assert not alive, f"processes left: {alive}"
    left_links = set(links) & set(link_names())
    assert not left_links, f"links left: {left_links}"
    proc_mounts = Path("/proc/mounts").read_text()
    for mp in mountpoints:
        assert not is_mounted(mp) and f" {mp} " not in proc_mounts, f"still mounted: {mp}"
    for d in dirs:
        assert not Path(d).exists(), f"dir left: {d}"


def test_hosts_reach_each_other_over_ssh(fleet_hosts):
    fleet = fleet_hosts(["dgx1", "dgx2"])
    a, b = fleet["dgx1"], fleet["dgx2"]
    assert a.addr != b.addr and a.netns != b.netns

    # root namespace -> A: we land in A's namespace (address + UTS hostname)
    r = a.ssh("hostname; hostname -I; ip -4 -o addr show dev eth0")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "dgx1"
    assert lines[1].split() == [a.addr]
    assert f"inet {a.addr}/24" in r.stdout
    assert b.addr not in r.stdout

    # inside A -> B over ssh (the client key is on the shared filesystem)
    r = a.ssh(shlex.join(b.ssh_argv("hostname; hostname -I")))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["dgx2", b.addr]

    # each host has its own directory tree
    assert a.nvme.is_dir() and b.nvme.is_dir() and a.root != b.root


def test_exit_code_stdout_stderr(fleet_hosts):
    h = fleet_hosts(["dgx1"])["dgx1"]
    r = h.ssh("echo hello; echo oops >&2; exit 7")
    assert r.returncode == 7
    assert r.stdout == "hello\n"
    assert r.stderr == "oops\n"
    # the argv form, with a remote command appended
    r = subprocess.run(h.ssh_argv("cat", str(h.nvme / "nope")), capture_output=True, text=True)
    assert r.returncode != 0 and "No such file" in r.stderr


def test_ssh_config_for_plain_host_names(fleet_hosts, ssh_config):
    fleet = fleet_hosts(["dgx1", "dgx2", "dgx3"])
    cfg = ssh_config(fleet)
    for name, h in fleet.items():
        r = subprocess.run(
            ["ssh", "-F", str(cfg), name, "hostname -I"], capture_output=True, text=True, timeout=30
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == [h.addr]


def test_each_host_has_its_own_home_and_every_env_it_was_given(fleetnet):
    """A session's shell reads $HOME/.bashrc: this machine's ran pyenv's `rehash`, which waits 60 s
    on a lock a killed session leaves behind, and a CI run hung on every later ssh session. And
    sshd keeps only its first SetEnv line: every variable a host is given must reach its sessions
    (podman's two config files, a test engine's DOCKER_HOST)."""
    env = {"SF_ONE": "1", "SF_TWO": "two words", "SF_THREE": "/a/b:c"}
    h = fleetnet.add_host("envhost", env=env)
    try:
        r = h.ssh('printf "%s\\n" "$HOME" "$SF_ONE" "$SF_TWO" "$SF_THREE"; ls -A "$HOME"')
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == [str(h.home), *env.values()]
        assert str(h.home) != os.path.expanduser("~")
    finally:
        fleetnet.remove_host(h)


def test_processes_and_addresses_are_per_host(fleet_hosts):
    fleet = fleet_hosts(["dgx1", "dgx2"])
    a, b = fleet["dgx1"], fleet["dgx2"]
    assert a.sshd_pid in netns_pids(a.netns)
    assert a.sshd_pid not in netns_pids(b.netns)
    # a server started on A's address is reachable from B but only bound inside A
    r = b.ssh(f"timeout 5 bash -c 'echo > /dev/tcp/{a.addr}/22' && echo open")
    assert r.stdout.strip() == "open"


@pytest.mark.fuse
@requires_fuse
def test_sshfs_mount_is_real_and_read_only(nas_host, sshfs):
    share = nas_host.root / "share"
    (share / "model").mkdir()
    (share / "model" / "config.json").write_text('{"a": 1}')
    mp = sshfs(nas_host, share)
    assert any(m == str(mp) and t == "fuse.sshfs" for _, m, t in mounts())
    assert (mp / "model" / "config.json").read_text() == '{"a": 1}'
    # written on the host after mounting: visible through sshfs
    (share / "late.txt").write_text("late")
    assert (mp / "late.txt").read_text() == "late"
    with pytest.raises(OSError) as ei:
        (mp / "new.txt").write_text("x")
    assert ei.value.errno == errno.EROFS
    with pytest.raises(OSError):
        (mp / "model" / "config.json").unlink()
    assert (share / "model" / "config.json").exists()


@pytest.mark.fuse
@requires_fuse
def test_sshfs_context_manager_unmounts(fleetnet):
    with fleetnet.host("nas") as h:
        (h.root / "f").write_text("hi")
        with sshfs_mount(h, h.root) as mp:
            assert (mp / "f").read_text() == "hi"
            own = mp.parent
        _assert_gone([], [], [], [str(mp)], [str(own)])
        # explicit mountpoint is kept, only unmounted
        target = fleetnet.unique_dir("explicit")
        with sshfs_mount(h, h.root, target) as mp2:
            assert mp2 == target and (mp2 / "f").exists()
        assert not is_mounted(target) and target.is_dir()


def test_tmpfs_enospc_at_size_limit(tmpfs):
    size = 1 << 20
    mp = tmpfs(size)
    assert any(m == str(mp) and t == "tmpfs" for _, m, t in mounts())
    (mp / "fits").write_bytes(b"\0" * (size // 2))
    with pytest.raises(OSError) as ei, open(mp / "too-big", "wb") as f:
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())
    assert ei.value.errno == errno.ENOSPC


def test_tmpfs_context_manager_unmounts():
    with tmpfs_mount(4096 * 4) as mp:
        assert is_mounted(mp)
    _assert_gone([], [], [], [str(mp)], [str(mp.parent)])


@pytest.mark.fuse
@requires_fuse
def test_full_teardown_after_session_exits():
    with fleet_session() as net:
        a, b = net.add_host("dgx1"), net.add_host("dgx2")
        # an ssh session left running inside A: its sshd child must die too
        client = subprocess.Popen(a.ssh_argv("sleep 300"), stdin=subprocess.DEVNULL)
        try:
            with sshfs_mount(b, b.root) as smp, tmpfs_mount(1 << 16) as tmp:
                forgotten = net.unique_dir("forgotten")  # mounted and never unmounted by the test
                subprocess.run(
                    ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(forgotten)], check=True
                )
                assert a.ssh("true").returncode == 0
                namespaces = [a.netns, b.netns]
                pids = [p for ns in namespaces for p in netns_pids(ns)]
                assert a.sshd_pid in pids and b.sshd_pid in pids
                links = [net.bridge, a.veth, b.veth]
                assert set(links) <= set(link_names())
                mps, root = [str(smp), str(tmp), str(forgotten)], str(net.dir)
        finally:
            pass
    try:
        client.wait(timeout=15)  # connection dropped by teardown
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert len(pids) > 2  # sshd x2 + the session process(es)
    _assert_gone(namespaces, pids, links, mps, [root])


def test_teardown_when_test_body_raises():
    with pytest.raises(RuntimeError, match="boom"), fleet_session() as net:
        h = net.add_host("dgx1")
        state = ([h.netns], [h.sshd_pid], [net.bridge, h.veth], [], [str(net.dir)])
        raise RuntimeError("boom")
    _assert_gone(*state)


@pytest.mark.serial  # another worker's sweep would clean the dead session's leftovers first: run alone
def test_sweep_cleans_up_after_killed_session():
    """A session SIGKILLed mid-test leaves netns, sshd, bridge and a mount; the next sweep removes them."""
    child_code = textwrap.dedent(
        """
        import json, sys, time
        sys.path.insert(0, sys.argv[1])
        import fleetnet
        net = fleetnet.FleetNet(sweep=False)
        h = net.add_host("dgx1")
        cm = fleetnet.tmpfs_mount(1 << 16)
        mp = cm.__enter__()
        print(json.dumps({"ns": h.netns, "sshd": h.sshd_pid, "links": [net.bridge, h.veth],
                          "mp": str(mp), "dir": str(net.dir), "tmpdir": str(mp.parent)}), flush=True)
        time.sleep(600)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", child_code, str(Path(__file__).parent)], stdout=subprocess.PIPE, text=True
    )
    try:
        info = json.loads(child.stdout.readline())
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    # the crash left everything behind
    assert info["ns"] in netns_list()
    assert pid_alive(info["sshd"])
    assert set(info["links"]) <= set(link_names())
    assert is_mounted(info["mp"])

    actions = sweep_stale()
    assert any(info["ns"] in a for a in actions), actions
    _assert_gone([info["ns"]], [info["sshd"]], info["links"], [info["mp"]], [info["dir"], info["tmpdir"]])


def test_sweep_removes_dead_prefix_only():
    dead, live = _dead_pid(), os.getpid()
    dead_ns, live_ns = f"sf-{dead}-abcdef-dgx9", f"sf-{live}-abcdef-dgx9"
    dead_br, live_br = f"sfb{dead}-f0f", f"sfb{live}-f0f"
    other_ns = f"notsf-{dead}-abcdef-x"
    created_ns, created_links = [], []
    try:
        for ns in (dead_ns, live_ns, other_ns):
            subprocess.run(["ip", "netns", "add", ns], check=True)
            created_ns.append(ns)
        for br in (dead_br, live_br):
            subprocess.run(["ip", "link", "add", "name", br, "type", "bridge"], check=True)
            created_links.append(br)
        sweep_stale()
        assert dead_ns not in netns_list() and dead_br not in link_names()
        assert live_ns in netns_list() and live_br in link_names()
        assert other_ns in netns_list()
    finally:
        for ns in created_ns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for br in created_links:
            subprocess.run(["ip", "link", "del", br], capture_output=True)


def test_an_sshfs_mount_of_a_dead_sessions_share_is_recognised_wherever_it_is_mounted():
    """A killed test run leaves its sshfs mount under pytest's tmp_path: its source names the owner."""
    from support.fleetnet import SESSION_SHARE_RE

    m = SESSION_SHARE_RE.search("root@10.105.193.17:/tmp/sf-26858-j5aeef6o/nas/share")
    assert m is not None and m.group(1) == "26858"
    assert SESSION_SHARE_RE.search("root@10.1.2.3:/srv/share") is None
