"""What a deploy leaves on a host, as the operator-side commands see it.

`deploy .#HOST` (deploy-rs) activates the `sparkfleet` profile at /nix/var/nix/profiles/sparkfleet:
the tooling in its bin/ and, in share/sparkfleet/, the fleet's spec (hosts/fleet.toml + recipes)
as a content-addressed store path. The flake's apps (`nix run .#stage -- dgx1`) point
SPARKFLEET_REMOTE at that bin/ and SPARKFLEET_REMOTE_ROOT at the same store path of the fleet
they were built from: it exists on a host exactly when the host was deployed from the same fleet
file and recipes. When either is missing there, the operator gets one error saying what to do.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..base.errors import ExitCode, SparkfleetError

PROFILE = "/nix/var/nix/profiles/sparkfleet"
REMOTE_ROOT_ENV = "SPARKFLEET_REMOTE_ROOT"

# what a remote shell says when the program it was asked to run is not there
_MISSING = re.compile(r"(command not found|No such file or directory|not found)")


class NotDeployed(SparkfleetError):
    """The host lacks the deployed tooling or the fleet spec the operator's command names."""


def remote_root(local_root: Path) -> Path:
    """The fleet root a host reads: $SPARKFLEET_REMOTE_ROOT (the deployed spec) or the local root."""
    value = os.environ.get(REMOTE_ROOT_ENV)
    return Path(value) if value else local_root


def not_deployed(host: str, program: str, output: list[str], root: Path | None = None) -> NotDeployed | None:
    """The clear error when `output` (a remote run's stderr/stdout lines) shows that `program` or
    the fleet root is missing on `host`; None when it shows something else."""
    # the same words as launch's agent error (launch/lane.py), so every verb says it one way
    fix = f"deploy it first: `sparkfleet bootstrap {host}` once, then `deploy .#{host}`"
    for line in output:
        if program in line and _MISSING.search(line):
            return NotDeployed(
                f"{host}: sparkfleet is not installed there ({program}: command not found)",
                hint=fix,
                exit_code=ExitCode.REFUSED,
            )
        if root is not None and str(root) in line and _MISSING.search(line):
            return NotDeployed(
                f"{host}: this fleet (hosts/fleet.toml + recipes, {root}) was not deployed there",
                hint=f"the host runs another deploy of the fleet: `deploy .#{host}`",
                exit_code=ExitCode.REFUSED,
            )
    return None
