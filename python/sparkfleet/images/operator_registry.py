"""The operator's client of the fleet registry, as `image push` and `release cut` both reach it."""

from __future__ import annotations

from pathlib import Path

from ..base.paths import operator_state_dir
from .record import registry_trust_dir
from .registry import Registry
from .registry_auth import auth_path, push_endpoint
from .registry_host import split_address


def open_registry(address: str, cert_dir: Path | None, push_auth: Path | None) -> Registry:
    """The registry at `address` (HOST:PORT), trusted through `cert_dir` (else the fleet CA `registry
    init` made) and logged in with `push_auth` (else the login beside it)."""
    split_address(address, "--registry")  # HOST:PORT, before any of it reaches skopeo or a record
    authfile = push_auth or auth_path(operator_state_dir())
    return Registry(address, cert_dir or registry_trust_dir(), push_endpoint(authfile), authfile)
