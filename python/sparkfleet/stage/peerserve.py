"""Serving this host's hub to its lane peers for one fan-out run: rsync's daemon, fenced in.

The `rsyncd` peer transport (transport.py) skips ssh's per-byte crypto on the private fabric.
What keeps that safe enough (SECURITY.md, "Peer transport"):
  - bound to this host's fabric address only, never 0.0.0.0; `hosts allow` = the lane's fabric
    addresses, everything else denied;
  - one module, read-only, no listing, `.locks/` and `*.incomplete` excluded, no chroot needed
    because nothing is writable and the daemon runs as the staging user;
  - one secret per run, made by the coordinator and handed over on stdin; it lives in a 0600 file
    in a private 0700 directory for the daemon's lifetime and is removed with it;
  - the daemon lives exactly as long as the coordinator's connection: stdin closing stops it
    (by PID), so a dead coordinator leaves no listener behind;
  - and no longer than the process that started it: PR_SET_PDEATHSIG kills it when that process
    dies, `kill -9` included (it would otherwise keep listening with PPID 1); the private
    directory names its owner (PID + start time + boot), and the next run removes every
    leftover whose owner is gone (killing its daemon by PID + start time if one still runs);
  - whatever a peer sends is still checked against the blob's sha256 name before it is published.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..base import procs
from ..base.atomic import write_bytes
from ..base.errors import SparkfleetError
from ..base.http import free_port
from ..remote.hosts import stop_process
from .transport import RSYNCD_MODULE, RSYNCD_USER

PRIVATE_PREFIX = "sparkfleet-rsyncd-"
OWNER_FILE = "owner.json"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass(frozen=True)
class DaemonSpec:
    """Where and what to serve: the hub, the fabric address to bind, the peers allowed in."""

    hub: Path
    address: str
    allow: tuple[str, ...]

    def config(self, secrets_file: Path, port: int) -> str:
        """rsyncd.conf for this run (pure; tested). Every value is ours or an inventory address."""
        for value in (str(self.hub), self.address, *self.allow):
            if any(c in value for c in "\n\r#;") or value != value.strip():
                raise SparkfleetError(f"refusing to write {value!r} into an rsyncd config")
        allow = " ".join(self.allow)
        return (
            f"address = {self.address}\n"
            f"port = {port}\n"
            "use chroot = no\n"
            "max connections = 64\n"
            "reverse lookup = no\n"
            "timeout = 120\n"
            f"uid = {os.getuid()}\n"  # run as the staging user (as root rsyncd would switch to nobody)
            f"gid = {os.getgid()}\n"
            f"[{RSYNCD_MODULE}]\n"
            f"    path = {self.hub}\n"
            "    read only = yes\n"
            "    write only = no\n"
            "    list = no\n"
            f"    auth users = {RSYNCD_USER}:ro\n"
            f"    secrets file = {secrets_file}\n"
            "    strict modes = yes\n"
            f"    hosts allow = {allow}\n"
            "    hosts deny = *\n"
            "    exclude = .locks/ *.incomplete *.sf-tmp-*\n"
            "    refuse options = delete remove-source-files\n"
        )


def _wait_listening(address: str, port: int, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=0.5):
            return True
        time.sleep(0.05)
    return False


def die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn: the child gets SIGKILL the moment the process that started it dies.

    prctl is looked up here, in the parent, so the child between fork and exec only makes the
    one call; a parent that died before the call is caught by the getppid check. None where there
    is no prctl (not Linux: the hosts this serves from always are).
    """
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        if prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != parent:
            os._exit(127)

    return preexec


def _alive(who: object) -> bool:
    """The very process `who` names still runs (same boot, same start time: not a recycled PID)."""
    if not isinstance(who, dict) or not isinstance(who.get("pid"), int) or who["pid"] <= 0:
        return False
    return procs.same_process(who["pid"], who.get("start_ticks"), who.get("boot_id"))


def sweep_leftovers(tmp: Path | None = None) -> list[Path]:
    """Remove the private directories of runs that died without cleaning up (`kill -9`).

    A directory is ours only when it is a real directory owned by this user whose owner file
    names a process (PID + start time + boot) that is gone: never by its name alone. A daemon it
    names that still runs (one started before parent-death signals) is killed by that identity.
    """
    removed: list[Path] = []
    base = tmp or Path(tempfile.gettempdir())
    for d in base.glob(PRIVATE_PREFIX + "*"):
        try:
            st = d.lstat()
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue
            owner = json.loads((d / OWNER_FILE).read_text())
        except (OSError, ValueError, RecursionError):
            continue  # not ours to judge: no owner we can read
        if not isinstance(owner, dict) or _alive(owner.get("owner")):
            continue
        daemon = owner.get("daemon")
        if _alive(daemon):
            with contextlib.suppress(OSError):
                os.kill(daemon["pid"], signal.SIGKILL)
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


@contextlib.contextmanager
def serve(spec: DaemonSpec, secret: str, timeout: float = 10.0) -> Iterator[tuple[int, int]]:
    """Run `rsync --daemon --no-detach` for the duration of the block; yields (port, pid).

    Stopped by its PID (SIGTERM, then SIGKILL) and its private directory removed, even on error.
    """
    if not secret or "\n" in secret:
        raise SparkfleetError("rsyncd needs a one-line secret")
    if shutil.which("rsync") is None:
        raise SparkfleetError("rsync is not installed on this host", hint="install rsync (Debian: rsync)")
    sweep_leftovers()
    private = Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX))  # 0700 by mkdtemp
    proc: subprocess.Popen | None = None
    owner = {"owner": procs.identity(os.getpid())}
    try:
        write_bytes(private / OWNER_FILE, json.dumps(owner).encode(), mode=0o600)  # before the secret
        secrets_file = private / "secrets"
        fd = os.open(secrets_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{RSYNCD_USER}:{secret}\n")
        for _attempt in range(5):  # the port may be taken between probing and binding: try another
            port = free_port(spec.address)
            conf = private / "rsyncd.conf"
            conf.write_text(spec.config(secrets_file, port))
            proc = subprocess.Popen(
                ["rsync", "--daemon", "--no-detach", f"--config={conf}", f"--log-file={private / 'log'}"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                preexec_fn=die_with_parent(),  # noqa: PLW1509 - one prctl call, resolved before fork
            )
            if _wait_listening(spec.address, port, proc, timeout):
                owner["daemon"] = procs.identity(proc.pid)
                write_bytes(private / OWNER_FILE, json.dumps(owner).encode(), mode=0o600)
                break
            _stop(proc)
            proc = None
        if proc is None:
            log = (private / "log").read_text(errors="replace") if (private / "log").exists() else ""
            raise SparkfleetError(
                f"rsync daemon did not start on {spec.address}", hint=log.strip()[-300:] or None
            )
        yield port, proc.pid
    finally:
        _stop(proc)
        shutil.rmtree(private, ignore_errors=True)


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is not None:
        stop_process(proc)
