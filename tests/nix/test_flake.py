"""flake.nix evaluated by Nix 2.26's own flake machinery (tests/nix/flakecopy.py says which
inputs are real and which stand in): `nix flake check --all-systems --no-build`, the outputs per
system, the deploy nodes, the NixOS configurations. Nothing is built and nothing is fetched.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from sparkfleet.fleet import hostfacts, inventory
from sparkfleet.view.targets import rules_path, scrape_config

from . import flakecopy, inputs
from .conftest import requires_nixpkgs_lib
from .flakecopy import FlakeCopy
from .realnix import RealNix

# One worker runs this module (make test's xdist): its module-scoped fixture is built once.
pytestmark = [
    pytest.mark.nix,
    requires_nixpkgs_lib,
    inputs.requires_inputs(*flakecopy.REAL_INPUTS),
    pytest.mark.xdist_group("flake"),
]

SCHEMA = json.loads((flakecopy.REPO / "tests" / "nix" / "deploy-rs-nodes.schema.json").read_text())
STORE = "/nix/store/00000000000000000000000000000000"
SYSTEMS = ("aarch64-linux", "x86_64-linux")
VIEW_TARGETS = Path("/var/lib/sparkfleet-view/targets")  # the view unit's StateDirectory (modules/view.nix)
RULES = rules_path().relative_to(flakecopy.REPO).as_posix()


@pytest.fixture(scope="module")
def flake(tmp_path_factory: pytest.TempPathFactory) -> FlakeCopy:
    return flakecopy.make(tmp_path_factory.mktemp("flake"))


@pytest.fixture
def broken(tmp_path_factory: pytest.TempPathFactory) -> FlakeCopy:
    """A fresh copy for a test that edits it."""
    return flakecopy.make(tmp_path_factory.mktemp("broken"))


def test_flake_lock_is_current_and_names_the_release_branch(flake: FlakeCopy, real_nix: RealNix) -> None:
    """`nix flake metadata --no-update-lock-file` on the copy without overrides: flake.lock holds
    an entry for every input flake.nix names (else Nix would have to update it, which it refuses)."""
    argv = ["nix", "flake", "metadata", "--json", "--no-update-lock-file", f"path:{flake.src}"]
    meta = real_nix.run(argv, binds=flake.binds())
    assert meta.returncode == 0, meta.stderr
    nodes = json.loads(meta.stdout)["locks"]["nodes"]
    release = inputs.nixpkgs_release()
    assert nodes["nixpkgs"]["original"] == {
        "owner": "NixOS", "ref": f"nixos-{release}", "repo": "nixpkgs", "type": "github"
    }  # fmt: skip
    assert nodes["nixpkgs"]["locked"] == inputs.locked("nixpkgs")


def test_nix_flake_check_all_systems(flake: FlakeCopy, real_nix: RealNix) -> None:
    """Nix's own `nix flake check --all-systems --no-build` over every output of both systems:
    apps are apps (no callPackage's override/overrideDerivation), packages, checks and formatters
    derivations, overlays take `final`, nixosModules are modules, every nixosConfiguration's
    toplevel a derivation that passes its assertions."""
    proc = flake.check(real_nix)
    assert proc.returncode == 0, proc.stderr[-4000:]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    # deploy-rs's own output, unknown to Nix; the lock is not rewritten (overrides, read only)
    assert [w for w in warnings if "lock file" not in w] == ["warning: unknown flake output 'deploy'"]
    for system in SYSTEMS:
        assert f"checking derivation checks.{system}.fleet-facts..." in proc.stderr
    assert "checking NixOS configuration 'nixosConfigurations.dgx2'..." in proc.stderr


def test_deploy_output_from_the_real_flake(flake: FlakeCopy, real_nix: RealNix) -> None:
    """deploy.nodes through deploy-rs's real lib (its overlay at the locked revision): the nodes
    validate against deploy-rs's interface.json and our schema, and equal sparkfleet.fleet.hostfacts."""
    deploy = flake.eval(real_nix, "deploy")
    jsonschema.Draft202012Validator(SCHEMA).validate(deploy)
    interface = json.loads((inputs.locked_checkout("deploy-rs") / "interface.json").read_text())
    jsonschema.Draft201909Validator(interface).validate(deploy)  # its $schema names draft 2019-09
    inv = inventory.load(flake.src)
    for host, node in deploy["nodes"].items():
        profiles = {
            # the stand-in toplevel is named nixos-system-HOST-<stateVersion>, as NixOS names it
            "system": f"{STORE}-activatable-nixos-system-{host}-26.05" if host == "dgx2" else None,
            "sparkfleet": f"{STORE}-activatable-sparkfleet-profile-{host}",
        }
        assert node == hostfacts.deploy_node(inv, host, profiles)
        # a lane image load at activation must fit: well above deploy-rs's 240 s default
        assert node["activationTimeout"] >= 900
        # aarch64 profiles from an x86_64 operator machine: the Spark builds them itself
        assert node["remoteBuild"] is True
    assert deploy["nodes"]["dgx2"]["profilesOrder"] == ["system", "sparkfleet"]
    assert deploy["nodes"]["dgx1"]["profilesOrder"] == ["sparkfleet"]  # DGX OS: no NixOS system profile


def test_schema_refuses_what_deploy_rs_would_trip_on(flake: FlakeCopy, real_nix: RealNix) -> None:
    node = flake.eval(real_nix, "deploy.nodes.dgx1")
    validator = jsonschema.Draft202012Validator(SCHEMA)
    assert validator.is_valid({"nodes": {"dgx1": node}})
    for broken in (
        {k: v for k, v in node.items() if k != "hostname"},
        {**node, "profiles": {"sparkfleet": {"user": "root"}}},
        {**node, "magicRollback": "yes"},
        {**node, "activationTimout": 900},  # a typo deploy-rs would ignore
    ):
        assert not validator.is_valid({"nodes": {"dgx1": broken}}), broken


def test_activatable_profiles_hold_what_deploy_rs_activates(flake: FlakeCopy, real_nix: RealNix) -> None:
    """Each activatable profile (deploy-rs's buildEnv) holds the base, deploy-rs-activate and
    activate-rs, and activate-rs runs nixpkgs' cached deploy-rs, not a build of deploy-rs's flake."""
    paths = "builtins.mapAttrs (_: p: map (x: x.text or x.name) p.path.paths) n.profiles"
    held = flake.eval(real_nix, "deploy.nodes", apply=f"builtins.mapAttrs (_: n: {paths})")
    for host, profiles in held.items():
        for name, (base, activate, activate_rs) in profiles.items():
            assert base.startswith(("nixos-system-" if name == "system" else "sparkfleet-profile-") + host)
            if name == "system":
                assert "$PROFILE/bin/switch-to-configuration switch" in activate
            assert f'exec {STORE}-deploy-rs/bin/activate "$@"' in activate_rs


def test_outputs_per_system(flake: FlakeCopy, real_nix: RealNix) -> None:
    names = "builtins.mapAttrs (_: builtins.attrNames)"
    packages = flake.eval(real_nix, "packages", apply=names)
    assert sorted(packages) == list(SYSTEMS)
    assert {"sparkfleet", "default", "mia-tp4-image", "sparkfleet-profile-dgx1"} <= set(
        packages["aarch64-linux"]
    )
    assert "mia-tp4-image" not in packages["x86_64-linux"]  # an arm64 image, built on the Sparks' system
    apps = flake.eval(real_nix, "apps.x86_64-linux", apply="builtins.mapAttrs (_: a: a.type)")
    assert apps == {
        "bench": "app", "default": "app", "deploy": "app", "doctor": "app", "launch": "app", "stage": "app"
    }  # fmt: skip
    deploy = flake.eval(real_nix, "apps.x86_64-linux.deploy.program")
    assert deploy == f"{STORE}-deploy-rs/bin/deploy"  # nixpkgs' deploy-rs, not a build of the flake
    checks = flake.eval(real_nix, "checks", apply=names)
    for system in SYSTEMS:
        # each NixOS host's toplevel, and the example NixOS Spark's (hosts/nixos-spark)
        assert {"sparkfleet", "fleet-facts", "eval-dgx2", "eval-nixos-spark"} <= set(checks[system])
        assert "eval-dgx1" not in checks[system]  # a DGX OS host has no NixOS toplevel
        # the VM test needs KVM: deploy-rs builds every check before a deploy, so it is no check
        assert "units-vm" not in checks[system]
    # deploy-rs's checks build every (aarch64) profile: only where that system builds (deploy-rs #389)
    assert "deploy-schema" in checks["aarch64-linux"] and "deploy-schema" not in checks["x86_64-linux"]
    # the NixOS VM test of the units: a CI job of its own (hydraJobs), its node evaluates here
    node = flake.eval(real_nix, "hydraJobs.units-vm.x86_64-linux.nodes.machine.name")
    assert node.startswith("nixos-system-machine-")  # the VM's toplevel, its assertions passed
    # the image evaluates (so `nix flake check` passes) but its build stops on the partial pins
    assert (
        flake.eval(real_nix, "packages.aarch64-linux.mia-tp4-image.name") == "mia-tp4-image-unresolved-pins"
    )


def test_nixos_configurations_from_the_real_flake(flake: FlakeCopy, real_nix: RealNix) -> None:
    hosts = flake.eval(
        real_nix,
        "nixosConfigurations",
        apply="builtins.mapAttrs (_: c: { inherit (c) system; "
        "services = builtins.attrNames c.config.systemd.services; "
        'root = c.config.environment.etc."sparkfleet/stage-root".source; '
        "exec = c.config.systemd.services.sparkfleet-stage.serviceConfig.ExecStart; "
        "packages = map (p: p.name) c.config.environment.systemPackages; })",
    )
    # the one fleet host with os = "nixos" and the example; DGX OS hosts have none
    assert sorted(hosts) == ["dgx2", "nixos-spark"]
    example = hosts.pop("nixos-spark")
    assert example["services"] == ["sparkfleet-stage"]  # its own inventory: no lane, staging only
    assert example["root"].endswith("-sparkfleet-stage-nixos-spark-spec")
    inv = inventory.load(flake.src)
    for name, host in hosts.items():
        assert host["system"] == "aarch64-linux"
        # the flake's own hosts/fleet.toml + this host's recipes, by content
        assert host["root"].startswith("/nix/store/")
        assert host["root"].endswith(f"-sparkfleet-stage-{name}-spec")
        assert host["exec"].startswith('"/run/current-system/sw/bin/sparkfleet" ')
        assert host["packages"] == ["sparkfleet-0.1.0"]  # the overlay's package, on the system path
        units = {u.unit for u in hostfacts.facts(inv, name).lanes}
        assert sorted(host["services"]) == sorted({"sparkfleet-stage", *units, *(f"{u}-spec" for u in units)})


def test_a_nixos_head_runs_the_view_and_its_prometheus(tmp_path: Path, real_nix: RealNix) -> None:
    """dgx1 heads every lane: as a NixOS host (dgx2 beside it, a worker) its configuration runs the
    view, and its Prometheus scrapes the view's file_sd targets with the rules from the flake's own
    source; `nix flake check` forces its toplevel (Prometheus's config included) and passes."""
    flake = flakecopy.make(tmp_path, nixos_hosts=("dgx1", "dgx2"))
    proc = flake.check(real_nix)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "checking NixOS configuration 'nixosConfigurations.dgx1'..." in proc.stderr
    hosts = flake.eval(
        real_nix,
        "nixosConfigurations",
        apply="builtins.mapAttrs (_: c: let p = c.config.services.prometheus; in { inherit (p) enable; "
        "view = c.config.systemd.services ? sparkfleet-view; "
        "jobs = map (j: { inherit (j) job_name file_sd_configs; }) p.scrapeConfigs; "
        "rules = map toString p.ruleFiles; })",
    )
    head = hosts.pop("dgx1")
    assert flake.eval(real_nix, "lib.fleet.headHost") == "dgx1"  # what docs/fleet-ops.md has operators run
    assert head["view"] is True and head["enable"] is True
    assert head["jobs"] == scrape_config(VIEW_TARGETS, rules_path(), 15.0)["scrape_configs"]
    (rules,) = head["rules"]
    assert rules.startswith("/nix/store/") and rules.endswith(f"-source/{RULES}")
    # the worker, and the example whose own inventory has no lane to head
    off = {"enable": False, "view": False, "jobs": [], "rules": []}
    assert hosts == {"dgx2": off, "nixos-spark": off}


def test_nixos_units_check_asserts_on_the_generated_units(flake: FlakeCopy, real_nix: RealNix) -> None:
    """checks.<system>.nixos-units: what CI's `nix flake check --no-build` asserts with full NixOS,
    run here with the option stubs: it passes as the modules stand ..."""
    assert flake.eval(real_nix, "checks.x86_64-linux.nixos-units.name") == "sparkfleet-nixos-units-dgx1"


def test_nixos_units_check_catches_a_wrong_group(broken: FlakeCopy, real_nix: RealNix) -> None:
    """... and fails when a tmpfiles rule names the Ubuntu-style group NixOS does not have."""
    # the rules as DGX OS has them (a group named after the user), not the NixOS group
    broken.edit("modules/storage.nix", "then userGroup else rule.group;", "then rule.group else rule.group;")
    err = broken.eval_error(real_nix, "checks.x86_64-linux.nixos-units.name")
    assert "a tmpfiles rule names a group that does not exist" in err


@pytest.mark.parametrize(
    ("old", "new", "context", "error"),
    [
        # nixpkgs' callPackage wraps the apps with makeOverridable (override, overrideDerivation)
        ("import ./pkgs/apps.nix {", "pkgs.callPackage ./pkgs/apps.nix {",
         "while checking the app definition 'apps.{system}.overrideDerivation'",
         "error: expected a set but found a function"),
        # a package where the program's path belongs
        ("          deploy = {\n",
         "          bogus = { type = \"app\"; program = pkgs.sparkfleet; };\n          deploy = {\n",
         "while checking the app definition 'apps.{system}.bogus'",
         "error: expected a string but found a set"),
        # the old overlay convention, which Nix's check refuses by the argument's name
        ("overlays.default = final: _prev: {\n        sparkfleet = final.callPackage",
         "overlays.default = self: super: {\n        sparkfleet = self.callPackage",
         "while checking the overlay 'overlays.default'",
         "error: overlay does not take an argument named 'final'"),
    ],
    ids=["callPackage-apps", "package-as-program", "overlay-self-super"],
)  # fmt: skip
def test_nix_flake_check_refuses_a_broken_output(
    broken: FlakeCopy, real_nix: RealNix, old: str, new: str, context: str, error: str
) -> None:
    broken.edit("flake.nix", old, new)
    proc = broken.check(real_nix)
    assert proc.returncode == 1, proc.stderr[-2000:]
    # Nix stops at the first system it checks, whichever that is
    contexts = {context.format(system=s) for s in SYSTEMS}
    assert any(c in proc.stderr for c in contexts) and error in proc.stderr, proc.stderr[-2000:]
