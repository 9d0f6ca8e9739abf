"""tests/nix/flake-check.nix itself: the output rules of today's `nix flake check` (NixOS/nix
src/nix/flake.cc at 003b64476e3b), applied to small hand-made outputs. Builtins only: runs
without NIXPKGS_LIB, so offline CI checks the rules that test_flake.py applies to the real flake."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import nix_eval, nix_str, requires_nix

pytestmark = [pytest.mark.nix, requires_nix]

CHECK = nix_str(Path(__file__).parent / "flake-check.nix")
OUT = "/nix/store/00000000000000000000000000000000-d"
DRV = f'{{ type = "derivation"; name = "d"; outPath = "{OUT}"; }}'
APP = f'{{ type = "app"; program = "{OUT}/bin/d"; meta.description = "d"; }}'
OVERRIDES = "override = { __functor = s: x: x; }; overrideDerivation = f: f;"
TOPLEVEL = "attribute 'config.system.build.toplevel' is not a derivation"


def check(outputs: str) -> dict:
    return nix_eval(f"import {CHECK} ({outputs})")


def test_a_well_formed_flake_passes() -> None:
    outputs = (
        f"{{ packages.x86_64-linux.default = {DRV}; checks.x86_64-linux.c = {DRV}; "
        f"formatter.x86_64-linux = {DRV}; apps.x86_64-linux.default = {APP}; "
        "overlays.default = final: prev: { }; nixosModules.m = { ... }: { }; nixosModules.p = ./.; "
        f"nixosConfigurations.h.config.system.build.toplevel = {DRV}; lib.x = 1; }}"
    )
    assert check(outputs) == {"errors": [], "warnings": []}


@pytest.mark.parametrize(
    ("outputs", "errors"),
    [
        # what nixpkgs' callPackage adds beside the apps (makeOverridable)
        (f"{{ apps.x86_64-linux = {{ a = {APP}; {OVERRIDES} }}; }}",
         ["app 'apps.x86_64-linux.override' lacks attribute 'type'",
          "app 'apps.x86_64-linux.override' lacks attribute 'program'",
          "app 'apps.x86_64-linux.override' has unsupported attribute '__functor'",
          "app 'apps.x86_64-linux.overrideDerivation': value is lambda while a set was expected"]),
        ('{ apps.x86_64-linux.a = { type = "app"; program = "/x"; extra = 1; }; }',
         ["app 'apps.x86_64-linux.a' has unsupported attribute 'extra'"]),
        ('{ packages.x86_64-linux.p = { name = "p"; }; }',
         ["flake attribute 'packages.x86_64-linux.p' is not a derivation"]),
        (f"{{ checks.linux.c = {DRV}; }}", ["'linux' is not a valid system type, at checks.linux"]),
        ("{ overlays.default = { final, prev }: { }; }",
         ["overlay 'overlays.default' does not take an argument named 'final'"]),
        ('{ nixosConfigurations.h.config.system.build.toplevel = throw "failed assertions"; }',
         [f"NixOS configuration 'nixosConfigurations.h': {TOPLEVEL}"]),
    ],
    ids=["callPackage-apps", "app-extra", "not-drv", "bad-system", "overlay-formals", "toplevel"],
)  # fmt: skip
def test_each_rule_reports_as_nix_words_it(outputs: str, errors: list[str]) -> None:
    assert check(outputs)["errors"] == errors


def test_warnings_for_missing_descriptions_and_unknown_outputs() -> None:
    result = check('{ apps.x86_64-linux.a = { type = "app"; program = "/x"; }; deploy = { }; }')
    assert result == {
        "errors": [],
        "warnings": ["app 'apps.x86_64-linux.a' lacks attribute 'meta'", "unknown flake output 'deploy'"],
    }
