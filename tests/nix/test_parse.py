"""Every .nix file in the repo parses (nix-instantiate --parse), so a syntax slip fails here, not in CI."""

from __future__ import annotations

import subprocess

import pytest

from .conftest import REPO, requires_nix

pytestmark = [pytest.mark.nix, requires_nix]



def nix_files() -> list[str]:
    """The repository's own .nix files, committed or not (git-ignored folders such as the Nix
    inputs' checkouts and the Nix chroot are not the repository's)."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard", "*.nix"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return sorted(rel for rel in listed if (REPO / rel).is_file())


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
