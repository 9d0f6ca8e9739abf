"""Real fleet hosts for tests: network namespaces running OpenSSH, sshfs and tmpfs mounts.

Each fake fleet host is a Linux network namespace with a veth leg into a per-session bridge
in the root namespace, its own address in a per-session /24, its own UTS name (``hostname``
inside prints the host name) and a real ``sshd`` (key-only root login) listening on port 22.
The namespaces share the filesystem; every host gets a private directory tree
``<session tmp>/<name>/`` with an ``nvme/`` subdirectory.

Everything we create carries the prefix ``sf`` plus the owning pid, so a session start can
sweep what a crashed earlier run left behind (and never touches anything else):

* network namespaces   ``sf-<pid>-<rand>-<host>``
* links                ``sfb<pid>-<rand>`` (bridge), ``sfv<pid>-<rand>`` (root end of a veth)
* temp dirs / mounts   ``<tmpdir>/sf-<pid>-<rand>/...``

Processes are tracked by PID (``subprocess.Popen``) and only ever killed by PID.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PREFIX = "sf"
SSHD = "/usr/sbin/sshd"
SFTP_SERVER_CANDIDATES = ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server")

_NETNS_RE = re.compile(r"^sf-(\d+)-[0-9a-f]+-")
_LINK_RE = re.compile(r"^sf[bv](\d+)-[0-9a-f]+$")
_TMPDIR_RE = re.compile(r"^sf-(\d+)-")
# An sshfs source: user@addr:<tmp>/sf-<pid>-<rand>/...
SESSION_SHARE_RE = re.compile(r":/.*/sf-(\d+)-[^/]*/")


# --------------------------------------------------------------------------------------------
# capability checks / skip logic
# --------------------------------------------------------------------------------------------


def netns_skip_reason() -> str | None:
    """Why real netns hosts cannot run here, or None if they can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth, bridge)"
    for tool in ("ip", "ssh", "ssh-keygen", "unshare"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found on PATH"
    if not os.access(SSHD, os.X_OK):
        return f"{SSHD} missing (Debian package openssh-server)"
    if _run(["ip", "netns", "list"], check=False).returncode != 0:
        return "`ip netns` does not work here"
    return None


def fuse_skip_reason() -> str | None:
    """Why sshfs mounts cannot run here, or None if they can."""
    if os.geteuid() != 0:
        return "needs root (FUSE mounts of sshfs)"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse missing"
    if shutil.which("sshfs") is None:
        return "`sshfs` not found on PATH (Debian package sshfs)"
    if shutil.which("fusermount") is None and shutil.which("fusermount3") is None:
        return "neither fusermount nor fusermount3 found (Debian package fuse3)"
    return None


def tmpfs_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (mount -t tmpfs)"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "mount/umount not found"
    return None


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------


def _run(argv: list[str], check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    except FileNotFoundError as e:
        if check:
            raise
        return subprocess.CompletedProcess(argv, 127, "", str(e))
    if check and cp.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({cp.returncode}): {cp.stderr.strip()}")
    return cp


def pid_alive(pid: int) -> bool:
    """True if pid exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _kill_pid(pid: int, timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL, a process we own, by pid."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return
            time.sleep(0.05)


def _stop_popen(proc: subprocess.Popen | None, timeout: float = 5.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


def _unescape_mount_field(s: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def mounts() -> list[tuple[str, str, str]]:
    """(source, mountpoint, fstype) for every line of /proc/mounts."""
    out = []
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out.append((_unescape_mount_field(parts[0]), _unescape_mount_field(parts[1]), parts[2]))
    return out


def is_mounted(path: str | os.PathLike) -> bool:
    p = os.path.realpath(path)
    return any(mp == p for _, mp, _ in mounts())


def _unmount(mountpoint: str | os.PathLike, fuse: bool = False) -> None:
    mp = str(mountpoint)
    attempts: list[list[str]] = []
    if fuse:
        attempts += [["fusermount", "-u", mp], ["fusermount3", "-u", mp]]
    attempts += [["umount", mp], ["umount", "-l", mp]]
    for argv in attempts:
        if not is_mounted(mp):
            return
        if shutil.which(argv[0]) is None:
            continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            _run(argv, check=False, timeout=30)
    if is_mounted(mp):
        raise RuntimeError(f"could not unmount {mp}")


def netns_list() -> list[str]:
    cp = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in cp.stdout.splitlines() if line.strip()]


def link_names() -> list[str]:
    cp = _run(["ip", "-o", "link", "show"], check=False)
    names = []
    for line in cp.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def netns_pids(ns: str) -> list[int]:
    cp = _run(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in cp.stdout.split() if x.isdigit()]


def wait_port(addr: str, port: int, timeout: float = 15.0, proc: subprocess.Popen | None = None) -> None:
    """Wait until addr:port accepts TCP (from the root namespace)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                f"process {proc.pid} exited with {proc.returncode} before {addr}:{port} opened"
            )
        try:
            with socket.create_connection((addr, port), timeout=1.0) as s:
                # wait for the SSH banner: proves sshd (not just the kernel backlog) is serving
                s.settimeout(2.0)
                if s.recv(4).startswith(b"SSH-"):
                    return
        except OSError as e:
            last = e
        time.sleep(0.05)
    raise TimeoutError(f"{addr}:{port} not accepting after {timeout}s: {last}")


_netns_reason = netns_skip_reason()
_fuse_reason = fuse_skip_reason()

#: decorators: ``@requires_netns`` / ``@requires_fuse`` (marker + skipif with a clear reason)
requires_netns = pytest.mark.skipif(_netns_reason is not None, reason=f"netns: {_netns_reason}")
requires_fuse = pytest.mark.skipif(_fuse_reason is not None, reason=f"fuse: {_fuse_reason}")


# --------------------------------------------------------------------------------------------
# stale-state sweep
# --------------------------------------------------------------------------------------------


def sweep_stale(tmp_root: str | os.PathLike | None = None) -> list[str]:
    """Remove leftovers of dead sessions: only things named with our prefix whose owning pid is dead.

    Returns a list of human readable actions (for logging / tests).
    """
    actions: list[str] = []
    tmp_root = Path(tmp_root or tempfile.gettempdir())

    # 1. mounts below <tmp>/sf-<deadpid>-*/, and sshfs mounts anywhere (a test's tmp_path) of a
    #    share inside one: a killed run never reached its teardown (deepest first)
    stale_mps = []
    for source, mp, fstype in mounts():
        owner = SESSION_SHARE_RE.search(source) if fstype == "fuse.sshfs" else None
        try:
            rel = Path(mp).relative_to(tmp_root)
        except ValueError:
            rel = None
        m = _TMPDIR_RE.match(rel.parts[0]) if rel and rel.parts else None
        m = m or owner
        if m and not pid_alive(int(m.group(1))):
            stale_mps.append((mp, fstype))
    for mp, fstype in sorted(stale_mps, key=lambda t: -len(t[0])):
        with contextlib.suppress(Exception):
            _unmount(mp, fuse=fstype.startswith("fuse"))
            actions.append(f"unmounted {mp}")

    # 2. namespaces sf-<deadpid>-*: kill whatever still runs inside (stray sshd), then delete
    for ns in netns_list():
        m = _NETNS_RE.match(ns)
        if not m or pid_alive(int(m.group(1))):
            continue
        for pid in netns_pids(ns):
            _kill_pid(pid)
            actions.append(f"killed pid {pid} in {ns}")
        _run(["ip", "netns", "del", ns], check=False)
        actions.append(f"deleted netns {ns}")

    # 3. links sfb<deadpid>-*, sfv<deadpid>-*
    for name in link_names():
        m = _LINK_RE.match(name)
        if m and not pid_alive(int(m.group(1))):
            _run(["ip", "link", "del", name], check=False)
            actions.append(f"deleted link {name}")

    # 4. temp dirs of dead sessions (only once nothing is mounted below them)
    mounted = [mp for _, mp, _ in mounts()]
    for d in tmp_root.glob(f"{PREFIX}-*-*"):
        m = _TMPDIR_RE.match(d.name)
        if not m or not d.is_dir() or pid_alive(int(m.group(1))):
            continue
        if any(mp == str(d) or mp.startswith(str(d) + "/") for mp in mounted):
            continue
        shutil.rmtree(d, ignore_errors=True)
        actions.append(f"removed {d}")
    return actions


# --------------------------------------------------------------------------------------------
# hosts
# --------------------------------------------------------------------------------------------


@dataclass
class NetnsHost:
    """One fake fleet host: a network namespace with its own address and a real sshd on ``port``."""

    name: str  # e.g. "dgx1"; also the host's UTS hostname
    netns: str  # e.g. "sf-1234-a1b2c3-dgx1"
    addr: str  # e.g. "10.173.42.2"
    port: int  # 22
    root: Path  # private directory tree, <session>/<name>/
    key: Path  # client private key (ed25519) accepted for root@
    veth: str  # root-namespace end of the veth pair
    sshd_pid: int = 0
    sshd_log: Path | None = None
    user: str = "root"
    _proc: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    @property
    def nvme(self) -> Path:
        return self.root / "nvme"

    @property
    def home(self) -> Path:
        """The host's own $HOME in its ssh sessions (never this machine's: see `add_host`)."""
        return self.root / "home"

    def ssh_argv(self, *command: str) -> list[str]:
        """OpenSSH client argv to reach this host; append a remote command or pass it here."""
        return ssh_argv(self) + list(command)

    def ssh(
        self, command: str, check: bool = False, timeout: float = 60, **kw
    ) -> subprocess.CompletedProcess:
        """Run a shell command on the host over real ssh; returns CompletedProcess (text)."""
        return subprocess.run(
            self.ssh_argv(command), capture_output=True, text=True, check=check, timeout=timeout, **kw
        )

    def exec_argv(self, *argv: str) -> list[str]:
        """argv to run a program directly inside the namespace (no ssh)."""
        return ["ip", "netns", "exec", self.netns, *argv]

    @property
    def ssh_target(self) -> str:
        return f"{self.user}@{self.addr}"


def ssh_argv(host: NetnsHost) -> list[str]:
    """``ssh -i KEY -o BatchMode=yes ... -p PORT root@ADDR`` as a list (no remote command)."""
    return [
        "ssh",
        "-i", str(host.key),
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null",
        "-o", "LogLevel=ERROR",
        "-o", "IdentitiesOnly=yes",
        "-o", "ConnectTimeout=10",
        "-p", str(host.port),
        f"{host.user}@{host.addr}",
    ]  # fmt: skip


def write_ssh_config(hosts: Mapping[str, NetnsHost] | Iterable[NetnsHost], path: str | os.PathLike) -> Path:
    """Write an ssh_config with one ``Host <name>`` entry per host, for ``ssh -F path dgx1``."""
    items = list(hosts.values()) if isinstance(hosts, Mapping) else list(hosts)
    blocks = []
    for h in items:
        blocks.append(
            f"Host {h.name}\n"
            f"    HostName {h.addr}\n"
            f"    Port {h.port}\n"
            f"    User {h.user}\n"
            f"    IdentityFile {h.key}\n"
            f"    IdentitiesOnly yes\n"
            f"    BatchMode yes\n"
            f"    StrictHostKeyChecking no\n"
            f"    UserKnownHostsFile /dev/null\n"
            f"    LogLevel ERROR\n"
            f"    ConnectTimeout 10\n"
        )
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(blocks))
    return p


