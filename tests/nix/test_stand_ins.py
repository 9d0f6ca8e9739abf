"""The stand-ins (tests/nix/stubs) for modules that need full nixpkgs say what the real ones say.

The real srvos and nixos-dgx-spark modules need full nixpkgs (srvos's server module sets about 40
NixOS options; nixos-dgx-spark's builds a kernel and the NVIDIA driver), so the flake and module
tests evaluate stand-ins. Each assignment a stand-in makes must appear, the same, in the real
module's source at the locked revision (read from its git bundle), and each module output the flake
imports must exist there: a stand-in that drifts from its input fails here. What the real modules
set beyond the stand-ins is evaluated only where full nixpkgs is (CI's nixos-eval job).

NixOS's own services.prometheus (stubs/prometheus-options.nix) is declared, not set: where the real
module can be read (full nixpkgs, which CI's $NIXPKGS_LIB is part of), the head host is evaluated
once with the stand-in and once with the real module in its place, and its Prometheus must come out
the same.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from . import inputs
from .conftest import REPO, nix_eval, nix_str, nixpkgs_lib, requires_nix

pytestmark = [pytest.mark.nix]

STUBS = Path(__file__).parent / "stubs"
# NixOS's module beside nixpkgs' lib in a full nixpkgs (CI); nixpkgs.lib alone has no nixos/
PROMETHEUS = "nixos/modules/services/monitoring/prometheus/default.nix"

# (input, stand-in file, the real module's files that set the same things, output the flake imports)
STAND_INS = [
    (
        "srvos",
        "srvos-flake/flake.nix",
        ("nixos/common/nix.nix", "nixos/server/default.nix"),
        ("nixos/default.nix", "./server\n"),  # exposeModules names each module by its folder
    ),
    (
        "nixos-dgx-spark",
        "dgx-spark-flake/flake.nix",
        ("modules/dgx-spark.nix",),
        ("flake.nix", "nixosModules.dgx-spark = "),
    ),
]
# `a.b.c = value;` and `a.b = { c = value; d = value; }` as flat assignments
ASSIGNMENT = re.compile(
    r"(?:^|(?<=[;{]))\s*([A-Za-z][\w.-]*)\s*=\s*(\[[^\]]*\]|\"[^\"]*\"|true|false)\s*;", re.MULTILINE
)
BLOCK = re.compile(r"^\s*([A-Za-z][\w.-]*)\s*=\s*\{([^{}]*)\};", re.MULTILINE)


def assignments(text: str) -> set[tuple[str, str]]:
    """Every flat `path = literal;` of a Nix file, with one-level blocks flattened into paths."""
    found = {(k, " ".join(v.split())) for k, v in ASSIGNMENT.findall(text)}
    for prefix, body in BLOCK.findall(text):
        found |= {(f"{prefix}.{k}", " ".join(v.split())) for k, v in ASSIGNMENT.findall(body)}
    return found


@inputs.requires_inputs("nix-community/srvos", "graham33/nixos-dgx-spark")
@pytest.mark.parametrize(("name", "stub", "sources", "output"), STAND_INS, ids=[s[0] for s in STAND_INS])
def test_each_value_a_stand_in_sets_is_the_real_modules(
    name: str, stub: str, sources: tuple[str, ...], output: tuple[str, str]
) -> None:
    tree = inputs.locked_checkout(name)
    ours = {
        (k, v) for k, v in assignments((STUBS / stub).read_text()) if not k.startswith(("inputs", "nixpkgs"))
    }
    assert ours, f"{stub} sets nothing"
    real = set().union(*(assignments((tree / src).read_text()) for src in sources))
    assert ours <= real, (
        f"{stub} sets what {name} at {inputs.locked(name)['rev'][:7]} does not: {sorted(ours - real)}"
    )
    file, needle = output
    assert needle in (tree / file).read_text(), f"{name}'s {file} has no {needle.strip()}"


def real_prometheus() -> Path | None:
    lib = nixpkgs_lib()
    path = lib.parent / PROMETHEUS if lib else None
    return path if path and path.is_file() else None


@requires_nix
@pytest.mark.skipif(
    real_prometheus() is None,
    reason=f"no {PROMETHEUS} beside nixpkgs' lib (full nixpkgs: CI points $NIXPKGS_LIB into it)",
)
def test_the_head_hosts_prometheus_is_the_same_with_the_real_module(tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    shutil.copytree(REPO / "hosts", root / "hosts", ignore=shutil.ignore_patterns("dgx*"))
    shutil.copytree(REPO / "recipes", root / "recipes", ignore=shutil.ignore_patterns("reports"))
    stand_in = STUBS / "prometheus-options.nix"
    swap = f"{{ disabledModules = [ {nix_str(stand_in)} ]; imports = [ {nix_str(real_prometheus())} ]; }}"

    def prometheus(extra: str) -> dict:
        args = f"nixpkgsLib = {nix_str(nixpkgs_lib())}; fleetRoot = {nix_str(root)}; host = \"dgx1\"; "
        args += f"hostModule = {nix_str(REPO / 'hosts' / 'dgx1')}; extra = {extra};"
        return nix_eval(f"(import {STUBS / 'eval-host.nix'} {{ {args} }}).prometheus", timeout=180)

    ours = prometheus("{ }")
    assert ours["enable"] is True and len(ours["yml"]["scrape_configs"]) == 3  # dgx1 heads every lane
    assert prometheus(swap) == ours
