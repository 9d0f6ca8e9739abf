"""pkgs/apps.nix: what `nix run .#stage -- dgx1` (and launch, bench, doctor) run, as bash runs it.

The app's shell text comes from evaluating pkgs/apps.nix with nix-instantiate, nixpkgs' own lib
(getExe, getExe', genAttrs, optionalString from $NIXPKGS_LIB) and writeShellApplication standing in
with the real formals. The CLI is a stand-in that prints its argv and SPARKFLEET_*.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO, nix_eval, nix_str, nixpkgs_lib, requires_nix, requires_nixpkgs_lib

pytestmark = [pytest.mark.nix, requires_nix, requires_nixpkgs_lib]

STORE = "/nix/store/00000000000000000000000000000000"
LIB = nix_str(nixpkgs_lib() or "/nonexistent")


def call_apps(extra: str) -> str:
    return (
        f"import {nix_str(REPO / 'pkgs' / 'apps.nix')} {{ lib = import {LIB}; "
        f'sparkfleet = {{ type = "derivation"; name = "sparkfleet"; outPath = "{STORE}-sparkfleet"; '
        f'meta.mainProgram = "sparkfleet"; }}; {extra} }}'
    )


def test_apps_run_the_pinned_cli() -> None:
    extra = (
        'fleetSpec = "/nix/store/spec"; profileBin = "/p/bin/sparkfleet"; '
        "writeShellApplication = { name, text, runtimeInputs ? [ ], meta ? { }, ... }: "
        '{ type = "derivation"; inherit name; outPath = "/nix/store/x-${name}"; meta.mainProgram = name; };'
    )
    apps = nix_eval(call_apps(extra))
    assert sorted(apps) == ["bench", "default", "doctor", "launch", "stage"]
    assert all(app["type"] == "app" for app in apps.values())
    # what `nix flake check` wants of an app and nothing more (Nix >= 2.25 warns without a description)
    for app in apps.values():
        assert set(app) == {"type", "program", "meta"} and app["meta"]["description"]
    assert apps["stage"]["program"] == "/nix/store/x-sparkfleet-stage/bin/sparkfleet-stage"
    assert apps["default"]["program"] == f"{STORE}-sparkfleet/bin/sparkfleet"


def app_script(verb: str, fleet_spec: str) -> str:
    """The shell text of pkgs/apps.nix's `verb` app (writeShellApplication's text, via the stubs)."""
    extra = (
        'writeShellApplication = { name, text, ... }: { type = "derivation"; inherit name; outPath = text; '
        "meta.mainProgram = name; }; "
        f'fleetSpec = "{fleet_spec}"; profileBin = "/nix/var/nix/profiles/sparkfleet/bin/sparkfleet";'
    )
    program = nix_eval(f"({call_apps(extra)}).{verb}.program")
    return program.removesuffix(f"/bin/sparkfleet-{verb}")


def run_app(tmp_path: Path, verb: str, cwd: Path, *args: str, **env: str) -> dict:
    script = app_script(verb, f"/nix/store/{'0' * 32}-sparkfleet-fleet-spec")
    fake = tmp_path / "sparkfleet"
    fake.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        "print(json.dumps({'argv': sys.argv[1:], 'env': {k: v for k, v in os.environ.items() "
        "if k.startswith('SPARKFLEET_')}}))\n"
    )
    fake.chmod(0o755)
    script = script.replace(f"/nix/store/{'0' * 32}-sparkfleet/bin/sparkfleet", str(fake))
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script, "app", *args],
        cwd=cwd, capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin", **env},
    )  # fmt: skip
    return json.loads(proc.stdout)


def test_apps_use_the_checkout_or_the_pinned_fleet_and_the_deployed_tooling(tmp_path: Path) -> None:
    spec = f"/nix/store/{'0' * 32}-sparkfleet-fleet-spec"
    checkout = tmp_path / "checkout"
    (checkout / "hosts").mkdir(parents=True)
    (checkout / "hosts" / "fleet.toml").write_text("schema_version = 1\n")
    (checkout / "recipes").mkdir()
    inside = run_app(tmp_path, "stage", checkout / "recipes", "dgx1")
    assert inside["argv"] == ["stage", "dgx1"]
    assert inside["env"] == {
        "SPARKFLEET_ROOT": str(checkout),  # the nearest checkout up from the working directory
        "SPARKFLEET_REMOTE": "/nix/var/nix/profiles/sparkfleet/bin/sparkfleet",
        "SPARKFLEET_REMOTE_ROOT": spec,  # what `deploy .#dgx1` put on the host
    }
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert run_app(tmp_path, "stage", elsewhere, "dgx1")["env"]["SPARKFLEET_ROOT"] == spec
    mine = run_app(tmp_path, "stage", elsewhere, "dgx1", SPARKFLEET_REMOTE="ssh-side-sparkfleet")
    assert mine["env"]["SPARKFLEET_REMOTE"] == "ssh-side-sparkfleet"  # the caller's choice wins


def test_bench_app_never_writes_into_the_store(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    bench = run_app(tmp_path, "bench", elsewhere, "dsv41-flash-4x-mia", "--quick")
    reports = f"{elsewhere}/sparkfleet-reports"
    assert bench["argv"] == ["bench", "dsv41-flash-4x-mia", "--quick", "--out", reports]
    chosen = run_app(tmp_path, "bench", elsewhere, "lane", "--out", "/srv/reports")
    assert chosen["argv"] == ["bench", "lane", "--out", "/srv/reports"]
    checkout = tmp_path / "checkout"
    (checkout / "hosts").mkdir(parents=True)
    (checkout / "hosts" / "fleet.toml").write_text("")
    assert run_app(tmp_path, "bench", checkout, "lane")["argv"] == ["bench", "lane"]  # recipes/<lane>/reports
