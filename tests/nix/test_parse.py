"""Every .nix file in the repo parses (nix-instantiate --parse), so a syntax slip fails here, not in CI."""

from __future__ import annotations

import subprocess

import pytest

from .conftest import REPO, requires_nix

pytestmark = [pytest.mark.nix, requires_nix]

SKIP_DIRS = {".git", ".venv", "node_modules", "result"}


def nix_files() -> list[str]:
    found = []
    for path in sorted(REPO.rglob("*.nix")):
        rel = path.relative_to(REPO)
        if not SKIP_DIRS.intersection(rel.parts):
            found.append(str(rel))
    return found


def test_the_flake_and_its_folders_have_nix_files() -> None:
    files = nix_files()
    for expected in ("flake.nix", "modules/lib/fleet.nix", "modules/lib/units.nix", "pkgs/sparkfleet.nix"):
        assert expected in files


@pytest.mark.parametrize("rel", nix_files())
def test_parses(rel: str) -> None:
    proc = subprocess.run(
        ["nix-instantiate", "--parse", str(REPO / rel)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
