"""Shared helpers for the Nix tests: evaluate expressions with Debian's nix-instantiate (no nixpkgs).

Every test here carries the `nix` marker and skips with a reason when nix-instantiate is missing.
Tests that need nixpkgs' `lib` (lib.evalModules) read it from tests/nix/inputs.py ($NIXPKGS_LIB, else
the nixpkgs.lib bundle of the Nix inputs folder) and skip naming what is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from . import realnix
from .inputs import nixpkgs_lib, nixpkgs_lib_missing
from .realnix import RealNix

REPO = Path(__file__).resolve().parents[2]
FLEET_LIB = REPO / "modules" / "lib" / "fleet.nix"

requires_nix = pytest.mark.skipif(
    shutil.which("nix-instantiate") is None,
    reason="nix-instantiate not installed (make test installs nix-bin)",
)


requires_nixpkgs_lib = pytest.mark.skipif(nixpkgs_lib() is None, reason=nixpkgs_lib_missing())


def nix_eval(expr: str, *, strict: bool = True, timeout: float = 60, write_store: bool = False) -> Any:
    """Evaluate a Nix expression to JSON; a failed evaluation raises NixEvalError with Nix's message.

    write_store: really copy the paths the expression makes (builtins.path) into /nix/store, so a
    test can read them, instead of only computing their names.
    """
    argv = ["nix-instantiate", "--eval", "--json", "--expr", expr]
    if strict:
        argv.insert(2, "--strict")
    if write_store:
        argv.insert(2, "--read-write-mode")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise NixEvalError(proc.stderr)
    return json.loads(proc.stdout)


class NixEvalError(Exception):
    """nix-instantiate refused the expression (its stderr is the message)."""


def store_writable() -> bool:
    """Whether this user may add paths to /nix/store (root with Debian's single-user nix)."""
    store = Path("/nix/store")
    return store.is_dir() and os.access(store, os.W_OK)


def nix_str(value: str | Path) -> str:
    """A Nix string literal for `value`."""
    return json.dumps(str(value)).replace("${", "\\${")


@pytest.fixture(scope="session")
def real_nix(tmp_path_factory: pytest.TempPathFactory) -> RealNix:
    """Nix 2.26 in the chroot, with this session's own store (tests/nix/realnix.py)."""
    reason = realnix.missing()
    if reason:
        pytest.skip(reason)
    nix = RealNix(tmp_path_factory.mktemp("real-nix") / "nix")
    assert nix.version() >= (2, 18), "the flake needs Nix >= 2.18"
    return nix
