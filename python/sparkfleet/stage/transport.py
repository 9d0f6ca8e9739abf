"""Peers as byte sources: rsync from a host that already holds a file, verified here on arrival.

A file under its final name on a peer's local hub is verified (our writer publishes nothing
else), so a peer is as good a source as the NAS — but the bytes arriving are still checked
before they are published: a sha256-named blob by hashing it here, anything else against the
NAS's copy (stage/verify.py, `arrival_mode`).

How the bytes travel between hosts (`--peer-transport`, measured in benchmarks/fanout_bench.py;
the threat model is SECURITY.md's "Peer transport"). `auto`, the default, is rsyncd when every
lane host declares its fabric_ip (the measured fastest, fenced to the fabric), else ssh-fast:
  ssh       rsync over OpenSSH with the operator's own ssh settings (cipher included).
  ssh-fast  the same, asking for AES-GCM first (hardware AES on x86 and on the GB10's Arm cores),
            then chacha20-poly1305; still encrypted and authenticated end to end.
  rsyncd    rsync's own daemon protocol over plain TCP on the fabric: each host serves its hub
            read-only for this run only, bound to its fabric address, allowing only the lane's
            fabric addresses, with a one-time secret (rsync challenge-response auth). The bytes
            are not encrypted or MAC'd in flight, so only sha256-named blobs (checked against
            their name on arrival) are taken this way; other files come from the NAS.
A peer whose hub is on this very machine (every host of the demo fleet is loopback) is read in
place (`local`): no transport at all, and the bytes are verified on arrival as any peer's are.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import SourceError
from .copy import fill_from_path

TRANSPORTS = ("ssh", "ssh-fast", "rsyncd")
LOCAL = "local"  # not a choice: what a peer on this same machine is read with
AUTO = "auto"
DEFAULT_TRANSPORT = AUTO
FAST_CIPHERS = "aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com"
RSYNCD_MODULE = "hub"
RSYNCD_USER = "sparkfleet-peer"
SECRET_ENV = "RSYNC_PASSWORD"  # how rsync's client takes the secret: environment, never argv


def resolve_transport(choice: str, fabric_declared: bool) -> str:
    """The concrete transport for `choice`: `auto` is rsyncd on a declared fabric, else ssh-fast."""
    if choice != AUTO:
        return choice
    return "rsyncd" if fabric_declared else "ssh-fast"


class PeerMiss(SourceError):
    """The peer is up but does not hold the file (yet): a tree parent still pulling it. Not a fault."""


@dataclass(frozen=True)
class PeerSource:
    """A fleet host to pull files from: its name, its local hub, and how to reach it.

    `ssh` is the ssh argv prefix (ssh transports); `port`/`secret` reach its rsync daemon (rsyncd).
    """

    name: str
    hub: Path
    ssh: tuple[str, ...]  # e.g. ("ssh", "-o", "BatchMode=yes", "-p", "22", "-l", "kilork")
    address: str
    transport: str = "ssh"
    port: int | None = None
    secret: str | None = None

    def __post_init__(self) -> None:
        if self.transport not in (*TRANSPORTS, LOCAL):
            raise ValueError(f"unknown peer transport {self.transport!r} (one of {', '.join(TRANSPORTS)})")
        if self.transport == "rsyncd" and (self.port is None or not self.secret):
            raise ValueError(f"peer {self.name}: rsyncd needs the daemon's port and this run's secret")

    @property
    def protects_bytes(self) -> bool:
        """Whether the transport itself authenticates the bytes (ssh does; plain TCP does not)."""
        return self.transport != "rsyncd"

    def rsync_argv(self, rel: str, tmp: Path) -> list[str]:
        argv = ["rsync", "--times", "--timeout=60"]
        if self.transport == "rsyncd":
            host = f"[{self.address}]" if ":" in self.address else self.address
            return [*argv, f"rsync://{RSYNCD_USER}@{host}:{self.port}/{RSYNCD_MODULE}/{rel}", str(tmp)]
        ssh = list(self.ssh)
        if self.transport == "ssh-fast":
            ssh[1:1] = ["-c", FAST_CIPHERS, "-o", "Compression=no"]
        return [*argv, "-e", shlex.join(ssh), f"{self.address}:{self.hub / rel}", str(tmp)]

    def env(self) -> dict[str, str] | None:
        """The environment for the rsync client: the secret rides here, never on the argv."""
        if self.transport != "rsyncd":
            return None
        return {**os.environ, SECRET_ENV: self.secret or ""}

    def fill(self, rel: str, tmp: Path, timeout: float | None = None) -> None:
        """Fetch `rel` from the peer into `tmp` (which must not exist yet)."""
        if self.transport == LOCAL:
            self._fill_local(rel, tmp)
            return
        argv = self.rsync_argv(rel, tmp)
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=self.env()
        )
        if proc.returncode == 23 and "No such file or directory" in proc.stderr:
            raise PeerMiss(f"{self.name} does not hold {rel} yet")
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise SourceError(f"pull of {rel} from {self.name} failed (rsync exit {proc.returncode}): {tail}")

    def _fill_local(self, rel: str, tmp: Path) -> None:
        """Copy `rel` from a hub on this machine; a file not under its final name yet is a miss."""
        wanted = self.hub / rel
        source = Path(os.path.realpath(wanted.parent)) / wanted.name  # open_source wants no link above
        try:
            st = source.lstat()
        except FileNotFoundError:
            raise PeerMiss(f"{self.name} does not hold {rel} yet") from None
        if not stat.S_ISREG(st.st_mode):
            raise PeerMiss(f"{self.name} holds no regular file at {rel}")
        fill_from_path(source, st.st_size, lambda n: None, (st.st_dev, st.st_ino, st.st_size))(tmp)