def _setenv_word(name: str, value: str) -> str:
    """NAME=VALUE as one word of an sshd_config line (double-quoted: sshd's own argv splitting)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or any(c in value for c in '"\\\n'):
        raise ValueError(f"cannot pass {name}={value!r} through sshd SetEnv")
    return f'"{name}={value}"'


def _sftp_server() -> str:
    for c in SFTP_SERVER_CANDIDATES:
        if os.access(c, os.X_OK):
            return c
    return "internal-sftp"


def _used_ipv4_networks() -> list[ipaddress.IPv4Network]:
    nets = []
    for argv in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        for tok in _run(argv, check=False).stdout.split():
            with contextlib.suppress(ValueError):
                if "/" in tok or re.fullmatch(r"\d+\.\d+\.\d+\.\d+", tok):
                    n = ipaddress.ip_network(tok, strict=False)
                    if isinstance(n, ipaddress.IPv4Network) and n.prefixlen > 0:
                        nets.append(n)
    return nets


def _pick_subnet() -> ipaddress.IPv4Network:
    used = _used_ipv4_networks()
    rng = random.SystemRandom()
    for _ in range(500):
        net = ipaddress.IPv4Network(f"10.{rng.randint(100, 254)}.{rng.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free 10.x.y.0/24 found for the test fleet")


_swept_this_process = False


class FleetNet:
    """One test session's network: bridge, /24 subnet, client key, temp root; hosts come and go.

    Use as a context manager (or call ``close()``); ``close`` tears everything down and is
    idempotent.  Host-level teardown: ``remove_host(host)`` or the ``host()`` context manager.
    """

    def __init__(self, tmp_root: str | os.PathLike | None = None, sweep: bool = True):
        global _swept_this_process
        reason = netns_skip_reason()
        if reason:
            raise RuntimeError(f"real fleet hosts unavailable: {reason}")
        if sweep and not _swept_this_process:
            sweep_stale(tmp_root)
            _swept_this_process = True
        self.pid = os.getpid()
        self.tag = secrets.token_hex(2)[:3]
        self.hosts: dict[str, NetnsHost] = {}
        self._mounts: list[tuple[Path, bool]] = []
        self._closed = False
        self.dir = Path(tempfile.mkdtemp(prefix=f"{PREFIX}-{self.pid}-", dir=tmp_root))
        self.bridge = ""
        try:
            self.subnet = _pick_subnet()
            self._hosts_iter = self.subnet.hosts()
            self.gateway = str(next(self._hosts_iter))  # .1 lives on the bridge, root namespace
            self.bridge = self._unique_link("b")
            _run(
                ["ip", "link", "add", "name", self.bridge, "type", "bridge", "stp_state", "0",
                 "forward_delay", "0", "nf_call_iptables", "0", "nf_call_ip6tables", "0",
                 "nf_call_arptables", "0"]
            )  # fmt: skip
            _run(["ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge])
            _run(["ip", "link", "set", self.bridge, "up"])
            self.key = self.dir / "id_ed25519"
            _run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sparkfleet-tests", "-f", str(self.key)]
            )
            self.authorized_keys = self.dir / "authorized_keys"
            shutil.copyfile(f"{self.key}.pub", self.authorized_keys)
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # Debian sshd's privsep dir
        except BaseException:
            self.close()
            raise

    # -- naming ----------------------------------------------------------------------------
    def _unique_link(self, kind: str) -> str:
        existing = set(link_names())
        for _ in range(100):
            name = f"{PREFIX}{kind}{self.pid}-{secrets.token_hex(2)[:3]}"
            if len(name) <= 15 and name not in existing:
                return name
        raise RuntimeError("could not pick a unique link name")

    # -- hosts -----------------------------------------------------------------------------
    def add_host(
        self, name: str, env: Mapping[str, str] | None = None, share_mounts: bool = False
    ) -> NetnsHost:
        """A new host; `env` is set in every ssh session on it (sshd `SetEnv`), the way a real host's
        environment tells its tools where things are (e.g. DOCKER_HOST of a test engine).

        `share_mounts`: start sshd with `nsenter --net` instead of `ip netns exec`, which gives it a
        mount namespace with a fresh /sys, hiding /sys/fs/cgroup (container engines need it)."""
        if self._closed:
            raise RuntimeError("FleetNet is closed")
        if name in self.hosts:
            raise ValueError(f"host {name!r} already exists")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,30}", name):
            raise ValueError(f"bad host name {name!r}")
        ns = f"{PREFIX}-{self.pid}-{secrets.token_hex(3)}-{name}"
        addr = str(next(self._hosts_iter))
        root = self.dir / name
        (root / "nvme").mkdir(parents=True)
        host_home = root / "home"
        host_home.mkdir()
        etc = root / ".sshd"
        etc.mkdir()
        host = NetnsHost(name=name, netns=ns, addr=addr, port=22, root=root, key=self.key, veth="")
        self.hosts[name] = host
        try:
            _run(["ip", "netns", "add", ns])
            host.veth = self._unique_link("v")
            _run(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
            _run(["ip", "link", "set", host.veth, "master", self.bridge])
            _run(["ip", "link", "set", host.veth, "up"])
            nsx = ["ip", "netns", "exec", ns]
            _run(nsx + ["ip", "link", "set", "lo", "up"])
            _run(nsx + ["ip", "addr", "add", f"{addr}/{self.subnet.prefixlen}", "dev", "eth0"])
            _run(nsx + ["ip", "link", "set", "eth0", "up"])
            _run(nsx + ["ip", "route", "add", "default", "via", self.gateway])

            hostkey = etc / "ssh_host_ed25519_key"
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"host-{name}", "-f", str(hostkey)])
            config = etc / "sshd_config"
            config.write_text(
                f"ListenAddress {addr}:22\n"
                f"HostKey {hostkey}\n"
                f"PidFile {etc / 'sshd.pid'}\n"
                f"AuthorizedKeysFile {self.authorized_keys}\n"
                "PermitRootLogin prohibit-password\n"
                "PubkeyAuthentication yes\n"
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                "UsePAM no\n"
                "StrictModes no\n"
                "UseDNS no\n"
                "PrintMotd no\n"
                "PrintLastLog no\n"
                "MaxStartups 100:30:200\n"
                "MaxSessions 100\n"
                "LogLevel ERROR\n"
                f"Subsystem sftp {_sftp_server()}\n"
                # the host's own home, not this machine's: a session's shell reads $HOME/.bashrc,
                # and this machine's (pyenv's `rehash` in it waits 60 s on a lock any killed session
                # leaves behind) made every later ssh session of a CI run hang.
                # One SetEnv line: sshd keeps the first SetEnv line it reads and ignores the rest.
                + "SetEnv "
                + " ".join(_setenv_word(k, v) for k, v in {"HOME": str(host_home), **(env or {})}.items())
                + "\n"
            )
            host.sshd_log = etc / "sshd.log"
            with open(host.sshd_log, "wb") as log:
                # ip netns exec -> unshare --uts -> sh -> exec sshd: all exec, so Popen.pid is sshd's pid
                enter = ["nsenter", f"--net=/run/netns/{ns}"] if share_mounts else nsx
                host._proc = subprocess.Popen(
                    enter + ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"',
                           name, SSHD, "-D", "-e", "-f", str(config)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                )  # fmt: skip
            host.sshd_pid = host._proc.pid
            try:
                wait_port(addr, 22, proc=host._proc)
            except Exception as e:
                log_text = host.sshd_log.read_text(errors="replace") if host.sshd_log.exists() else ""
                raise RuntimeError(f"sshd for {name} did not come up: {e}\n{log_text}") from e
        except BaseException:
            self.remove_host(host)
            raise
        return host

    def remove_host(self, host: NetnsHost | str) -> None:
        h = self.hosts.pop(host if isinstance(host, str) else host.name, None)
        if h is None:
            return
        errors = []
        try:
            _stop_popen(h._proc)
        except Exception as e:  # pragma: no cover
            errors.append(e)
        if h.netns in netns_list():
            for pid in netns_pids(h.netns):  # anything still inside (ssh session children etc.)
                _kill_pid(pid)
            cp = _run(["ip", "netns", "del", h.netns], check=False)
            if cp.returncode != 0:
                errors.append(RuntimeError(cp.stderr))
        if h.veth and h.veth in link_names():  # normally gone with the namespace
            _run(["ip", "link", "del", h.veth], check=False)
        # the host's directory tree goes with it (a later host may reuse the name)
        if not any(mp == str(h.root) or mp.startswith(f"{h.root}/") for _, mp, _ in mounts()):
            shutil.rmtree(h.root, ignore_errors=True)
        if errors:
            raise errors[0]

    @contextlib.contextmanager
    def host(self, name: str) -> Iterator[NetnsHost]:
        h = self.add_host(name)
        try:
            yield h
        finally:
            self.remove_host(h)

    def make_fleet(self, names: Iterable[str]) -> dict[str, NetnsHost]:
        return {n: self.add_host(n) for n in names}

    # -- mounts ----------------------------------------------------------------------------
    def unique_dir(self, stem: str) -> Path:
        d = Path(tempfile.mkdtemp(prefix=f"{stem}-", dir=self.dir))
        return d

    # -- teardown --------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        errors: list[BaseException] = []
        for h in list(self.hosts.values()):
            try:
                self.remove_host(h)
            except Exception as e:
                errors.append(e)
        # anything still mounted below our dir (a test that forgot a context manager)
        for _, mp, fstype in sorted(mounts(), key=lambda t: -len(t[1])):
            if mp.startswith(str(self.dir) + "/"):
                with contextlib.suppress(Exception):
                    _unmount(mp, fuse=fstype.startswith("fuse"))
        if self.bridge and self.bridge in link_names():
            _run(["ip", "link", "del", self.bridge], check=False)
        if not any(mp.startswith(str(self.dir) + "/") for _, mp, _ in mounts()):
            shutil.rmtree(self.dir, ignore_errors=True)
        if errors:
            raise errors[0]

    def __enter__(self) -> FleetNet:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def fleet_session(tmp_root: str | os.PathLike | None = None) -> Iterator[FleetNet]:
    """Context manager: a FleetNet torn down on exit (even on error)."""
    net = FleetNet(tmp_root)
    try:
        yield net
    finally:
        net.close()


# --------------------------------------------------------------------------------------------
# mounts
# --------------------------------------------------------------------------------------------


def _session_tmp(stem: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}-{os.getpid()}-{stem}-"))


@contextlib.contextmanager
def sshfs_mount(
    host: NetnsHost,
    remote_path: str | os.PathLike,
    mountpoint: str | os.PathLike | None = None,
    read_only: bool = True,
    extra_opts: Iterable[str] = (),
    timeout: float = 20.0,
) -> Iterator[Path]:
    """Mount ``host:remote_path`` over real sshfs (FUSE), read-only by default; yields the mountpoint.

    ``mountpoint`` None -> a fresh unique directory ``<tmp>/sf-<pid>-sshfs-*/mnt`` (removed afterwards).
    The sshfs process runs in the foreground under Popen and is stopped by PID after unmount.
    """
    reason = fuse_skip_reason()
    if reason:
        raise RuntimeError(f"sshfs unavailable: {reason}")
    own_dir, mp = _mountpoint("sshfs", mountpoint)
    opts = [
        f"IdentityFile={host.key}",
        "IdentitiesOnly=yes",
        "BatchMode=yes",
        "StrictHostKeyChecking=no",
        "UserKnownHostsFile=/dev/null",
        "LogLevel=ERROR",
        f"port={host.port}",
        *extra_opts,
    ]
    if read_only:
        opts.insert(0, "ro")
    argv = ["sshfs", "-f", "-o", ",".join(opts), f"{host.user}@{host.addr}:{remote_path}", str(mp)]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        while not is_mounted(mp):
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"sshfs exited with {proc.returncode}: {err.strip()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"sshfs mount of {host.name}:{remote_path} at {mp} timed out")
            time.sleep(0.05)
        yield mp
    finally:
        try:
            _unmount(mp, fuse=True)
        finally:
            _stop_popen(proc)
            for s in (proc.stdout, proc.stderr):
                if s:
                    s.close()
            if own_dir is not None and not is_mounted(mp):
                shutil.rmtree(own_dir, ignore_errors=True)


def _mountpoint(kind: str, mountpoint: str | os.PathLike | None) -> tuple[Path | None, Path]:
    """(the private dir we made for it, or None; the resolved mountpoint, created)."""
    if mountpoint is None:
        own_dir = _session_tmp(kind)
        (own_dir / "mnt").mkdir()
        return own_dir, Path(os.path.realpath(own_dir / "mnt"))
    mp = Path(mountpoint)
    mp.mkdir(parents=True, exist_ok=True)
    return None, Path(os.path.realpath(mp))


@contextlib.contextmanager
def tmpfs_mount(
    size_bytes: int, mountpoint: str | os.PathLike | None = None, options: str = ""
) -> Iterator[Path]:
    """A size-limited tmpfs (``mount -t tmpfs -o size=N``) at a unique mountpoint; unmounted after.

    The kernel rounds the size up to whole pages. `options` adds mount options (``nr_inodes=64``).
    """
    if size_bytes <= 0:
        raise ValueError("size_bytes must be positive")
    own_dir, mp = _mountpoint("tmpfs", mountpoint)
    extra = f",{options}" if options else ""
    _run(["mount", "-t", "tmpfs", "-o", f"size={int(size_bytes)},mode=0755{extra}", "tmpfs", str(mp)])
    try:
        yield mp
    finally:
        try:
            _unmount(mp)
        finally:
            if own_dir is not None and not is_mounted(mp):
                shutil.rmtree(own_dir, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# link shaping (tc)
# --------------------------------------------------------------------------------------------


def tc_skip_reason() -> str | None:
    """Why links cannot be shaped here, or None if they can (needs `tc` from iproute2 and sch_tbf)."""
    if shutil.which("tc") is None:
        return "`tc` not found on PATH (Debian package iproute2)"
    return None


def tbf_burst_bytes(rate_bit: int) -> int:
    """A token-bucket depth that lets tbf reach `rate_bit`: >= rate/HZ (HZ up to 1000) and >= 64 KiB."""
    return max(rate_bit // 8 // 100, 64 * 1024)


def shape_egress(host: NetnsHost, rate_bit: int) -> str:
    """Limit what `host` sends on its eth0 to `rate_bit` bit/s with a token bucket (tbf).

    Egress of the host's own leg is the link as its peers see it: shaping the NAS's eth0 makes one
    shared NAS link for every client, like a NAS on one 10 GbE port. (netem would add delay, but
    this kernel has no sch_netem; tbf is what the runs here use.) Returns the tc command, for the
    benchmark's record. Replaces a root qdisc we set before; `unshape` removes it.
    """
    if rate_bit <= 0:
        raise ValueError("rate_bit must be positive")
    argv = ["tc", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "tbf", "rate", f"{int(rate_bit)}bit"]
    argv += ["burst", str(tbf_burst_bytes(rate_bit)), "latency", "100ms"]
    unshape(host)
    _run(host.exec_argv(*argv))
    return " ".join(argv)


def unshape(host: NetnsHost) -> None:
    """Remove our root qdisc from the host's eth0 (no error when there is none or the host is gone)."""
    _run(host.exec_argv("tc", "qdisc", "del", "dev", "eth0", "root"), check=False)


