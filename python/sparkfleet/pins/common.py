"""What every pin kind shares: errors, endpoints, the per-pin state record, running tools, Nix hashes.

Split out of the old single pins module so each source kind (git, oci, hf, url) lives in its
own module and the verify loop (`pins.resolve_verify`) only dispatches.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import SparkfleetError
from ..fleet.inventory import Pin

HTTP_TIMEOUT_S = 30
GIT_TIMEOUT_S = 600
HEX = re.compile(r"[0-9a-f]+")


class PinError(SparkfleetError):
    """A pin could not be resolved or verified (the source disagrees, or cannot be asked)."""


class Unreachable(PinError):
    """The source could not be asked (network, auth, missing tool): never read as 'ok'."""


@dataclass(frozen=True)
class Endpoints:
    """Where pins are resolved. Defaults are the public services; env and options override them."""

    git_base: str = "https://github.com"
    registry: str | None = None  # None: derived from the image name (Docker Hub for bare names)
    hf: str = "https://huggingface.co"


@dataclass(frozen=True)
class PinState:
    """What one pin's source says now, next to what the inventory records."""

    name: str
    kind: str
    source: str
    recorded: str
    status: str  # resolved | unchanged | ok | drift | unresolved | unreachable
    current: str | None = None
    nix_hash: str | None = None
    recorded_nix_hash: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("resolved", "unchanged", "ok")


@dataclass(frozen=True)
class PinReport:
    """The outcome of `pins resolve` or `pins verify` over the selected pins."""

    action: str
    fleet_file: Path
    pins: tuple[PinState, ...]
    written: bool = False

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.pins)


# ---- tools ------------------------------------------------------------------------------------


def run_tool(argv: list[str], *, timeout: float = GIT_TIMEOUT_S, cwd: Path | None = None) -> str:
    """Run a tool (argv list, no shell); a failure is Unreachable carrying the tool's stderr tail."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/false"}
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env, check=False
        )
    except FileNotFoundError:
        raise Unreachable(
            f"{argv[0]} is not installed", hint=f"install {argv[0]} or run where it is"
        ) from None
    except subprocess.TimeoutExpired:
        raise Unreachable(f"{argv[0]} timed out after {timeout:.0f} s") from None
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-3:]
        raise Unreachable(f"{' '.join(argv[:2])} failed: {' / '.join(tail) or f'exit {proc.returncode}'}")
    return proc.stdout


def nix_hash_path(path: Path) -> str:
    """The NAR hash (SRI) Nix records for a fetched tree, computed by Nix itself."""
    out = run_tool(
        ["nix", "--extra-experimental-features", "nix-command", "hash", "path", "--type", "sha256", str(path)]
    )
    return out.strip()


def sri_of_hex(hexdigest: str) -> str:
    return "sha256-" + base64.b64encode(bytes.fromhex(hexdigest)).decode()


# ---- the state record every resolver returns ---------------------------------------------------


def pin_state(pin: Pin, status: str, **kw: object) -> PinState:
    return PinState(
        name=pin.name,
        kind=pin.kind,
        source=pin.source,
        recorded=pin.value,
        status=status,
        recorded_nix_hash=pin.nix_hash,
        **kw,  # type: ignore[arg-type]
    )
