"""flake.nix evaluated by Nix's own flake machinery, with its two inputs overridden by stand-ins.

nixpkgs becomes nixpkgs' real lib plus builder stubs (tests/nix/stubs/nixpkgs-flake), deploy-rs
becomes tests/nix/stubs/deploy-rs-flake. Everything else (flake.lock parsing, `self`, outputs,
modules, host folders, pkgs/) is the real thing. Nothing is built and nothing is fetched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest

from sparkfleet import hostfacts, inventory

from .conftest import REPO, nixpkgs_lib, requires_nix, requires_nixpkgs_lib

# One worker runs this module (make test's xdist): its module-scoped fixture is built once.
pytestmark = [pytest.mark.nix, requires_nix, requires_nixpkgs_lib, pytest.mark.xdist_group("flake")]

STUBS = Path(__file__).parent / "stubs"
SCHEMA = json.loads((Path(__file__).parent / "deploy-rs-nodes.schema.json").read_text())
STORE = "/nix/store/00000000000000000000000000000000"


def store_writable() -> bool:
    store = Path("/nix/store")
    return store.is_dir() and os.access(store, os.W_OK)


@pytest.fixture(scope="module")
def flake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not store_writable():
        pytest.skip("/nix/store is not writable here (flake evaluation copies the sources into it)")
    base = tmp_path_factory.mktemp("flake")
    src = base / "src"
    src.mkdir()
    for name in ("flake.nix", "flake.lock", "pyproject.toml", "README.md"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, src / name)
    for folder in ("modules", "pkgs", "hosts", "recipes"):
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("reports", "__pycache__"))
    fleet = src / "hosts" / "fleet.toml"
    # dgx2 under NixOS, as a real one would be: its NAS export named and an operator's key
    # (NixOS refuses a toplevel nobody can log into; the repository itself holds no keys)
    planted = '[hosts.dgx2]\nos = "nixos"\nnas_export = "nas.invalid:/hub"\n'
    fleet.write_text(fleet.read_text().replace("[hosts.dgx2]\n", planted, 1))
    (src / "hosts" / "authorized_keys").write_text("ssh-ed25519 AAAAC3Nza operator@example\n")
    nixpkgs = base / "nixpkgs"
    shutil.copytree(STUBS / "nixpkgs-flake", nixpkgs)
    shutil.copytree(nixpkgs_lib(), nixpkgs / "lib")
    shutil.copy(STUBS / "pkgs.nix", nixpkgs / "pkgs.nix")
    shutil.copy(STUBS / "nixos-options.nix", nixpkgs / "nixos-options.nix")
    shutil.copy(STUBS / "trivial-builders.nix", nixpkgs / "trivial-builders.nix")
    shutil.copytree(STUBS / "deploy-rs-flake", base / "deploy-rs")
    shutil.copytree(STUBS / "dgx-spark-flake", base / "nixos-dgx-spark")
    shutil.copytree(STUBS / "srvos-flake", base / "srvos")
    return src


def overrides(flake: Path) -> list[str]:
    """--override-input for every input: the stand-ins beside the flake copy."""
    argv = []
    for name in ("nixpkgs", "deploy-rs", "nixos-dgx-spark", "srvos"):
        argv += ["--override-input", name, f"path:{flake.parent / name}"]
    return argv


def flake_eval(flake: Path, attr: str, apply: str | None = None) -> object:
    argv = [
        "nix",
        "--extra-experimental-features",
        "nix-command flakes",
        "eval",
        "--json",
        "--no-write-lock-file",
        *overrides(flake),
        f"path:{flake}#{attr}",
    ]
    if apply:
        argv += ["--apply", apply]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_lock_names_the_release_branch_and_deploy_rs(flake: Path) -> None:
    meta = subprocess.run(
        [
            "nix",
            "--extra-experimental-features",
            "nix-command flakes",
            "flake",
            "metadata",
            "--json",
            "--no-write-lock-file",
            f"path:{flake}",
            *overrides(flake),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    locks = json.loads(meta.stdout)["locks"]["nodes"]
    assert locks["nixpkgs"]["original"] == {
        "owner": "NixOS",
        "ref": "nixos-25.11",
        "repo": "nixpkgs",
        "type": "github",
    }


def test_deploy_output_from_the_real_flake(flake: Path) -> None:
    deploy = flake_eval(flake, "deploy")
    jsonschema.Draft202012Validator(SCHEMA).validate(deploy)
    inv = inventory.load(flake)
    for host, node in deploy["nodes"].items():
        profiles = {
            # activate-rs from nixpkgs' deploy-rs (binary cache), through deploy-rs's overlay
            "system": f"{STORE}-activatable-nixos-system-{host}-25.11" if host == "dgx2" else None,
            "sparkfleet": f"{STORE}-activatable-sparkfleet-profile-{host}",
        }
        assert node == hostfacts.deploy_node(inv, host, profiles)
    assert deploy["nodes"]["dgx2"]["profilesOrder"] == ["system", "sparkfleet"]


def test_outputs_per_system(flake: Path) -> None:
    names = "builtins.mapAttrs (_: builtins.attrNames)"
    packages = flake_eval(flake, "packages", apply=names)
    assert sorted(packages) == ["aarch64-linux", "x86_64-linux"]
    assert {"sparkfleet", "default", "mia-tp4-image", "sparkfleet-profile-dgx1"} <= set(
        packages["aarch64-linux"]
    )
    assert "mia-tp4-image" not in packages["x86_64-linux"]  # an arm64 image, built on the Sparks' system
    apps = flake_eval(flake, "apps.x86_64-linux", apply="builtins.mapAttrs (_: a: a.type)")
    assert apps == {
        "bench": "app", "default": "app", "deploy": "app", "doctor": "app", "launch": "app", "stage": "app"
    }  # fmt: skip
    deploy = flake_eval(flake, "apps.x86_64-linux.deploy.program")
    assert deploy == f"{STORE}-deploy-rs/bin/deploy"  # nixpkgs' deploy-rs, not a build of the flake
    checks = flake_eval(flake, "checks", apply=names)
    for system in ("x86_64-linux", "aarch64-linux"):
        # each NixOS host's toplevel, and the example NixOS Spark's (hosts/nixos-spark)
        assert {"sparkfleet", "fleet-facts", "eval-dgx2", "eval-nixos-spark"} <= set(checks[system])
        assert "eval-dgx1" not in checks[system]  # a DGX OS host has no NixOS toplevel
    # the NixOS VM test of the units (runs where KVM is: x86_64 CI); its node evaluates here
    assert "units-vm" in checks["x86_64-linux"] and "units-vm" not in checks["aarch64-linux"]
    node = flake_eval(flake, "checks.x86_64-linux.units-vm.nodes.machine.name")
    assert node.startswith("nixos-system-machine-")  # the VM's toplevel, its assertions passed
    # deploy-rs's checks build every (aarch64) profile: only where that system builds (deploy-rs #389)
    assert "deploy-schema" in checks["aarch64-linux"] and "deploy-schema" not in checks["x86_64-linux"]
    # the image evaluates (so `nix flake check` passes) but its build stops on the partial pins
    assert flake_eval(flake, "packages.aarch64-linux.mia-tp4-image.name") == "mia-tp4-image-unresolved-pins"


def test_nixos_configurations_from_the_real_flake(flake: Path) -> None:
    hosts = flake_eval(
        flake,
        "nixosConfigurations",
        apply="builtins.mapAttrs (_: c: { inherit (c) system; "
        "services = builtins.attrNames c.config.systemd.services; "
        "root = c.config.environment.etc.\"sparkfleet/stage-root\".source; "
        "exec = c.config.systemd.services.sparkfleet-stage.serviceConfig.ExecStart; "
        "packages = map (p: p.name) c.config.environment.systemPackages; })",
    )
    # the one fleet host with os = "nixos" and the example; DGX OS hosts have none
    assert sorted(hosts) == ["dgx2", "nixos-spark"]
    example = hosts.pop("nixos-spark")
    assert example["services"] == ["sparkfleet-stage"]  # its own inventory: no lane, staging only
    assert example["root"].endswith("-sparkfleet-stage-nixos-spark-spec")
    inv = inventory.load(flake)
    for name, host in hosts.items():
        assert host["system"] == "aarch64-linux"
        # the flake's own hosts/fleet.toml + this host's recipes, by content
        assert host["root"].startswith("/nix/store/")
        assert host["root"].endswith(f"-sparkfleet-stage-{name}-spec")
        assert host["exec"].startswith('"/run/current-system/sw/bin/sparkfleet" ')
        assert host["packages"] == ["sparkfleet-0.1.0"]  # the overlay's package, on the system path
        units = {u.unit for u in hostfacts.facts(inv, name).lanes}
        assert sorted(host["services"]) == sorted({"sparkfleet-stage", *units, *(f"{u}-spec" for u in units)})


def flake_eval_error(flake: Path, attr: str) -> str:
    argv = ["nix", "--extra-experimental-features", "nix-command flakes", "eval", "--json"]
    argv += ["--no-write-lock-file", *overrides(flake), f"path:{flake}#{attr}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0, proc.stdout
    return proc.stderr


def test_nixos_units_check_asserts_on_the_generated_units(flake: Path) -> None:
    """checks.<system>.nixos-units: what CI's `nix flake check --no-build` asserts with full NixOS,
    run here with the option stubs: it passes as the modules stand ..."""
    assert flake_eval(flake, "checks.x86_64-linux.nixos-units.name") == "sparkfleet-nixos-units-dgx1"


def test_nixos_units_check_catches_a_wrong_group(flake: Path, tmp_path: Path) -> None:
    """... and fails when a tmpfiles rule names the Ubuntu-style group NixOS does not have."""
    broken = tmp_path / "broken"
    shutil.copytree(flake, broken)
    for name in ("nixpkgs", "deploy-rs", "nixos-dgx-spark", "srvos"):
        shutil.copytree(flake.parent / name, tmp_path / name, symlinks=True)
    storage = broken / "modules" / "storage.nix"
    text = storage.read_text()
    # the rules as facts give them (DGX OS: a group named after the user), not the NixOS group
    storage.write_text(text.replace("then userGroup else at 4;", "then at 4 else at 4;"))
    err = flake_eval_error(broken, "checks.x86_64-linux.nixos-units.name")
    assert "a tmpfiles rule names a group that does not exist" in err


def flake_check(flake: Path, tmp_path: Path) -> dict:
    """tests/nix/flake-check.nix (the output rules of today's `nix flake check --all-systems`) over
    the flake at `flake`, its inputs the stand-ins beside it: {"errors": [...], "warnings": [...]}."""
    check = tmp_path / "flake-check"
    check.mkdir()
    shutil.copy(Path(__file__).parent / "flake-check.nix", check / "flake-check.nix")
    stand_ins = "".join(
        f'      inputs.{name}.url = "path:{flake.parent / name}";\n'
        for name in ("nixpkgs", "deploy-rs", "nixos-dgx-spark", "srvos")
    )
    (check / "flake.nix").write_text(
        "{\n"
        f'  inputs.sut = {{\n      url = "path:{flake}";\n{stand_ins}  }};\n'
        "  outputs = { self, sut }: { result = import ./flake-check.nix sut.outputs; };\n"
        "}\n"
    )
    argv = ["nix", "--extra-experimental-features", "nix-command flakes", "eval", "--json"]
    argv += ["--no-write-lock-file", f"path:{check}#result"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_outputs_pass_the_output_rules_of_nix_flake_check(flake: Path, tmp_path: Path) -> None:
    """Every output is what `nix flake check` wants: apps are apps (type "app", a program, a
    description, nothing else: no callPackage's override/overrideDerivation), packages, checks and
    formatters are derivations, nixosModules evaluate, nixosConfigurations have a toplevel."""
    result = flake_check(flake, tmp_path)
    assert result["errors"] == [], "\n".join(result["errors"])
    assert result["warnings"] == ["unknown flake output 'deploy'"]  # deploy-rs's own, as with real Nix


def broken_copy(flake: Path, tmp_path: Path, old: str, new: str) -> Path:
    """A copy of the flake fixture (and its stand-in inputs) with flake.nix's `old` replaced."""
    broken = tmp_path / "broken"
    shutil.copytree(flake, broken)
    for name in ("nixpkgs", "deploy-rs", "nixos-dgx-spark", "srvos"):
        shutil.copytree(flake.parent / name, tmp_path / name, symlinks=True)
    text = (broken / "flake.nix").read_text()
    assert old in text
    (broken / "flake.nix").write_text(text.replace(old, new, 1))
    return broken


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # the bug of issue 23: nixpkgs' callPackage wraps the apps with makeOverridable
        ("import ./pkgs/apps.nix {", "pkgs.callPackage ./pkgs/apps.nix {", [
            "app 'apps.{s}.override' lacks attribute 'type'",
            "app 'apps.{s}.override' lacks attribute 'program'",
            "app 'apps.{s}.override' has unsupported attribute '__functionArgs'",
            "app 'apps.{s}.override' has unsupported attribute '__functor'",
            "app 'apps.{s}.overrideDerivation': value is lambda while a set was expected",
        ]),
        # a package where the program's path belongs, and no meta
        ("          deploy = {\n",
         "          bogus = { type = \"app\"; program = pkgs.sparkfleet; };\n          deploy = {\n",
         ["app 'apps.{s}.bogus': program is set while a string was expected"]),
    ],
    ids=["callPackage", "package-as-program"],
)  # fmt: skip
def test_output_rules_fail_when_apps_carry_a_non_app(
    flake: Path, tmp_path: Path, old: str, new: str, expected: list[str]
) -> None:
    result = flake_check(broken_copy(flake, tmp_path, old, new), tmp_path)
    want = [e.format(s=s) for s in ("aarch64-linux", "x86_64-linux") for e in expected]
    assert result["errors"] == want