def qdisc_kinds(host: NetnsHost) -> list[str]:
    """The qdisc kinds on the host's eth0, root first (e.g. ["tbf"], or ["noqueue"] unshaped)."""
    out = _run(host.exec_argv("tc", "-j", "qdisc", "show", "dev", "eth0")).stdout
    return [q["kind"] for q in json.loads(out or "[]")]


@contextlib.contextmanager
def shaped(host: NetnsHost, rate_bit: int) -> Iterator[NetnsHost]:
    """`shape_egress` for the duration of a with-block; the qdisc is removed even when the body fails."""
    shape_egress(host, rate_bit)
    try:
        yield host
    finally:
        unshape(host)


# --------------------------------------------------------------------------------------------
# pytest fixtures (exposed through tests/conftest.py)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fleetnet() -> Iterator[FleetNet]:
    """Session-wide FleetNet (bridge + /24 + client key); skips the test if netns is unavailable."""
    reason = netns_skip_reason()
    if reason:
        pytest.skip(f"netns: {reason}")
    with fleet_session() as net:
        yield net


@pytest.fixture
def fleet_hosts(fleetnet: FleetNet) -> Iterator[Callable[[Iterable[str]], dict[str, NetnsHost]]]:
    """Factory: ``make_fleet(["dgx1", "dgx2"]) -> {"dgx1": NetnsHost, ...}``; hosts die with the test."""
    created: list[NetnsHost] = []

    def make_fleet(names: Iterable[str]) -> dict[str, NetnsHost]:
        out = {}
        for n in names:
            h = fleetnet.add_host(n)
            created.append(h)
            out[n] = h
        return out

    try:
        yield make_fleet
    finally:
        errors = []
        for h in reversed(created):
            try:
                fleetnet.remove_host(h)
            except Exception as e:
                errors.append(e)
        if errors:
            raise errors[0]


