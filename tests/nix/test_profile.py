"""pkgs/sparkfleet-profile.nix's own build script, run by bash, then its activation.

The derivation's script (runCommand's text) is evaluated with nix-instantiate and nixpkgs' own
lib ($NIXPKGS_LIB: getExe', concatStrings, mapAttrsToList); writeText and the spec roots become real
store paths (nix-instantiate --read-write-mode). bash runs the script with $out in a temp dir:
that is the profile deploy-rs would activate. Its sparkfleet-activate then installs the units
into a temporary root, with a recording systemctl, exactly as test_activation.py does for
hand-made profiles.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import (
    FLEET_LIB,
    REPO,
    nix_eval,
    nix_str,
    nixpkgs_lib,
    requires_nix,
    requires_nixpkgs_lib,
    store_writable,
)
from .test_activation import fleet_copy

pytestmark = [
    pytest.mark.nix,
    requires_nix,
    requires_nixpkgs_lib,
    pytest.mark.skipif(not store_writable(), reason="/nix/store is not writable (writeText makes files)"),
]

STORE = "/nix/store/00000000000000000000000000000000"
LIB = nix_str(nixpkgs_lib() or "/nonexistent")


def profile_script(root: Path, host: str) -> str:
    expr = (
        f"let fleet = (import {FLEET_LIB}).fromRoot {nix_str(root)}; in "
        f"import {REPO / 'pkgs' / 'sparkfleet-profile.nix'} {{ lib = import {LIB}; inherit fleet; "
        f'host = "{host}"; fleetRoot = {nix_str(root)}; '
        f'sparkfleet = {{ type = "derivation"; name = "sparkfleet"; outPath = "{STORE}-sparkfleet"; '
        f'smg = {{ type = "derivation"; name = "smg"; outPath = "{STORE}-smg"; }}; }}; '
        f'nginx = {{ type = "derivation"; name = "nginx"; outPath = "{STORE}-nginx"; }}; '
        "writeText = builtins.toFile; runCommand = name: env: script: script; }"
    )
    return nix_eval(expr, write_store=True)


def test_the_profile_derivation_builds_and_activates(tmp_path: Path) -> None:
    fleet = fleet_copy(tmp_path / "fleet")
    toml = fleet / "hosts" / "fleet.toml"  # dgx1 runs the gateway in front of the TP4 lane
    toml.write_text(toml.read_text().replace("[hosts.dgx1]\n", '[hosts.dgx1]\nservices = ["gateway"]\n', 1))
    recipe = fleet / "recipes" / "dsv41-flash-4x-mia" / "recipe.toml"
    recipe.write_text(recipe.read_text().replace("[[models]]", "[gateway]\n\n[[models]]", 1))
    out = tmp_path / "profile"
    script = profile_script(fleet, "dgx1")
    build = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "patchShebangs() { :; }\n" + script],
        env={"out": str(out), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    assert os.readlink(out / "bin" / "sparkfleet") == f"{STORE}-sparkfleet/bin/sparkfleet"
    # the gateway unit's PATH begins at this bin/: smg (sparkfleet's own) and nixpkgs' nginx are there
    assert os.readlink(out / "bin" / "smg") == f"{STORE}-smg/bin/smg"
    assert os.readlink(out / "bin" / "nginx") == f"{STORE}-nginx/bin/nginx"
    # the spec links: a content-addressed store copy of the fleet file and recipes
    for link, lanes in (("stage-root", 3), ("fleet-root", 3)):  # the TP4, Aiden and EXL3 lanes
        spec = out / "share" / "sparkfleet" / link
        assert spec.resolve().parent == Path("/nix/store")
        assert (spec / "hosts" / "fleet.toml").read_text() == (fleet / "hosts" / "fleet.toml").read_text()
        assert len(list((spec / "recipes").iterdir())) == lanes
    units = sorted(p.name for p in (out / "share" / "sparkfleet" / "units").iterdir())
    assert "sparkfleet-stage.timer" in units and "mnt-nas-huggingface.automount" in units

    root = tmp_path / "root"
    root.mkdir()
    log = tmp_path / "systemctl.log"
    systemctl = tmp_path / "systemctl"
    systemctl.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    systemctl.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "PROFILE": str(out), "SPARKFLEET_ACTIVATE_ROOT": str(root)}
    env["SYSTEMCTL"] = str(systemctl)
    act = subprocess.run([str(out / "bin" / "sparkfleet-activate")], env=env, capture_output=True, text=True)
    assert act.returncode == 0, act.stderr
    installed = root / "etc" / "systemd" / "system"
    assert sorted(p.name for p in installed.iterdir()) == units
    for name in units:
        assert (installed / name).read_text() == (out / "share" / "sparkfleet" / "units" / name).read_text()
    lane = (installed / "sparkfleet-lane-dsv41-flash-4x-mia.service").read_text()
    assert 'ExecStart="/nix/var/nix/profiles/sparkfleet/bin/sparkfleet" "launch"' in lane
    gateway = (installed / "sparkfleet-gateway.service").read_text()
    assert 'Environment="PATH=/nix/var/nix/profiles/sparkfleet/bin:/usr/local/sbin:' in gateway
    assert log.read_text().splitlines()[0] == "daemon-reload"
