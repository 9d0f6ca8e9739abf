"""Property: an inventory path that reaches systemd-tmpfiles is refused, by key, if tmpfiles would
split or expand it; Python (`inventory check`) and Nix (modules/lib/fleet.nix, which the NixOS
modules build their tmpfiles settings from) refuse the same paths.

local_hub and each [launch].receipt_roots (whose parent becomes a rule) end up in
/etc/tmpfiles.d, which systemd-tmpfiles runs as root: whitespace starts a new field (and a new
rule, where a rule string is split), `%` is a specifier (`/%h` is root's home), `\\` an escape and
quotes are quoting. The oracle here, written independently of the schema, says which values are
bad; every bad one must be refused by both readers naming its key, and no good one may be.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkfleet.fleet import inventory

from .tally import bad_input, count

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FLEET_LIB = REPO / "modules" / "lib" / "fleet.nix"
LANE = "dsv41-flash-exl3-2x"  # heads on dgx1 and declares receipt roots
# the characters tmpfiles.d's parser gives a meaning (extract_first_word: WHITESPACE, quotes,
# C escapes; specifiers), and the controls no path of ours may carry
TMPFILES_SPECIAL = re.compile(r"""[\x00-\x20\x7f%\\"']""")

PIECES = st.sampled_from(
    [
        "a",
        "hub",
        "/",
        " ",
        "\t",
        "\n",
        "%",
        "%h",
        "%%",
        "\\",
        "\\x20",
        "'",
        '"',
        "$HOME",
        "*",
        "é",
        "\u00a0",
        "-",
        "..",
    ]
)
PATHS = st.lists(PIECES, min_size=1, max_size=6).map(lambda parts: "/" + "".join(parts))

requires_nix = pytest.mark.skipif(
    shutil.which("nix-instantiate") is None, reason="nix-instantiate not installed"
)


def tmpfiles_safe(path: str) -> bool:
    """What systemd-tmpfiles reads as the one path it is (a `..` component it refuses itself)."""
    return path.startswith("/") and not TMPFILES_SPECIAL.search(path)


def schema_safe(path: str) -> bool:
    """What the schema allows on top: no `..` component (absPath, for every inventory path)."""
    return tmpfiles_safe(path) and ".." not in path.split("/")


def toml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def nix_facts_error(root: Path, host: str) -> str | None:
    """Nix's error for host's facts (None when fleet.nix gives them)."""
    expr = f"builtins.toJSON ((import {FLEET_LIB}).fromRoot {json.dumps(str(root))}).allFacts.{host}.tmpfiles"
    proc = subprocess.run(
        ["nix-instantiate", "--eval", "--strict", "--expr", expr], capture_output=True, text=True, check=False
    )
    return proc.stderr if proc.returncode != 0 else None


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tmpfiles")
    shutil.copytree(REPO / "hosts", root / "hosts", ignore=shutil.ignore_patterns("dgx*"))
    shutil.copytree(REPO / "recipes", root / "recipes", ignore=shutil.ignore_patterns("reports"))
    return root


def replace_line(path: Path, key: str, value: str) -> None:
    lines = path.read_text().split("\n")
    (index,) = [i for i, line in enumerate(lines) if line.startswith(f"{key} =")]
    lines[index] = f"{key} = {value}"
    path.write_text("\n".join(lines))


@requires_nix
@pytest.mark.surface("file:hosts/fleet.toml", "file:recipe.toml")
@given(where=st.sampled_from(["local_hub", "receipt_roots"]), path=PATHS)
def test_paths_tmpfiles_would_split_are_refused_by_both_readers(base, tmp_path_factory, figures, where, path):
    root = tmp_path_factory.mktemp("case")
    shutil.copytree(base, root, dirs_exist_ok=True)
    if where == "local_hub":
        replace_line(root / "hosts" / "fleet.toml", "local_hub", toml_string(path))
        python_key, nix_key = "defaults.local_hub", "hosts/fleet.toml: defaults.local_hub"
    else:
        recipe = root / "recipes" / LANE / "recipe.toml"
        roots = tomllib.loads(recipe.read_text())["launch"]["receipt_roots"]
        replace_line(recipe, "receipt_roots", "[" + ", ".join(map(toml_string, [path, *roots[1:]])) + "]")
        python_key = "launch.receipt_roots[0]"
        nix_key = f"recipes/{LANE}/recipe.toml: launch.receipt_roots[0]"
    problems = [str(p) for p in inventory.check(root).problems]
    nix_error = nix_facts_error(root, "dgx1")
    count(figures, "inventory-tmpfiles-paths", "values_tried")
    python_refused = any(python_key in p for p in problems)
    # the oracles above, not the schema, say which values are bad (a safe path has a safe parent)
    if not tmpfiles_safe(path):
        refused = python_refused and nix_error is not None and nix_key in nix_error
        bad_input(figures, "inventory-tmpfiles-paths", refused=refused)
        assert python_refused, f"{where} = {path!r} passed inventory check: {problems}"
        assert nix_error is not None, f"{where} = {path!r} became tmpfiles rules in Nix"
        assert nix_key in nix_error, nix_error[-1500:]
    else:
        assert nix_error is None, nix_error[-1500:]
        assert python_refused == (not schema_safe(path)), (path, problems)
