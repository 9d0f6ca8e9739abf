"""A real, modern Nix for the tests: Debian trixie's nix-bin (2.26) in the chroot `make nix-chroot`
builds (.nix-chroot, or $SPARKFLEET_NIX_CHROOT).

Debian bookworm's nix 2.8 cannot evaluate this flake, so every `nix flake ...` and every sandboxed
build runs here instead. Each call runs in a private mount namespace (`unshare --mount`): /proc,
/dev, the caller's store folder at /nix and each folder the call names at its own path are mounted
there and vanish with the process, so the chroot's tree never changes and no mount outlives a
test. The store is the caller's (a session folder), never the chroot's. The tree becomes the root
by pivot_root, not chroot: the kernel refuses user namespaces to a chrooted process, and Nix's
sandbox (on, with no fallback) needs one to build as root without build users.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .inputs import REPO

CHROOT = Path(os.environ.get("SPARKFLEET_NIX_CHROOT") or REPO / ".nix-chroot")
# The chroot's own folders that the calls' folders must not hide.
SYSTEM_TOPS = frozenset(
    {"bin", "boot", "dev", "etc", "lib", "lib64", "nix", "proc", "sbin", "sys", "usr", "var"}
)
CONFIG = "\n".join([
    "experimental-features = nix-command flakes",
    "sandbox = true",
    # a sandbox that cannot be set up is an error, never a silent unsandboxed build
    "sandbox-fallback = false",
    # root without the nixbld group: Nix builds as root inside the sandbox's namespaces
    "build-users-group =",
    "substituters =",
    "max-jobs = 2",
])  # fmt: skip


def missing() -> str | None:
    """Why the real Nix cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "the Nix chroot needs root (unshare --mount, chroot)"
    if not (CHROOT / "usr" / "bin" / "nix").is_file():
        return f"no Nix chroot at {CHROOT} (make nix-chroot builds it)"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    return None


@dataclass(frozen=True)
class RealNix:
    """Nix 2.26 in the chroot, with `store` (a host folder) as its /nix."""

    store: Path

    def run(
        self,
        argv: list[str],
        *,
        binds: tuple[Path, ...] = (),
        timeout: float = 300,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """`argv` inside the chroot; each of `binds` (host folders) is visible there at its own path."""
        self.store.mkdir(parents=True, exist_ok=True)
        root = shlex.quote(str(CHROOT))
        lines = [
            "set -e",
            # the chroot a mount point of its own: Nix's sandbox makes / private and remounts /proc
            f"mount --bind {root} {root}",
            f"mount -t proc proc {root}/proc",
            f"mount --rbind /dev {root}/dev",
            f"mount --bind {shlex.quote(str(self.store))} {root}/nix",
        ]
        # /root (Nix's caches) and /tmp (build folders) are the call's own too
        tops = sorted({"root", "tmp", *(Path(b).resolve().parts[1] for b in binds)})
        for top in tops:
            if top in SYSTEM_TOPS:
                raise ValueError(f"a folder under /{top} would hide the chroot's own /{top}")
            lines += [f"mkdir -p {root}/{top}", f"mount -t tmpfs tmpfs {root}/{top}"]
        for folder in binds:
            path = shlex.quote(str(Path(folder).resolve()))
            lines += [f"mkdir -p {root}{path}", f"mount --bind {path} {root}{path}"]
        variables = {"HOME": "/root", "PATH": "/usr/bin:/bin", "NIX_CONFIG": CONFIG, **(env or {})}
        assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in variables.items())
        # pivot_root rather than chroot: the kernel refuses a user namespace to a chrooted process,
        # and Nix's sandbox needs one when it builds as root without build users
        lines += [f"cd {root}", "pivot_root . mnt", "cd /", "umount -l /mnt"]
        lines.append(f"exec env -i {assignments} " + " ".join(map(shlex.quote, argv)))
        return subprocess.run(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--fork",
                "--kill-child",
                "sh",
                "-c",
                "\n".join(lines),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def eval_json(self, expr: str, *, binds: tuple[Path, ...] = (), timeout: float = 300) -> object:
        """`nix-instantiate --eval --strict --json --expr EXPR`; Nix's own error as NixError."""
        proc = self.run(
            ["nix-instantiate", "--eval", "--strict", "--json", "--expr", expr], binds=binds, timeout=timeout
        )
        if proc.returncode != 0:
            raise NixError(proc.stderr)
        return json.loads(proc.stdout)

    def version(self) -> tuple[int, int]:
        out = self.run(["nix", "--version"]).stdout
        found = re.search(r"(\d+)\.(\d+)", out)
        assert found, out
        return int(found.group(1)), int(found.group(2))


class NixError(Exception):
    """The chroot's Nix refused (its stderr is the message)."""
