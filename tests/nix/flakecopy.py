"""The real flake.nix under Nix 2.26 (tests/nix/realnix.py), its inputs overridden for offline use.

A copy of the repository's flake (flake.nix, flake.lock, modules/, pkgs/, hosts/, recipes/, the
package sources) is evaluated by Nix's own flake machinery with `--override-input` for:
- nixpkgs: nixpkgs' real lib (tests/nix/inputs.py) plus builder stand-ins (stubs/nixpkgs-flake);
  full nixpkgs is not available offline;
- deploy-rs: the real repository at its locked revision (from its git bundle), its `utils` input
  (numtide/flake-utils) at the newest revision the bundle holds (the locked one is newer than the
  bundle) and that one's `systems` at its locked revision;
- srvos and nixos-dgx-spark: stand-ins (stubs/srvos-flake, stubs/dgx-spark-flake). Their real
  modules set NixOS options and read packages (kernels, NVIDIA drivers) that only full nixpkgs
  has; test_stand_ins.py checks that each value the stand-ins set is what the real module sets at
  its locked revision, and test_input_floors.py that their supported release is ours.
Nothing is fetched and nothing is built here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from . import inputs
from .realnix import RealNix

REPO = inputs.REPO
STUBS = Path(__file__).parent / "stubs"
# what of the repository the flake reads (the sparkfleet package builds from pyproject + python/)
SOURCES = ("flake.nix", "flake.lock", "pyproject.toml", "README.md")
FOLDERS = ("modules", "pkgs", "hosts", "recipes", "python")
REAL_INPUTS = ("serokell/deploy-rs", "numtide/flake-utils", "nix-systems/default", inputs.NIXPKGS_LIB_REPO)


def inputs_missing() -> str | None:
    return inputs.missing(*REAL_INPUTS)


@dataclass
class FlakeCopy:
    """A flake copy at `src` and the stand-in or real input folders beside it."""

    base: Path
    overrides: dict[str, Path] = field(default_factory=dict)

    @property
    def src(self) -> Path:
        return self.base / "src"

    def override_args(self) -> list[str]:
        argv = []
        for name, path in self.overrides.items():
            argv += ["--override-input", name, f"path:{path}"]
        return argv

    def binds(self) -> tuple[Path, ...]:
        return (self.base, inputs.CACHE)

    def nix(self, nix: RealNix, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """`nix ARGV... path:SRC OVERRIDES` (argv ends where the flake reference goes)."""
        full = [
            "nix",
            *argv[:-1],
            "--no-write-lock-file",
            f"path:{self.src}{argv[-1]}",
            *self.override_args(),
        ]
        return nix.run(full, binds=self.binds(), timeout=timeout)

    def eval(self, nix: RealNix, attr: str, apply: str | None = None) -> object:
        argv = ["eval", "--json", *(["--apply", apply] if apply else []), f"#{attr}"]
        proc = self.nix(nix, *argv)
        assert proc.returncode == 0, proc.stderr[-4000:]
        return json.loads(proc.stdout)

    def eval_error(self, nix: RealNix, attr: str) -> str:
        proc = self.nix(nix, "eval", "--json", f"#{attr}")
        assert proc.returncode != 0, proc.stdout
        return proc.stderr

    def check(self, nix: RealNix) -> subprocess.CompletedProcess[str]:
        """`nix flake check --all-systems --no-build` of the copy."""
        return self.nix(nix, "flake", "check", "--all-systems", "--no-build", "", timeout=600)

    def edit(self, rel: str, old: str, new: str) -> None:
        path = self.src / rel
        text = path.read_text()
        assert old in text, f"{rel} no longer holds {old!r}"
        path.write_text(text.replace(old, new, 1))


def make(base: Path, *, nixos_hosts: tuple[str, ...] = ("dgx2",)) -> FlakeCopy:
    """The flake copy with `nixos_hosts` under NixOS (their NAS export named, an operator's key in
    hosts/authorized_keys: NixOS refuses a toplevel nobody can log into, and the repository
    itself holds no keys)."""
    copy = FlakeCopy(base)
    copy.src.mkdir(parents=True)
    for name in SOURCES:
        shutil.copy(REPO / name, copy.src / name)
    for folder in FOLDERS:
        ignore = shutil.ignore_patterns("reports", "__pycache__", "*.egg-info")
        shutil.copytree(REPO / folder, copy.src / folder, ignore=ignore)
    fleet = copy.src / "hosts" / "fleet.toml"
    text = fleet.read_text()
    for host in nixos_hosts:
        text = text.replace(
            f"[hosts.{host}]\n", f'[hosts.{host}]\nos = "nixos"\nnas_export = "nas.invalid:/hub"\n', 1
        )
    fleet.write_text(text)
    (copy.src / "hosts" / "authorized_keys").write_text("ssh-ed25519 AAAAC3Nza operator@example\n")

    nixpkgs = base / "nixpkgs"
    shutil.copytree(STUBS / "nixpkgs-flake", nixpkgs)
    shutil.copytree(inputs.nixpkgs_lib(), nixpkgs / "lib")
    for name in ("pkgs.nix", "nixos-options.nix", "prometheus-options.nix", "trivial-builders.nix"):
        shutil.copy(STUBS / name, nixpkgs / name)
    copy.overrides["nixpkgs"] = nixpkgs
    for name, stub in (("srvos", "srvos-flake"), ("nixos-dgx-spark", "dgx-spark-flake")):
        shutil.copytree(STUBS / stub, base / name)
        copy.overrides[name] = base / name

    copy.overrides["deploy-rs"] = inputs.locked_checkout("deploy-rs")
    utils = inputs.rev_parse("numtide/flake-utils", "HEAD")
    copy.overrides["deploy-rs/utils"] = inputs.checkout("numtide/flake-utils", utils)
    copy.overrides["deploy-rs/utils/systems"] = inputs.locked_checkout("systems")
    return copy
