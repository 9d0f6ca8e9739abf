"""Peers as byte sources: rsync over SSH from a host that already holds a file, verified here.

A file under its final name on a peer's local hub is verified (our writer publishes nothing
else), so a peer is as good a source as the NAS — but the bytes arriving are still checked
against the NAS's copy (sampled windows) or the content address (full) before they are published.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import SourceError


@dataclass(frozen=True)
class PeerSource:
    """A fleet host to pull files from: its name, its local hub, and the ssh argv that reaches it."""

    name: str
    hub: Path
    ssh: tuple[str, ...]  # e.g. ("ssh", "-o", "BatchMode=yes", "-p", "22", "-l", "kilork")
    address: str

    def rsync_argv(self, rel: str, tmp: Path) -> list[str]:
        return [
            "rsync",
            "--times",
            "--timeout=60",
            "-e",
            shlex.join(self.ssh),
            f"{self.address}:{self.hub / rel}",
            str(tmp),
        ]

    def fill(self, rel: str, tmp: Path, timeout: float | None = None) -> None:
        """Fetch `rel` from the peer into `tmp` (which must not exist yet)."""
        argv = self.rsync_argv(rel, tmp)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise SourceError(f"pull of {rel} from {self.name} failed (rsync exit {proc.returncode}): {tail}")
