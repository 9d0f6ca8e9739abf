"""A kit checkout whose manifest, or whose files, lead out of the checkout: refused, nothing outside read.

Launch, `verify` and `doctor` check each [[launch.trees]] tree of a kit checkout against the kit's own
bundle-manifest.json: every file it lists under the tree must be there at its sha256. A manifest
name is joined onto the checkout, and a file is hashed where its path leads: a name
`serving/../../…/secret` (or an absolute one), a committed link out of the checkout (a file, the
tree's directory, the manifest itself) had a file outside the checkout hashed, its hash printed in
the verdict, or a directory outside bound into the container as the kit's. Here each is planted in a
real git checkout at the pin's rev and judged by the node agent's own probe; the test's oracle is
where it planted them. A refusal must name the checkout and print nothing of the outside file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.fleet import inventory
from sparkfleet.fleet.inventory import state_dir_of
from sparkfleet.lane.recipe import launch_recipe
from sparkfleet.launch.plan import check_kits, node_facts, probe_request
from sparkfleet.node.agent import probe
from support.kitrepo import Link, commit_files, pinned_checkout
from support.lanefleet import repo_fleet

from .tally import bad_input

LANE = "dsv41-flash-exl3-2x"
SURFACE = "kit-manifest"
RUNTIME = "release/runtime"
MANIFEST = f"{RUNTIME}/bundle-manifest.json"
SECRET = b"root:$6$not-the-kits$...:19000:0:99999:7:::\n"  # what a hash must never be printed of
STAND_INS = {
    f"{RUNTIME}/serving/serve.py": b"print('serve')\n",
    f"{RUNTIME}/serving/conservative.yaml": b"max_num_seqs: 6\n",
    f"{RUNTIME}/serving/combined_worker.py": b"class CombinedWorker: ...\n",
    f"{RUNTIME}/aot/mxfp8_gemm_cutlass_sm120/mxfp8_gemm_cutlass_sm120.so": b"stand-in\n",
}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _listing(files: dict[str, bytes]) -> dict:
    """The kit's bundle-manifest.json for `files` (names relative to release/runtime)."""
    rows = {n.removeprefix(f"{RUNTIME}/"): {"bytes": len(d), "sha256": _sha(d)} for n, d in files.items()}
    return {"files": rows}


def _hostile(case: str, outside: Path) -> dict[str, bytes | Link]:
    """The kit repository's files for `case`, each leading out of the checkout to `outside`."""
    files: dict[str, bytes | Link] = dict(STAND_INS)
    listing = _listing(STAND_INS)
    up = "../" * 12  # from release/runtime/serving/ past the checkout, past / (the kernel stops at /)
    if case == "dotdot-name":  # listed under the serving tree, leading out by `..`
        listing["files"][f"serving/{up}{str(outside / 'shadow').lstrip('/')}"] = {"sha256": "0" * 64}
    elif case == "absolute-name":
        listing["files"][str(outside / "shadow")] = {"sha256": "0" * 64}
    elif case == "file-link":  # a committed link where the kit's file belongs, its sha256 wrong
        files[f"{RUNTIME}/serving/conservative.yaml"] = Link(str(outside / "shadow"))
    elif case == "file-link-listed":  # ...listed at the outside file's own sha256: it would pass
        files[f"{RUNTIME}/serving/conservative.yaml"] = Link(str(outside / "shadow"))
        listing["files"]["serving/conservative.yaml"]["sha256"] = _sha(SECRET)
    elif case == "tree-link":  # the whole serving tree a link to a directory outside
        for name in ("serve.py", "conservative.yaml", "combined_worker.py"):
            del files[f"{RUNTIME}/serving/{name}"]
        files[f"{RUNTIME}/serving"] = Link(str(outside / "serving"))
    elif case == "manifest-link":
        files[MANIFEST] = Link(str(outside / "bundle-manifest.json"))
        return files
    files[MANIFEST] = json.dumps(listing).encode()
    return files


def _outside(tmp_path: Path) -> Path:
    """Files outside the checkout a hostile kit points at: a secret, a serving tree that would pass
    the manifest's checks (the stand-ins' own bytes), and a manifest listing them."""
    outside = tmp_path / "outside"
    (outside / "serving").mkdir(parents=True)
    (outside / "shadow").write_bytes(SECRET)
    for name, data in STAND_INS.items():
        if "/serving/" in name:
            (outside / "serving" / Path(name).name).write_bytes(data)
    (outside / "bundle-manifest.json").write_text(json.dumps(_listing(STAND_INS)))
    return outside


@pytest.mark.surface("file:kit bundle-manifest.json", "agent:probe")
@pytest.mark.parametrize(
    "case", ["dotdot-name", "absolute-name", "file-link", "file-link-listed", "tree-link", "manifest-link"]
)
def test_a_manifest_or_link_leading_out_of_the_checkout_is_refused(tmp_path, figures, case):
    root = repo_fleet(tmp_path / "fleet")
    fleet = root / "hosts" / "fleet.toml"
    state = tmp_path / "dgx1-state"
    fleet.write_text(fleet.read_text().replace("[hosts.dgx1]\n", f'[hosts.dgx1]\nstate_dir = "{state}"\n', 1))
    outside = _outside(tmp_path)
    repo = tmp_path / "kit-repo"
    rev = commit_files(repo, _hostile(case, outside))
    inv = inventory.load(root)
    checkout = pinned_checkout(root, "exl3-kit", repo, rev, state_dir_of(inv.host("dgx1")))
    inv = inventory.load(root)
    recipe = launch_recipe(inv, LANE)
    req = dataclasses.replace(  # only the kit: the agent's check
        probe_request(inv, recipe, inv.host("dgx1")), models=[], ports=[], memory=False, cache_seed=None
    )
    answer = probe(req)
    facts = node_facts("dgx1", answer)
    said = json.dumps(answer)
    refused = not all(k["ok"] for k in facts.kits)
    bad_input(figures, SURFACE, refused)
    assert refused, facts.kits
    assert _sha(SECRET)[:12] not in said, "a hash of a file outside the checkout was printed"
    with pytest.raises(SparkfleetError) as exc:
        check_kits(recipe, facts)
    assert str(checkout) in exc.value.message
    assert "leaves the checkout" in exc.value.message or "a link out of the checkout" in exc.value.message
