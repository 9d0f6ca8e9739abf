"""A kit's runtime tree on each host ([[launch.trees]]): bound when there, refused when not.

The EXL3 kit's container runs serve.py, conservative.yaml and combined_worker.py from the kit's
release/runtime/serving, and the MXFP8 AOT library from release/runtime/aot (portable_node.py
docker_command() at 878e0ee): none of them is in the image. sparkfleet binds them from the
exl3-kit pin's checkout on each host; a host without it is refused (exit 5) before anything starts,
naming the checkout and why: absent, not a git checkout, at another commit, changed in place, or
lacking a needed file or its pinned sha256 (the node's agent judges it as `verify` does). The node
side is the agent's own probe, run here on this machine's filesystem, over real git checkouts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from sparkfleet.base.errors import ExitCode, InventoryError, SparkfleetError
from sparkfleet.fleet import inventory
from sparkfleet.fleet.inventory import state_dir_of
from sparkfleet.lane.manifest import BindManifest
from sparkfleet.lane.recipe import launch_recipe
from sparkfleet.lane.spec import build_spec
from sparkfleet.launch.plan import check_kits, node_facts, probe_request
from sparkfleet.node.agent import probe
from sparkfleet.ops.doctor import kit_checks
from support.kitrepo import commit_files, pinned_checkout
from support.lanefleet import repo_fleet

LANE = "dsv41-flash-exl3-2x"
REV = "878e0eecd893fadc69ad2d58b2df0fabb0fae2ee"
AOT_SHA = "6abdf60fb353da15d87030427e16a982e7819a6f479563b8acfde81110e78bf4"  # portable_node.py AOT_SHA


def _fleet(tmp_path: Path) -> inventory.Inventory:
    """The repository's fleet, dgx1's state_dir moved under tmp_path (where its checkout goes)."""
    root = repo_fleet(tmp_path / "fleet")
    fleet = root / "hosts" / "fleet.toml"
    text = fleet.read_text()
    state = tmp_path / "dgx1-state"
    fleet.write_text(text.replace('[hosts.dgx1]\n', f'[hosts.dgx1]\nstate_dir = "{state}"\n', 1))
    return inventory.load(root)


def _probe(inv: inventory.Inventory, host: str):
    recipe = launch_recipe(inv, LANE)
    req = probe_request(inv, recipe, inv.host(host))
    req = dataclasses.replace(req, models=[], ports=[], memory=False)  # only the kit: the agent's own check
    return recipe, node_facts(host, probe(req))


STAND_INS = {  # the kit's files the lane binds, as stand-ins (CI has no network)
    "release/runtime/serving/serve.py": b"print('serve')\n",
    "release/runtime/serving/conservative.yaml": b"max_num_seqs: 6\n",
    "release/runtime/serving/combined_worker.py": b"class CombinedWorker: ...\n",
    "release/runtime/aot/mxfp8_gemm_cutlass_sm120/mxfp8_gemm_cutlass_sm120.so": b"stand-in\n",
}
MANIFEST = "release/runtime/bundle-manifest.json"  # the kit's own, as the recipe names it
AOT = "aot/mxfp8_gemm_cutlass_sm120/mxfp8_gemm_cutlass_sm120.so"


def _listing(**overrides: str | None) -> dict:
    """The kit's bundle-manifest.json for STAND_INS (names relative to release/runtime, as the
    kit writes them), each entry's sha256 replaced or (None) left out as `overrides` say."""
    files = {}
    for rel, data in STAND_INS.items():
        name = rel.removeprefix("release/runtime/")
        files[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    for name, sha in overrides.items():
        name = name.replace("__", "/").replace("_dot_", ".")
        if sha is None:
            files.pop(name)
        else:
            files[name] = {"bytes": 1, "sha256": sha}
    return {"files": files}


def _checkout(tmp_path: Path, inv: inventory.Inventory, listing: dict) -> tuple[inventory.Inventory, Path]:
    """The exl3-kit pin's checkout on dgx1 as stage leaves it: a real git clone, detached at the
    pin's rev, of a repository holding STAND_INS and `listing` as the kit's manifest; the pin's
    rev is that commit (a stand-in cannot have 878e0ee's). Called again, it replaces both."""
    repo = tmp_path / "exl3-kit-repo"
    rev = commit_files(repo, {**STAND_INS, MANIFEST: json.dumps(listing).encode()})
    checkout = pinned_checkout(inv.root, "exl3-kit", repo, rev, state_dir_of(inv.host("dgx1")))
    return inventory.load(inv.root), checkout


def test_a_host_without_the_kits_checkout_is_refused_naming_it(tmp_path):
    inv = _fleet(tmp_path)
    recipe, facts = _probe(inv, "dgx1")
    final = state_dir_of(inv.host("dgx1")) / "kits" / "exl3-kit" / REV
    with pytest.raises(SparkfleetError) as exc:
        check_kits(recipe, facts)
    assert exc.value.exit_code == ExitCode.REFUSED
    repo = "coolbho3k/DeepSeek-v4.1-Flash-2x-DGX-Spark"
    assert f"dgx1: the kit is not there as pinned; kit exl3-kit {repo}@{REV[:10]} at {final}: absent" in (
        exc.value.message
    )
    assert exc.value.hint.startswith(f"sparkfleet stage dgx1 --lane {LANE} (clones ")  # staging fetches it
    assert f"into {final} on dgx1" in exc.value.hint
    (check,) = kit_checks("dgx1", facts.kits)
    assert check.ok is False and check.refuses and check.hint == exc.value.hint

    serving = final / "release" / "runtime" / "serving"  # the files, written in place: no checkout
    serving.mkdir(parents=True)
    for name in ("serve.py", "conservative.yaml", "combined_worker.py"):
        (serving / name).write_text("# stand-in\n")
    recipe, facts = _probe(inv, "dgx1")
    with pytest.raises(SparkfleetError, match=r"at .*: not a git checkout"):
        check_kits(recipe, facts)


def test_a_checkout_edited_in_place_is_refused_as_the_kit_refuses_it(tmp_path):
    """Before, launch checked only that the needed files were there: an edited serve.py started
    (verify and doctor said ✗). The kit's own preflight refuses any runtime file that differs from
    its manifest, so launch now refuses what verify refuses."""
    inv, checkout = _checkout(tmp_path, _fleet(tmp_path), _listing())
    recipe, facts = _probe(inv, "dgx1")
    check_kits(recipe, facts)  # the pinned commit, clean, every file at the kit's manifest's sha256
    serve = checkout / "release" / "runtime" / "serving" / "serve.py"
    serve.write_text("print('patched by hand')\n")
    recipe, facts = _probe(inv, "dgx1")
    edited = r"changed in place \(1 paths, e\.g\. M release/runtime/serving/serve\.py\)"
    with pytest.raises(SparkfleetError, match=edited):
        check_kits(recipe, facts)


def test_every_file_is_checked_against_the_kits_own_manifest(tmp_path):
    """The recipe restates no sha256: each tree names the kit's bundle-manifest.json, and every file
    it lists under the tree must be there at its sha256 — the AOT library at the kit's AOT_SHA (a
    stand-in is not), a serving file the manifest lists but the checkout lacks, and a needed file
    the manifest does not list are each refused, naming the file."""
    inv = _fleet(tmp_path)
    assert all(t.manifest == MANIFEST and not t.sha256 for t in launch_recipe(inv, LANE).trees)
    inv, checkout = _checkout(tmp_path, inv, _listing(**{AOT.replace("/", "__"): AOT_SHA}))
    recipe, facts = _probe(inv, "dgx1")
    so = checkout / "release" / "runtime" / AOT
    wrong = rf"{so} \(sha256 [0-9a-f]{{12}}…, the kit pins 6abdf60fb353…\)"
    with pytest.raises(SparkfleetError, match=wrong):
        check_kits(recipe, facts)  # the stand-in is not the kit's AOT_SHA: refused like the kit
    extra = _listing(**{"serving__tp_pad_dot_py": "0" * 64})  # listed by the kit, absent here
    inv, checkout = _checkout(tmp_path, inv, extra)
    recipe, facts = _probe(inv, "dgx1")
    with pytest.raises(SparkfleetError, match=r"serving/tp_pad\.py"):
        check_kits(recipe, facts)
    inv, checkout = _checkout(tmp_path, inv, _listing(**{"serving__combined_worker_dot_py": None}))
    recipe, facts = _probe(inv, "dgx1")
    with pytest.raises(SparkfleetError, match=r"combined_worker\.py \(not in the kit's manifest"):
        check_kits(recipe, facts)


def test_a_present_tree_is_bound_read_only_where_the_kit_reads_it(tmp_path):
    inv, checkout = _checkout(tmp_path, _fleet(tmp_path), _listing())
    checkout = checkout / "release" / "runtime"
    recipe, facts = _probe(inv, "dgx1")
    check_kits(recipe, facts)  # everything there and as the kit's manifest lists it: no refusal
    empty = BindManifest("dgx1", (), (), {})
    spec = build_spec(inv, recipe, "dgx1", empty, {"dgx1": None}, fabric_unknown_ok=True)
    kit = {b.target: b for b in spec.binds if b.origin == "kit"}
    assert kit["/opt/ds41-serving"].source == checkout / "serving" and kit["/opt/ds41-serving"].read_only
    aot = "/usr/local/lib/python3.12/dist-packages/flashinfer/data/aot/mxfp8_gemm_cutlass_sm120"
    assert kit[aot].source == checkout / "aot" / "mxfp8_gemm_cutlass_sm120" and kit[aot].read_only


def test_a_tree_must_name_a_git_pin_and_stay_inside_it(tmp_path):
    root = repo_fleet(tmp_path / "fleet")
    recipe = root / "recipes" / LANE / "recipe.toml"
    text = recipe.read_text()
    recipe.write_text(text.replace('pin = "exl3-kit"\npath = "release/runtime/serving"',
                                   'pin = "exl3-kit-image"\npath = "release/runtime/serving"'))  # fmt: skip
    with pytest.raises(InventoryError, match=r"launch.trees\[0\].pin: 'exl3-kit-image' is not a git pin"):
        launch_recipe(inventory.load(root), LANE)
    recipe.write_text(text.replace('path = "release/runtime/serving"', 'path = "../../etc"'))
    with pytest.raises(InventoryError, match=r"launch.trees\[0\].path: '../../etc' must stay inside"):
        launch_recipe(inventory.load(root), LANE)
    below = 'manifest = "release/runtime/aot/manifest.json"'  # not in or above the serving tree
    recipe.write_text(text.replace('manifest = "release/runtime/bundle-manifest.json"', below, 1))
    with pytest.raises(InventoryError, match=r"launch.trees\[0\].manifest: .* must be a file of the"):
        launch_recipe(inventory.load(root), LANE)
    named = 'manifest = "release/runtime/bundle-manifest.json"'
    restated = named + '\nsha256 = { "serve.py" = "' + "0" * 64 + '" }'
    recipe.write_text(text.replace(named, restated, 1))
    with pytest.raises(InventoryError, match=r"sha256 restates what the kit's manifest"):
        launch_recipe(inventory.load(root), LANE)
