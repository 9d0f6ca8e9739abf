"""flake.lock is facts: every entry names a revision and the hash of exactly that revision.

Nothing here is fetched. Each input whose git bundle (tests/nix/inputs.py) holds the locked
revision is recomputed: `git archive REV | tar -x` is what GitHub's tarball of it holds (none of
these repositories has .gitattributes or submodules), `nix hash path` of that tree is the narHash,
and the commit's timestamp is lastModified. An input's own inputs are locked as its own flake.lock
locks them, except nixpkgs, which follows ours. nixpkgs itself is not in a bundle (4.4 GB): its
entry is the one srvos's lock records (test_input_floors.py).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from . import inputs
from .conftest import REPO, nix_eval, requires_nix

pytestmark = [pytest.mark.nix, requires_nix]

NIX_HASH_PATH = ("nix", "--extra-experimental-features", "nix-command", "hash", "path", "--type", "sha256")


def test_flake_lock_matches_the_flake_inputs() -> None:
    lock = json.loads((REPO / "flake.lock").read_text())
    inputs = nix_eval(f"builtins.attrNames (import {REPO / 'flake.nix'}).inputs")
    nodes = lock["nodes"]
    assert lock["version"] == 7 and sorted(nodes[lock["root"]]["inputs"]) == sorted(inputs)
    for name, node in nodes.items():
        if name == lock["root"]:
            continue
        locked = node["locked"]
        assert locked["type"] == "github", name
        assert len(locked["rev"]) == 40 and int(locked["rev"], 16) >= 0, name
        assert locked["narHash"].startswith("sha256-") and len(locked["narHash"]) == 51, name
        assert isinstance(locked["lastModified"], int), name
        for dep in node.get("inputs", {}).values():
            assert resolve(lock, dep) in nodes, (name, dep)
    assert re.fullmatch(r"nixos-\d\d\.\d\d", nodes["nixpkgs"]["original"]["ref"])  # a release branch
    # one nixpkgs: every input that takes nixpkgs follows ours, so nothing is evaluated or built twice
    root = nodes[lock["root"]]["inputs"]
    for name in ("deploy-rs", "nixos-dgx-spark", "srvos"):
        assert nodes[root[name]]["inputs"]["nixpkgs"] == ["nixpkgs"], name
    locked_nixpkgs = [n for n, v in nodes.items() if v.get("locked", {}).get("repo") == "nixpkgs"]
    assert locked_nixpkgs == ["nixpkgs"]


def resolve(lock: dict, ref: str | list[str]) -> str:
    """A lock input reference to its node: a node name, or a follows path from the root."""
    if isinstance(ref, str):
        return ref
    node = lock["root"]
    for step in ref:
        node = resolve(lock, lock["nodes"][node]["inputs"][step])
    return node


def recomputable() -> list:
    """The lock's GitHub entries (nixpkgs aside) whose bundle holds the locked revision."""
    if inputs.inputs_dir() is None:
        return [pytest.param(None, marks=pytest.mark.skip(reason=inputs.missing()))]
    names = []
    for name, node in sorted(inputs.lock()["nodes"].items()):
        locked = node.get("locked", {})
        repo = f"{locked.get('owner')}/{locked.get('repo')}"
        github = locked.get("type") == "github" and name != "nixpkgs"
        if github and inputs.bundle(repo) and inputs.has_commit(repo, locked["rev"]):
            names.append(name)
    return names


@inputs.requires_inputs("serokell/deploy-rs", "graham33/nixos-dgx-spark", "nix-community/srvos")
def test_the_direct_inputs_are_recomputed() -> None:
    assert {"deploy-rs", "nixos-dgx-spark", "srvos"} <= set(recomputable())  # names, with the folder


@pytest.mark.parametrize("name", recomputable())
def test_locked_narhash_is_the_hash_of_its_locked_rev(tmp_path: Path, name: str) -> None:
    locked = inputs.locked(name)
    repo = f"{locked['owner']}/{locked['repo']}"
    committed = inputs.git("-C", str(inputs.clone(repo)), "log", "-1", "--format=%ct", locked["rev"])
    assert int(committed) == locked["lastModified"]
    tree = inputs.archive(repo, locked["rev"], tmp_path / "src")
    argv = [*NIX_HASH_PATH, str(tree)]
    nar = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()
    assert nar == locked["narHash"]


@inputs.requires_inputs("graham33/nixos-dgx-spark", "nix-community/srvos")
@pytest.mark.parametrize("name", ["nixos-dgx-spark", "srvos"])
def test_transitive_lock_entries_are_the_inputs_own_locks(name: str) -> None:
    """An input's own inputs are locked as its flake.lock (at the locked rev) locks them, except
    nixpkgs, which follows ours: nothing in flake.lock is invented."""
    lock = inputs.lock()
    locked = inputs.locked(name)
    text = inputs.show(f"{locked['owner']}/{locked['repo']}", locked["rev"], "flake.lock")
    assert text is not None, f"{name} at {locked['rev']} has no flake.lock"
    theirs = json.loads(text)
    their_root = theirs["nodes"][theirs["root"]]["inputs"]
    ours = lock["nodes"][name]["inputs"]
    assert sorted(ours) == sorted(their_root)
    assert ours["nixpkgs"] == ["nixpkgs"]

    def walk(their_ref, our_ref) -> None:
        t = theirs["nodes"][their_ref]
        o = lock["nodes"][resolve(lock, our_ref)]
        assert o["locked"] == t["locked"] and o.get("original") == t.get("original")
        for key, ref in (t.get("inputs") or {}).items():
            if isinstance(ref, list):  # a follows inside their lock: from our root through this input
                target = [name, *ref]
                assert resolve(lock, o["inputs"][key]) == resolve(lock, target)
            else:
                walk(ref, o["inputs"][key])

    for key, ref in their_root.items():
        if key != "nixpkgs":
            walk(ref, ours[key])
