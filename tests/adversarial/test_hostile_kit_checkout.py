"""A kit's files run only once they are known to be the kit's: in the kit-checkout tests and in launch.

Two places run a kit's own files. tests/launch/test_kit_checkout.py runs the Aiden kit's
production.sh and imports the EXL3 kit's Python, as root, from the checkout SPARKFLEET_KIT_DIR
names; a directory without .git there had its planted production.sh run before anything was
checked. And a lane's rank runs the kit files [[launch.trees]] binds from the host's pinned
checkout, judged by the agent's probe (pinned rev, clean, every file at the kit's manifest's
sha256), with a window between that probe and the start, and with files the kit's .gitignore hides
from `git status` (a planted __pycache__ beside the serving code on the container's PYTHONPATH)
never looked at. The oracle is the test's own: it planted each file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkfleet.base.errors import ExitCode, SparkfleetError
from sparkfleet.base.jsonable import to_jsonable
from sparkfleet.fleet import inventory
from sparkfleet.lane.recipe import launch_recipe
from sparkfleet.launch.plan import check_kits, kits_request, node_facts, probe_request
from sparkfleet.node import agent, records
from sparkfleet.node.protocol import ProbeRequest, StartRequest
from support.seedkit import ASSET, LANE, MANIFEST, kit_lock, lane_seed, rank_spec, seed_kit

from .tally import bad_input

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SURFACE = "kit-checkout"
AIDEN = "aidendle94/sparkrun-recipes/recipes/deepseek-v4.1-flash/sglang/launch"
EXL3 = "coolbho3k/DeepSeek-v4.1-Flash-2x-DGX-Spark"


@pytest.mark.surface("file:kit sources (SPARKFLEET_KIT_DIR)")
def test_the_kit_checkout_tests_run_nothing_of_a_kit_that_is_not_the_recorded_one(tmp_path, figures):
    """SPARKFLEET_KIT_DIR at a directory without .git holding a planted production.sh and a
    planted release/config.py: each writes `id` to a marker when run or imported."""
    kits, marker = tmp_path / "kits", tmp_path / "ran-as"
    plant = f"id > {marker}-$(basename $0)\nexit 0\n"
    (kits / AIDEN).mkdir(parents=True)
    (kits / AIDEN / "production.sh").write_text("#!/bin/bash\n" + plant)
    (kits / AIDEN / "launch-sgl-dsv41.sh").write_text("#!/bin/bash\n" + plant)
    (kits / EXL3 / "release").mkdir(parents=True)
    py = f"import os\nos.system('id > {marker}-' + os.path.basename(__file__))\n"
    (kits / EXL3 / "release" / "config.py").write_text(py + "def load(*a, **k):\n    return {}\n")
    (kits / EXL3 / "release/runtime/tools").mkdir(parents=True)
    (kits / EXL3 / "release/runtime/tools/portable_node.py").write_text(py)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "tests/launch/test_kit_checkout.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "SPARKFLEET_KIT_DIR": str(kits), "PYTEST_ADDOPTS": ""},
    )  # fmt: skip
    ran = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ran-as"))
    bad_input(figures, SURFACE, refused=not ran)
    assert not ran, f"the planted kit ran: {ran}\n{proc.stdout[-3000:]}"
    assert proc.returncode == 1, proc.stdout[-3000:]
    for lane in ("dsv41-flash-4x-aiden", "dsv41-flash-exl3-2x"):
        assert f"is not {lane}'s kit at " in proc.stdout and "nothing of it was run" in proc.stdout


def _kit_node(tmp_path: Path, **changed: bytes) -> tuple[inventory.Inventory, Path, ProbeRequest]:
    """The EXL3 lane's kit checkout on dgx1 (a real clone at the pin's rev, holding the stand-in
    kit, `changed` as seed_kit takes it), and the agent's probe request for it."""
    inv, checkout = seed_kit(tmp_path, kit_lock(ASSET, MANIFEST, "a" * 64), **changed)
    req = probe_request(inv, launch_recipe(inv, LANE), inv.host("dgx1"))
    req = dataclasses.replace(req, models=[], ports=[], memory=False, display=None, cache_seed=None)
    return inv, checkout, req


@pytest.mark.surface("agent:start")
def test_a_checkout_changed_after_the_probe_is_refused_at_start(tmp_path, figures):
    """The probe judged the checkout as pinned; by the rank's start its serve.py was edited. The
    start judges it again, just before the kit's files run: refused, nothing started."""
    inv, checkout, req = _kit_node(tmp_path)
    check_kits(launch_recipe(inv, LANE), node_facts("dgx1", agent.probe(req)))  # as pinned: no refusal
    (checkout / "release/runtime/serving/serve.py").write_text("import os; os.system('id')\n")
    spec = rank_spec(tmp_path, None, tmp_path / "lane-cache")
    kits = kits_request(inv, launch_recipe(inv, LANE), inv.host("dgx1"))
    start = StartRequest(to_jsonable(spec), kits=kits)
    try:
        agent.start(start)
        refused, message = False, ""
    except SparkfleetError as exc:
        refused, message = exc.exit_code == ExitCode.REFUSED, exc.message
    bad_input(figures, SURFACE, refused)
    assert refused, "a changed kit checkout was started"
    assert "changed in place" in message and "nothing was started" in message and str(checkout) in message
    assert records.load_all(Path(spec.state_dir), spec.lane) == []


@pytest.mark.surface("agent:probe")
def test_a_file_the_kits_gitignore_hides_is_a_change_in_place(tmp_path, figures):
    """A compiled module planted beside the serving code, where the kit's .gitignore keeps it out
    of `git status`: the container has that directory on its PYTHONPATH, so it would run."""
    inv, checkout, req = _kit_node(tmp_path, _dot_gitignore=b"__pycache__/\n*.pyc\n")
    planted = checkout / "release/runtime/serving/__pycache__/combined_worker.cpython-312.pyc"
    planted.parent.mkdir()
    planted.write_bytes(b"\x00planted bytecode")
    facts = node_facts("dgx1", agent.probe(req))
    refused = not all(k["ok"] for k in facts.kits)
    bad_input(figures, SURFACE, refused)
    assert refused, facts.kits
    hidden = r"changed in place \(1 paths, e\.g\. !! release/runtime/serving/"
    with pytest.raises(SparkfleetError, match=hidden):
        check_kits(launch_recipe(inv, LANE), facts)


@pytest.mark.surface("file:kit recipe-lock.json", "agent:probe")
def test_the_lock_of_a_checkout_not_as_pinned_is_not_read(tmp_path, figures):
    """The kit's recipe-lock.json edited in the checkout: the cache seed reads the lock (what to
    copy out of the image, what to unpack) only from a checkout judged as pinned."""
    inv, checkout, req = _kit_node(tmp_path)
    lock = json.loads((checkout / "recipe-lock.json").read_text())
    lock["runtime"]["files"]["kernel-cache.tar"]["sha256"] = "b" * 64
    (checkout / "recipe-lock.json").write_text(json.dumps(lock))
    seed = lane_seed(inv, "docker", "sha256:" + "a" * 64)
    req = dataclasses.replace(req, cache_seed=to_jsonable(seed)).preparing_seed()
    facts = node_facts("dgx1", agent.probe(req))
    refused = facts.cache_seed["ok"] is False and "its lock is not read" in facts.cache_seed["problem"]
    bad_input(figures, SURFACE, refused)
    assert refused, facts.cache_seed
    assert "changed in place" in facts.cache_seed["problem"] and facts.cache_seed["hint"]
    assert not Path(seed.store).exists()  # nothing copied out of the image, nothing unpacked
