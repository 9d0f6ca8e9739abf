"""The stand-ins (tests/nix/stubs) for modules that need full nixpkgs say what the real ones say.

The real srvos and nixos-dgx-spark modules need full nixpkgs (srvos's server module sets about 40
NixOS options; nixos-dgx-spark's builds a kernel and the NVIDIA driver), so the flake and module
tests evaluate stand-ins. Each assignment a stand-in makes must appear, the same, in the real
module's source at the locked revision (read from its git bundle), and each module output the flake
imports must exist there: a stand-in that drifts from its input fails here. What the real modules
set beyond the stand-ins is evaluated only where full nixpkgs is (CI's nixos-eval job).

NixOS's own services.prometheus (stubs/prometheus-options.nix) is declared, not set, and its real
module lives only in full nixpkgs (4.4 GB, not among the Nix inputs tests read): tests/nix/
real_prometheus.py compares the two where a full nixpkgs checkout is (docs/nix.md says how).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from . import inputs
from .conftest import REPO, nixpkgs_lib, requires_nix, requires_nixpkgs_lib
from .real_prometheus import PROMETHEUS

pytestmark = [pytest.mark.nix]

STUBS = Path(__file__).parent / "stubs"
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


@requires_nix
@requires_nixpkgs_lib
def test_the_real_prometheus_check_runs_where_a_full_nixpkgs_is(tmp_path: Path) -> None:
    """CI's nixos-eval job runs tests/nix/real_prometheus.py on full nixpkgs; here it runs on a
    nixpkgs made of the real lib and the stand-in copied to the real module's path, so the check's
    own machinery (the swap, the evaluation, the comparison, its JSON line and exit code) is tried."""
    nixpkgs = tmp_path / "nixpkgs"
    (nixpkgs / PROMETHEUS).parent.mkdir(parents=True)
    (nixpkgs / "lib").symlink_to(nixpkgs_lib())
    shutil.copy(STUBS / "prometheus-options.nix", nixpkgs / PROMETHEUS)
    done = subprocess.run([sys.executable, "-m", "tests.nix.real_prometheus", str(nixpkgs)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["same"] is True and result["scrape_jobs"] == 3  # dgx1 heads every lane
