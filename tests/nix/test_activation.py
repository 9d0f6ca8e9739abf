"""The `sparkfleet` deploy-rs profile's activation script, run against a temporary root.

The unit files are the ones the profile ships: rendered by modules/lib/units.nix from the repo's
inventory with nix-instantiate. systemctl is a recorder, so the test sees exactly what the script
would ask systemd to do: the second run with the same profile must ask nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from .conftest import FLEET_LIB, REPO, nix_eval, nix_str, requires_nix

pytestmark = [pytest.mark.nix, requires_nix]

ACTIVATE = REPO / "pkgs" / "sparkfleet-profile" / "activate.sh"
UNITS_LIB = REPO / "modules" / "lib" / "units.nix"


def render_units(
    root: Path, host: str, profile_path: str = "/nix/var/nix/profiles/sparkfleet"
) -> dict[str, str]:
    """The unit files pkgs/sparkfleet-profile.nix ships for `host` (units.profileUnits)."""
    return nix_eval(
        f"let f = (import {FLEET_LIB}).fromRoot {nix_str(root)}; in ((import {UNITS_LIB}).profileUnits "
        f'{{ fleet = f; host = "{host}"; fleetRoot = {nix_str(root)}; '
        f"profilePath = {nix_str(profile_path)}; }}).files"
    )


def make_profile(path: Path, units: dict[str, str]) -> Path:
    if path.exists():
        shutil.rmtree(path)
    (path / "share" / "sparkfleet" / "units").mkdir(parents=True)
    (path / "bin").mkdir()
    for name, text in units.items():
        (path / "share" / "sparkfleet" / "units" / name).write_text(text)
    shutil.copy(ACTIVATE, path / "bin" / "sparkfleet-activate")
    return path


@pytest.fixture
def host_root(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "root"
    root.mkdir()
    log = tmp_path / "systemctl.log"
    systemctl = tmp_path / "systemctl"
    systemctl.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    systemctl.chmod(0o755)
    return {"root": root, "log": log, "systemctl": systemctl, "tmp": tmp_path}


def activate(profile: Path, env: dict[str, Path]) -> list[str]:
    """Run the profile's activation once; return the systemctl calls it made."""
    env["log"].unlink(missing_ok=True)
    run_env = {
        **os.environ,
        "PROFILE": str(profile),
        "SPARKFLEET_ACTIVATE_ROOT": str(env["root"]),
        "SYSTEMCTL": str(env["systemctl"]),
    }
    proc = subprocess.run(
        [str(profile / "bin" / "sparkfleet-activate")],
        env=run_env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return env["log"].read_text().splitlines() if env["log"].exists() else []


NAS_EXPORT = "nas.lan:/volume1/hugging-face"


def fleet_copy(dest: Path, nas_export: str | None = NAS_EXPORT) -> Path:
    shutil.copytree(REPO / "hosts", dest / "hosts", ignore=shutil.ignore_patterns("dgx*"))
    shutil.copytree(REPO / "recipes", dest / "recipes", ignore=shutil.ignore_patterns("reports"))
    if nas_export:
        fleet = dest / "hosts" / "fleet.toml"
        fleet.write_text(
            fleet.read_text().replace("[defaults]\n", f'[defaults]\nnas_export = "{nas_export}"\n', 1)
        )
    return dest


def test_activation_is_idempotent_and_restarts_only_what_changed(host_root: dict[str, Path]) -> None:
    fleet = fleet_copy(host_root["tmp"] / "fleet")
    units = render_units(fleet, "dgx1")
    lanes = sorted(n for n in units if n.startswith("sparkfleet-lane-"))
    assert lanes == [
        "sparkfleet-lane-dsv41-flash-4x-aiden.service",
        "sparkfleet-lane-dsv41-flash-4x-mia.service",
        "sparkfleet-lane-dsv41-flash-exl3-2x.service",
    ]
    profile = make_profile(host_root["tmp"] / "profile-1", units)
    unit_dir = host_root["root"] / "etc" / "systemd" / "system"

    first = activate(profile, host_root)
    assert first == [
        "daemon-reload",
        "enable --now -- mnt-nas-huggingface.automount",
        "enable --now -- sparkfleet-stage.timer",
    ]
    assert "What=nas.lan:/volume1/hugging-face" in units["mnt-nas-huggingface.mount"]
    assert sorted(p.name for p in unit_dir.iterdir()) == sorted(units)
    assert all((unit_dir / n).read_text() == text for n, text in units.items())
    inodes = {p.name: p.stat().st_ino for p in unit_dir.iterdir()}

    # same profile again: no file rewritten, systemd not asked anything
    assert activate(profile, host_root) == []
    assert {p.name: p.stat().st_ino for p in unit_dir.iterdir()} == inodes

    # a commit outside hosts/fleet.toml and the recipes (README, code, a recipe's reports):
    # a new profile, the same unit files, nothing restarted
    (fleet / "README.md").write_text("docs only\n")
    (fleet / "recipes" / "dsv41-flash-exl3-2x" / "reports").mkdir(exist_ok=True)
    (fleet / "recipes" / "dsv41-flash-exl3-2x" / "reports" / "r.json").write_text("{}")
    assert render_units(fleet, "dgx1") == units
    docs = make_profile(host_root["tmp"] / "profile-docs", render_units(fleet, "dgx1"))
    assert activate(docs, host_root) == []

    # a lane edit (one more host in its world) changes that lane's unit only
    recipe = fleet / "recipes" / "dsv41-flash-exl3-2x" / "recipe.toml"
    text = recipe.read_text()
    assert 'hosts = ["dgx1", "dgx2"]' in text
    recipe.write_text(text.replace('hosts = ["dgx1", "dgx2"]', 'hosts = ["dgx1", "dgx2", "dgx3"]', 1))
    edited = render_units(fleet, "dgx1")
    assert [n for n in units if units[n] != edited[n]] == ["sparkfleet-lane-dsv41-flash-exl3-2x.service"]
    third = activate(make_profile(host_root["tmp"] / "profile-2", edited), host_root)
    assert third == ["daemon-reload", "try-restart --no-block -- sparkfleet-lane-dsv41-flash-exl3-2x.service"]
    assert (unit_dir / "sparkfleet-lane-dsv41-flash-exl3-2x.service").read_text() == edited[lanes[2]]

    # a lane that no longer runs here is stopped, disabled and removed; nothing else restarts
    shutil.rmtree(fleet / "recipes" / "dsv41-flash-exl3-2x")
    fewer = render_units(fleet, "dgx1")
    fourth = activate(make_profile(host_root["tmp"] / "profile-3", fewer), host_root)
    assert fourth == [
        "disable --now -- sparkfleet-lane-dsv41-flash-exl3-2x.service",
        "daemon-reload",
        # their Conflicts= went away
        "try-restart --no-block -- sparkfleet-lane-dsv41-flash-4x-aiden.service",
        "try-restart --no-block -- sparkfleet-lane-dsv41-flash-4x-mia.service",
    ]
    assert not (unit_dir / "sparkfleet-lane-dsv41-flash-exl3-2x.service").exists()
    assert activate(make_profile(host_root["tmp"] / "profile-3", fewer), host_root) == []
    leftovers = [p for p in host_root["root"].rglob("*") if ".sf-tmp-" in p.name]
    assert leftovers == []


def test_activation_leaves_nixos_units_to_nixos(host_root: dict[str, Path]) -> None:
    (host_root["root"] / "etc").mkdir()
    (host_root["root"] / "etc" / "NIXOS").write_text("")
    profile = make_profile(
        host_root["tmp"] / "profile", render_units(fleet_copy(host_root["tmp"] / "f"), "dgx1")
    )
    assert activate(profile, host_root) == []
    assert not (host_root["root"] / "etc" / "systemd").exists()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_rendered_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    exe = tmp_path / "profile" / "bin" / "sparkfleet"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    units = render_units(fleet_copy(tmp_path / "fleet"), "dgx1", profile_path=str(tmp_path / "profile"))
    assert {"mnt-nas-huggingface.mount", "mnt-nas-huggingface.automount"} <= set(units)
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    for name, text in units.items():
        (unit_dir / name).write_text(text)
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *map(str, sorted(unit_dir.iterdir()))],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"},
    )
    # Only complaints about this test machine (no such user, no dbus) are tolerated.
    problems = [
        line
        for line in proc.stderr.splitlines()
        if line.strip() and not any(ok in line for ok in ("kilork", "Failed to connect", "bus", "user"))
    ]
    assert not problems, textwrap.indent(proc.stderr, "  ")


def test_exec_quoting_survives_specials() -> None:
    line = nix_eval(f'(import {UNITS_LIB}).execLine [ "/bin/x" "a b" "100%" "$HOME" "q\\"t" ]')
    assert line == '"/bin/x" "a b" "100%%" "$$HOME" "q\\"t"'


def test_without_an_nfs_export_no_mount_units_are_shipped(tmp_path: Path) -> None:
    units = render_units(fleet_copy(tmp_path / "fleet", nas_export=None), "dgx1")
    assert not [n for n in units if n.endswith((".mount", ".automount"))]
    assert "sparkfleet-stage.service" in units


@pytest.mark.skipif(shutil.which("systemd-escape") is None, reason="systemd-escape not installed")
@pytest.mark.parametrize("path", ["/mnt/nas/huggingface", "/mnt/nas-2/hf.cache/x_y", "/srv/a:b/", "/data"])
def test_mount_unit_names_match_systemd_escape(path: str) -> None:
    ours = nix_eval(f"(import {UNITS_LIB}).escapePath {nix_str(path)}")
    theirs = subprocess.run(["systemd-escape", "--path", path], capture_output=True, text=True, check=True)
    assert ours == theirs.stdout.strip()
