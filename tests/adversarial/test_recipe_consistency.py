"""Property: whatever `inventory check` accepts, launch accepts too — no late surprises.

An oracle written here (`known_bad`), independent of the checker, says which generated recipes are
bad; only those count as bad inputs (a figure counting whatever the checker itself reported could
never find a bad recipe the checker accepts).

Hypothesis edits the TP4 recipe's world shape, env, command flags, cache dir, receipt roots and
weight-load regex. When `inventory check` (schema + cross-file + every pre-node check launch runs)
finds nothing, launch's own gate (`plan.check_shape`) and the per-rank spec (`build_spec`, with
every node's fabric facts) must succeed for every host; when it finds something, launch refuses.
"""

from __future__ import annotations

import posixpath
import re
import shutil
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.facts.fabric import FabricFacts
from sparkfleet.fleet import inventory
from sparkfleet.lane.manifest import ModelState, SnapshotFile, build_manifest
from sparkfleet.lane.recipe import launch_recipe
from sparkfleet.lane.spec import DERIVED_KEYS, build_spec, recipe_problems
from sparkfleet.launch.plan import check_shape

from .tally import bad_input, count
from .test_inventory_fuzz import REPO, write

pytestmark = pytest.mark.slow

MIA = "recipes/dsv41-flash-4x-mia/recipe.toml"
LANE = "dsv41-flash-4x-mia"

# Mostly benign choices with hostile ones mixed in, so both sides of the property are exercised.
ENV_KEYS = st.sampled_from(
    ["NCCL_DEBUG", "NCCL_ALGO", "_OK", "HF_TOKEN", "tp_size", "Node_Rank", "X-Y", "9A"]
)
FLAGS = st.sampled_from(
    [("--tp", "{tp}"), ("--nnodes", "{nnodes}"), ("--node-rank", "{node_rank}"), ("--ep", "{ep}"),
     ("--tp", "4"), ("--port", "1"), ("--nnodes", "{nope}"), ("--ep-size", "{tp}")]
)  # fmt: skip


HOSTS = 4  # the mia lane's hosts
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def known_bad(tp, ep, env, flags, cache_dir, roots, regex) -> list[str]:
    """Why this recipe cannot run, decided from the generated values alone (never from the checker)."""
    why = []
    if tp % HOSTS or tp % ep:
        why.append(f"tp {tp} does not split over {HOSTS} hosts and ep {ep}")
    why += [f"env key {k!r}" for k in env if not ENV_NAME.fullmatch(k) or k.upper() in DERIVED_KEYS]
    for flag, value in flags:
        if value == "{nope}":
            why.append(f"{flag} {value}: no such placeholder")
        elif flag == "--tp" and value == "4" and tp != 4:
            why.append(f"--tp 4 against tp {tp}")
        elif flag == "--ep-size" and value == "{tp}" and ep != tp:
            why.append(f"--ep-size {{tp}} against ep {ep}")
        elif flag == "--port" and value == "1":
            why.append("--port 1 against the lane's port")
    if cache_dir is not None and (not cache_dir.startswith("{state_dir}/") or ".." in cache_dir.split("/")):
        why.append(f"cache_dir {cache_dir}")
    why += [
        f"receipt root {r}"
        for r in roots
        if not r.startswith("/cache/") or ".." in r.split("/") or r != posixpath.normpath(r)
    ]
    if regex is not None:
        try:
            re.compile(regex)
        except re.error:
            why.append(f"regex {regex!r}")
    return why


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("inv")
    shutil.copytree(REPO / "hosts", root / "hosts", ignore=shutil.ignore_patterns("dgx*"))
    shutil.copytree(REPO / "recipes", root / "recipes", ignore=shutil.ignore_patterns("reports"))
    return root


@pytest.mark.surface("file:recipe.toml")
@given(
    tp=st.sampled_from([4, 4, 4, 8, 2, 3, 6]),
    ep=st.sampled_from([1, 1, 1, 2, 4, 3]),
    env=st.dictionaries(ENV_KEYS, st.sampled_from(["1", "x y", ""]), max_size=2),
    flags=st.lists(FLAGS, max_size=1),
    cache_dir=st.sampled_from(
        [None, None, "{state_dir}/cache/{lane}", "{state_dir}/c", "{state_dir}/../c", "/usr"]
    ),
    roots=st.sampled_from(
        [[], [], ["/cache/a"], ["/cache/x/y"], ["/cache"], ["/elsewhere/a"], ["/cache/a/../b"]]
    ),
    regex=st.sampled_from([None, None, r"elapsed=([0-9.]+)", r"elapsed=(", r"[a-"]),
)
def test_what_inventory_check_accepts_launch_accepts(
    base, tmp_path_factory, figures, tp, ep, env, flags, cache_dir, roots, regex
):
    root = tmp_path_factory.mktemp("recipe")
    shutil.copytree(base, root, dirs_exist_ok=True)
    doc = tomllib.loads((root / MIA).read_text())
    doc["world"].update(tp=tp, ep=ep)
    doc["launch"]["env"] = env
    doc["launch"]["command"] = [*doc["launch"]["command"], *(x for pair in flags for x in pair)]
    if tp in (2, 8):
        doc["world"]["launcher"] = f"tp{tp}"  # the launcher names the tp it gates
    if tp in (2, 8):
        doc["world"]["launcher"] = f"tp{tp}"  # the launcher names the tp it gates
    doc["launch"]["receipt_roots"] = roots
    for key, value in (("cache_dir", cache_dir), ("weight_load_regex", regex)):
        if value is not None:
            doc["launch"][key] = value
    write(root / MIA, doc)
    count(figures, "recipes", "recipes_tried")
    bad = known_bad(tp, ep, env, flags, cache_dir, roots, regex)

    checked = inventory.check(root)
    problems = list(checked.problems)
    inv = checked.inventory
    if inv is not None and LANE in inv.lanes:
        recipe = launch_recipe(inv, LANE)
        problems += recipe_problems(inv, recipe)
    if bad:
        bad_input(figures, "recipes", refused=bool(problems))
        assert problems, f"inventory check accepted a recipe that cannot run: {bad}"
    elif problems:
        # refused, though the oracle knows no reason: counted apart, never as a bad input refused
        count(figures, "recipes", "refused_without_a_known_reason")
    if problems:
        with pytest.raises(SparkfleetError):
            loaded = inventory.load(root)
            check_shape(loaded, launch_recipe(loaded, LANE))
        return
    check_shape(inv, recipe)  # launch's gate before any ssh
    fabrics = {
        h: FabricFacts(inv.host(h).fabric_ip or inv.host(h).address, ("rocep1s0f0",), 3, "enp1s0f0np0")
        for h in inv.lane(LANE).hosts
    }
    for h in inv.lane(LANE).hosts:
        host = inv.host(h)
        models = [
            ModelState(m.repo, "c" * 40, (SnapshotFile("config.json", False),), True)
            for m in inv.lane(LANE).models
        ]
        build_spec(
            inv, recipe, h, build_manifest(h, host.local_hub, host.nas_hub, models, recipe.hub_mount), fabrics
        )
    count(figures, "recipes", "recipes_accepted_and_launchable")
