"""The CI workflows build, evaluate and test where the network is (they cannot run here)."""

from __future__ import annotations

import pytest

from .conftest import REPO

yaml = pytest.importorskip("yaml", reason="PyYAML not installed")

WORKFLOWS = REPO / ".github" / "workflows"


def runs(doc: dict, job: str | None = None) -> str:
    jobs = [doc["jobs"][job]] if job else doc["jobs"].values()
    return "\n".join(step.get("run", "") for j in jobs for step in j["steps"] if isinstance(step, dict))


def uses(doc: dict, job: str) -> list[str]:
    return [step["uses"].split("@")[0] for step in doc["jobs"][job]["steps"] if "uses" in step]


def test_flake_check_and_nixos_eval_are_separate_jobs_without_building() -> None:
    doc = yaml.safe_load((WORKFLOWS / "ci.yml").read_text())
    check = runs(doc, "flake-check")
    assert "nix flake check --all-systems --no-build" in check  # every system's outputs
    assert "nix flake metadata --no-update-lock-file" in check
    # the NixOS toplevels instantiated on the Sparks' own system, the example host among them
    assert doc["jobs"]["nixos-eval"]["runs-on"] == "ubuntu-24.04-arm"
    nixos = runs(doc, "nixos-eval")
    assert "config.system.build.toplevel.drvPath" in nixos and "grep -qx nixos-spark" in nixos
    assert "nix build --no-link --dry-run" in nixos and "nix build --print" not in nixos
    # the stand-in for NixOS's services.prometheus against the real module (full nixpkgs is there)
    assert "python3 -m tests.nix.real_prometheus \"$nixpkgs\"" in nixos
    assert set(doc["jobs"]["build"]["needs"]) == {"flake-check", "nixos-eval"}


def test_vm_test_runs_where_kvm_is() -> None:
    doc = yaml.safe_load((WORKFLOWS / "ci.yml").read_text())
    vm = doc["jobs"]["vm"]
    assert vm["runs-on"] == "ubuntu-24.04"
    assert "udevadm trigger --name-match=kvm" in runs(doc, "vm")
    nix = next(s for s in vm["steps"] if s.get("uses", "").startswith("cachix/install-nix-action"))
    assert "kvm" in nix["with"]["extra_nix_config"] and "nixos-test" in nix["with"]["extra_nix_config"]
    # a job of its own, not a flake check: deploy-rs builds every check before a deploy
    assert "nix build --print-build-logs .#hydraJobs.units-vm.x86_64-linux" in runs(doc, "vm")


def test_build_on_aarch64_and_push_to_the_binary_cache() -> None:
    doc = yaml.safe_load((WORKFLOWS / "ci.yml").read_text())
    build = doc["jobs"]["build"]
    assert build["runs-on"] == "ubuntu-24.04-arm"
    text = runs(doc, "build")
    assert "nix build --print-build-logs .#sparkfleet" in text
    assert "mia-tp4-image" not in text  # too big for a hosted runner: the image job, on a Spark
    image = doc["jobs"]["image"]
    assert image["runs-on"] == ["self-hosted", "linux", "ARM64", "spark"]
    assert ".#mia-tp4-image.tree .#mia-tp4-image.kernels .#mia-tp4-image.tests" in runs(doc, "image")
    # the Spark's own Nix, not the install action's: flakes are turned on for the job
    assert "nix-command flakes" in image["env"]["NIX_CONFIG"]
    cachix = next(s for s in image["steps"] if s.get("uses", "").startswith("cachix/cachix-action"))
    assert cachix["with"]["pushFilter"] == "-docker-image-.*[.]tar$"  # the base is never pushed
    assert '".#sparkfleet-profile-$host"' in text
    for job in ("flake-check", "build", "vm"):
        assert "cachix/cachix-action" in uses(doc, job)
    step = next(s for s in build["steps"] if s.get("uses", "").startswith("cachix/cachix-action"))
    assert step["with"]["authToken"] == "${{ secrets.CACHIX_AUTH_TOKEN }}"  # pushes what it built


def test_suite_runs_with_the_locked_nixpkgs_lib() -> None:
    doc = yaml.safe_load((WORKFLOWS / "ci.yml").read_text())
    text = runs(doc, "test")
    assert ".ci/run" in text  # which is `make test`
    # the lock's nixpkgs (rev + narHash from flake.lock), fetched and hash-checked by Nix
    assert "jq -r .nodes.nixpkgs.locked.rev flake.lock" in text and "locked.narHash" in text
    assert "builtins.fetchTarball" in text and "NIXPKGS_LIB=" in text
    assert "nixpkgs/archive/$rev" in text  # never a branch's HEAD
    # the other Nix inputs as bundles of whole histories (tests/nix/inputs.py reads them)
    assert "bundle create" in text and "SPARKFLEET_NIX_INPUTS=" in text


def test_flake_lock_updates_arrive_as_scheduled_pull_requests() -> None:
    doc = yaml.safe_load((WORKFLOWS / "update-flake-lock.yml").read_text())
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` as True
    assert on["schedule"][0]["cron"]
    assert "DeterminateSystems/update-flake-lock" in uses(doc, "update")
