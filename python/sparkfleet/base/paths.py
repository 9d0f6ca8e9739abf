"""Where the operator's side keeps its state: one answer for every verb and service.

Image and push records, the registry's CA and logins, the gateway's and the view's state all live
under this one directory, so that setting $SPARKFLEET_STATE_DIR moves all of them together.
"""

from __future__ import annotations

import os
from pathlib import Path

STATE_ENV = "SPARKFLEET_STATE_DIR"


def operator_state_dir() -> Path:
    """Operator-side state: $SPARKFLEET_STATE_DIR, else $XDG_STATE_HOME/sparkfleet (~/.local/state).

    Never the fleet root: under `nix run` that is a read-only store path.
    """
    env = os.environ.get(STATE_ENV)
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg) / "sparkfleet"


GATEWAY_STATE_ENV = "SPARKFLEET_GATEWAY_STATE"  # where `gateway up` keeps its key, config, record and log


def gateway_state_dir() -> Path:
    """The gateway's own state dir when $SPARKFLEET_GATEWAY_STATE and --state-dir name none."""
    return operator_state_dir() / "gateway"