@pytest.fixture
def nas_host(fleetnet: FleetNet) -> Iterator[NetnsHost]:
    """A host named "nas" with an empty ``<root>/share`` directory (``nas_host.root / "share"``)."""
    with fleetnet.host("nas") as h:
        (h.root / "share").mkdir()
        yield h


@pytest.fixture
def ssh_config(
    fleetnet: FleetNet, tmp_path: Path
) -> Callable[[Mapping[str, NetnsHost] | Iterable[NetnsHost]], Path]:
    """Factory: ``ssh_config(hosts) -> Path`` of an ssh_config for ``ssh -F path dgx1``."""

    def write(hosts: Mapping[str, NetnsHost] | Iterable[NetnsHost]) -> Path:
        return write_ssh_config(hosts, tmp_path / f"ssh_config-{secrets.token_hex(3)}")

    return write


@pytest.fixture
def tmpfs() -> Iterator[Callable[[int], Path]]:
    """Factory: ``tmpfs(size_bytes) -> Path`` of a fresh size-limited tmpfs, unmounted after the test."""
    reason = tmpfs_skip_reason()
    if reason:
        pytest.skip(f"tmpfs: {reason}")
    with contextlib.ExitStack() as stack:
        yield lambda size_bytes, options="": stack.enter_context(tmpfs_mount(size_bytes, options=options))


@pytest.fixture
def sshfs() -> Iterator[Callable[..., Path]]:
    """Factory: ``sshfs(host, remote_path, mountpoint=None, read_only=True) -> Path``; unmounted after."""
    reason = fuse_skip_reason()
    if reason:
        pytest.skip(f"fuse: {reason}")
    with contextlib.ExitStack() as stack:
        yield lambda host, remote_path, mountpoint=None, **kw: stack.enter_context(
            sshfs_mount(host, remote_path, mountpoint, **kw)
        )
