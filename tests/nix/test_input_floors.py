"""Every NixOS module input supports the NixOS release flake.lock's nixpkgs follows.

srvos and graham33/nixos-dgx-spark are NixOS modules evaluated against our nixpkgs (their own
nixpkgs follows ours). A module written for a newer NixOS sets options an older one lacks, and every
toplevel, `checks.nixos-units` and deploy-rs's pre-deploy `nix flake check` then fail with "option
does not exist": srvos dropped its guards for releases before 26.05 ("remove < 26.05") while the
flake still followed nixos-25.11.

Each input says what it supports in its own source, read here at the locked revision from the
Nix inputs folder (tests/nix/inputs.py): a NixOS release that one of its flakes tests against
(`github:NixOS/nixpkgs/nixos-YY.MM`, e.g. srvos's dev/private/flake.nix `nixos-stable`, which its
docs/faq.md calls "the latest NixOS release") is a release it supports, and the oldest one named is
its floor. A repository whose flakes name only master or nixos-unstable tracks master and states
no release floor; docs/nix.md says how that one is checked.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from . import inputs
from .conftest import REPO

pytestmark = [pytest.mark.nix]

NIXPKGS_REF = re.compile(r"github:NixOS/nixpkgs(?:/([\w.-]+))?\"", re.IGNORECASE)
RELEASE = re.compile(r"nixos-(\d\d)\.(\d\d)")


def module_inputs() -> list[str]:
    """The inputs whose nixosModules flake.nix imports into a NixOS configuration."""
    text = (REPO / "flake.nix").read_text()
    return sorted(set(re.findall(r"\b([a-z][\w-]*)\.nixosModules\.", text)) - {"self"})


def named_nixpkgs(tree: Path) -> dict[str, list[str]]:
    """Every nixpkgs branch the repository's flakes name: flake.nix path -> refs (None: master)."""
    found = {}
    for flake in sorted(tree.rglob("flake.nix")):
        refs = [m.group(1) or "master" for m in NIXPKGS_REF.finditer(flake.read_text())]
        if refs:
            found[str(flake.relative_to(tree))] = refs
    return found


def floor(tree: Path) -> tuple[tuple[int, int], str] | None:
    """The oldest NixOS release the repository's flakes test against, and where it is named."""
    releases = [
        ((int(m.group(1)), int(m.group(2))), f"{path}: {ref}")
        for path, refs in named_nixpkgs(tree).items()
        for ref in refs
        if (m := RELEASE.fullmatch(ref))
    ]
    return min(releases) if releases else None


def our_release() -> tuple[tuple[int, int], str]:
    lock = inputs.lock()
    ref = lock["nodes"]["nixpkgs"]["original"].get("ref", "master")
    url = re.search(r'nixpkgs\.url = "github:NixOS/nixpkgs/([\w.-]+)"', (REPO / "flake.nix").read_text())
    assert url and url.group(1) == ref, f"flake.nix follows {url and url.group(1)}, flake.lock {ref}"
    match = RELEASE.fullmatch(ref)
    assert match, f"nixpkgs follows {ref}: a NixOS release branch is what every input can be checked against"
    return (int(match.group(1)), int(match.group(2))), ref


def test_the_module_inputs_are_srvos_and_nixos_dgx_spark() -> None:
    assert module_inputs() == ["nixos-dgx-spark", "srvos"]


@inputs.requires_inputs("nix-community/srvos", "graham33/nixos-dgx-spark")
@pytest.mark.parametrize("name", module_inputs())
def test_each_module_input_supports_our_nixos_release(name: str) -> None:
    release, ref = our_release()
    entry = inputs.locked(name)
    tree = inputs.locked_checkout(name)
    stated = floor(tree)
    if stated is None:
        # tracks master: every flake of it names master or an unstable channel, nothing older
        named = named_nixpkgs(tree)
        assert named and all(not RELEASE.fullmatch(r) for refs in named.values() for r in refs), named
        return
    (major, minor), where = stated
    assert release >= (major, minor), (
        f"{name} at {entry['rev'][:7]} supports NixOS {major}.{minor:02d} and later ({where}); "
        f"flake.lock follows {ref}"
    )


@inputs.requires_inputs("nix-community/srvos")
def test_srvos_floor_is_read_from_its_own_flakes() -> None:
    """The reading itself: srvos named nixos-25.11 before its dev flake moved to 26.05 (22f7d95),
    and nixos-26.05 at and after it, so the rule follows the repository's own statement."""
    repo = "nix-community/srvos"
    before = inputs.checkout(repo, inputs.rev_parse(repo, "22f7d95^"))
    after = inputs.checkout(repo, inputs.rev_parse(repo, "22f7d95"))
    assert floor(before) == ((25, 11), "dev/private/flake.nix: nixos-25.11")
    assert floor(after) == ((26, 5), "dev/private/flake.nix: nixos-26.05")


@inputs.requires_inputs("nix-community/srvos", "graham33/nixos-dgx-spark")
def test_nixpkgs_lock_entry_is_one_an_input_records() -> None:
    """flake.lock's nixpkgs (rev, narHash, lastModified) is never invented: the lock of a module
    input at its locked revision records the same triple for the same branch."""
    ours = inputs.lock()["nodes"]["nixpkgs"]
    seen = []
    for name in module_inputs():
        rev = inputs.locked(name)["rev"]
        repo = "{owner}/{repo}".format(**inputs.locked(name))
        for path in ("flake.lock", "dev/private/flake.lock", "dev/flake.lock"):
            text = inputs.show(repo, rev, path)
            for node in json.loads(text)["nodes"].values() if text else ():
                if node.get("locked", {}).get("repo") == "nixpkgs":
                    seen.append(f"{name} {path}: {node.get('original', {}).get('ref', 'master')}")
                    if node["locked"] == ours["locked"] and node["original"] == ours["original"]:
                        return
    pytest.fail(f"flake.lock's nixpkgs {ours} is recorded by no module input's lock ({'; '.join(seen)})")
