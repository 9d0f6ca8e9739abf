"""The head host's Prometheus, evaluated with NixOS's real services.prometheus module in place of
the stand-in (tests/nix/stubs/prometheus-options.nix), must come out the same.

The real module lives only in full nixpkgs (4.4 GB), which is not among the Nix inputs the test
suite reads offline; this check runs where a checkout of it is:

    .venv/bin/python -m tests.nix.real_prometheus /path/to/nixpkgs

It prints one JSON line and exits 1 when the two differ (0 when they agree).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from .conftest import REPO, nix_eval, nix_str

STUBS = Path(__file__).parent / "stubs"
PROMETHEUS = "nixos/modules/services/monitoring/prometheus/default.nix"


def head_prometheus(nixpkgs: Path, root: Path, extra: str) -> dict:
    """dgx1's services.prometheus (with its prometheus.yml) as the eval-host stand-in evaluates it."""
    args = f"nixpkgsLib = {nix_str(nixpkgs / 'lib')}; fleetRoot = {nix_str(root)}; host = \"dgx1\"; "
    args += f"hostModule = {nix_str(REPO / 'hosts' / 'dgx1')}; extra = {extra};"
    return nix_eval(f"(import {STUBS / 'eval-host.nix'} {{ {args} }}).prometheus", timeout=180)


def compare(nixpkgs: Path) -> dict:
    real = nixpkgs / PROMETHEUS
    if not real.is_file():
        raise SystemExit(f"{nixpkgs}: no {PROMETHEUS} (give a full nixpkgs checkout)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "fleet"
        shutil.copytree(REPO / "hosts", root / "hosts", ignore=shutil.ignore_patterns("dgx*"))
        shutil.copytree(REPO / "recipes", root / "recipes", ignore=shutil.ignore_patterns("reports"))
        stand_in = STUBS / "prometheus-options.nix"
        swap = f"{{ disabledModules = [ {nix_str(stand_in)} ]; imports = [ {nix_str(real)} ]; }}"
        ours = head_prometheus(nixpkgs, root, "{ }")
        theirs = head_prometheus(nixpkgs, root, swap)
    jobs = len(ours["yml"]["scrape_configs"])
    return {"same": ours == theirs, "scrape_jobs": jobs, "nixpkgs": str(nixpkgs)}


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    result = compare(Path(sys.argv[1]).resolve())
    print(json.dumps(result))
    return 0 if result["same"] else 1


if __name__ == "__main__":
    sys.exit(main())
