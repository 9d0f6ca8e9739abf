"""Issue 20.5–8: tampered, malformed and concurrently written generations.

A record is validated before anything acts on it (its lane is its folder's, its recipe_sha256 is
its recipe_text's, its fields have their types); history skips a bad file naming it, promote and
rollback refuse naming it; rollback validates and plans before it stops the running lane; two
promotes at once merge under a lock; temps left by `kill -9` are swept by the next writer.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet.base.atomic import TEMP_MARK
from sparkfleet.base.errors import ExitCode, SparkfleetError
from sparkfleet.cli import main as cli
from sparkfleet.launch import generations as gens
from sparkfleet.launch.generations import GenerationError
from support.lanefleet import demo_recipe, free_port, write_fleet

LANE = "demo"


# make test runs modules on xdist workers: the lanes this module launches on this machine share
# its ports (the rendezvous port 20000, the demo's serving ports), so every such module runs on
# one worker ("local_lanes"), one at a time
pytestmark = pytest.mark.xdist_group("local_lanes")

@pytest.fixture
def root(tmp_path) -> Path:
    host = {"address": "localhost", "ssh_user": "root", "local_hub": str(tmp_path / "hub"),
            "nas_hub": str(tmp_path / "nas"), "state_dir": str(tmp_path / "state")}  # fmt: skip
    return write_fleet(tmp_path / "fleet", {"spark": host}, {LANE: demo_recipe(["spark"], free_port())})


def record(root: Path, t: float, **over) -> dict:
    recipe = (root / "recipes" / LANE / "recipe.toml").read_text()
    gen = {"id": gens.utc_id(t), "lane": LANE, "created_at": t, "status": "ready", "good": False,
           "image": None, "pins": {}, "recipe_text": recipe,
           "recipe_sha256": hashlib.sha256(recipe.encode()).hexdigest(),
           "fleet_text": (root / "hosts" / "fleet.toml").read_text(), "hosts": ["spark"],
           "boot": {"cache": "cold", "time_to_ready_s": 1.0, "regression": None}, "drift": [],
           "rolled_back_from": None}  # fmt: skip
    gen.update(over)
    return gen


def plant(root: Path, name: str, doc) -> Path:
    d = gens.generations_dir(root, LANE)
    d.mkdir(parents=True, exist_ok=True)
    p = d / name
    p.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    return p


def plant_gen(root: Path, gen: dict) -> Path:
    return plant(root, f"{gen['id']}.json", gen)


BAD = {
    "list": [1, 2],
    "id-only": {"id": "x"},
    "yesterday": "created_at",
    "nested": b"[" * 100_000 + b"]" * 100_000,
    "not-json": b"\xff{",
    "status-int": "status",
    "seed-list": "cache_seed",
}


def _bad(root: Path, kind: str) -> Path:
    t = 1_700_000_100.0
    if kind == "yesterday":
        return plant_gen(root, record(root, t, created_at="yesterday"))
    if kind == "status-int":
        return plant_gen(root, record(root, t, status=1))
    if kind == "seed-list":  # cache_seed is host -> what its /cache got
        return plant_gen(root, record(root, t, cache_seed=["kernel-cache.tar"]))
    return plant(root, f"{gens.utc_id(t)}.json", BAD[kind])


@pytest.mark.parametrize("kind", list(BAD))
def test_a_malformed_record_is_skipped_by_history_and_refused_by_promote_and_rollback(root, kind):
    plant_gen(root, record(root, 1_700_000_000.0, good=True))
    bad = _bad(root, kind)
    runner = CliRunner()
    # history: the good record listed, the bad file named, no traceback
    res = runner.invoke(cli, ["--root", str(root), "history", LANE, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [g["id"] for g in doc["generations"]] == [gens.utc_id(1_700_000_000.0)]
    assert len(doc["skipped"]) == 1 and doc["skipped"][0].startswith(str(bad))
    # the supervisor's reads skip it too (the KeyError: 'status' at the first incident)
    assert gens.current(root, LANE)["id"] == gens.utc_id(1_700_000_000.0)
    # promote and rollback refuse, naming the file; nothing was stopped
    stops = []
    with pytest.raises(GenerationError, match=str(bad.name)):
        gens.rollback(root, LANE, stop=lambda: stops.append(1), launch=lambda inv: pytest.fail("launched"))
    with pytest.raises(GenerationError, match=str(bad.name)):
        gens.promote(root, LANE, True, smoke=lambda: pytest.fail("smoke ran"), bench_gate=lambda t: None)
    assert stops == []


def test_a_lane_of_dotdot_never_steers_a_write(root, tmp_path, monkeypatch):
    work = tmp_path / "tmp" / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(work))  # rollback's workdir: where ../../x would land
    gen = record(root, 1_700_000_000.0, good=True, lane="../../x")
    plant_gen(root, gen)
    stops = []
    with pytest.raises(GenerationError, match="its lane '../../x' is not the lane of its folder"):
        gens.rollback(root, LANE, stop=lambda: stops.append(1), launch=lambda inv: pytest.fail("launched"))
    assert stops == [] and not any(p.name == "x" for p in tmp_path.rglob("x"))
    with pytest.raises(GenerationError, match="refusing to save"):
        gens.save(root, gen)
    with pytest.raises(GenerationError, match="not a lane name"):
        gens.load_all(root, "../../x")
    assert not (root.parent / "x").exists()


def test_a_recipe_edited_after_it_was_recorded_is_refused(root):
    gen = record(root, 1_700_000_000.0, good=True)
    gen["recipe_text"] += "\n# a different recipe\n"
    p = plant_gen(root, gen)
    with pytest.raises(GenerationError, match=f"{p.name}: recipe_sha256 does not match recipe_text"):
        gens.rollback(root, LANE, stop=lambda: pytest.fail("stopped"), launch=lambda inv: pytest.fail("x"))


def test_rollback_validates_and_plans_before_it_stops(root):
    broken = "[lane\nhosts = 3\n"  # not TOML: the inventory load refuses it
    plant_gen(root, record(root, 1_700_000_000.0, good=True, recipe_text=broken,
                           recipe_sha256=hashlib.sha256(broken.encode()).hexdigest()))  # fmt: skip
    stops = []
    with pytest.raises(SparkfleetError) as err:
        gens.rollback(root, LANE, stop=lambda: stops.append(1), launch=lambda inv: pytest.fail("launched"))
    assert stops == [] and "recipe.toml" in err.value.message
    # a valid record whose plan fails: still nothing stopped
    for p in gens.generations_dir(root, LANE).glob("*.json"):
        p.unlink()
    plant_gen(root, record(root, 1_700_000_000.0, good=True))

    def plan(inv):
        raise SparkfleetError("plan: port 1 is not free")

    with pytest.raises(SparkfleetError, match="port 1 is not free"):
        gens.rollback(root, LANE, lambda: stops.append(1), lambda inv: pytest.fail("launched"), plan=plan)
    assert stops == []


def test_rollback_cli_refuses_a_tampered_record_with_exit_5_and_no_traceback(root):
    plant_gen(root, record(root, 1_700_000_000.0, good=True, lane="../../x"))
    res = CliRunner().invoke(cli, ["--root", str(root), "rollback", LANE])
    assert res.exit_code == ExitCode.REFUSED, res.output
    assert "not the lane of its folder" in res.output and "Traceback" not in res.output


def test_two_concurrent_promotes_merge_under_the_lock(root):
    gen = record(root, 1_700_000_000.0)
    plant_gen(root, gen)
    results = {}

    def promote(name, ok, delay):
        def smoke():
            time.sleep(delay)  # both read the record before either writes it
            return ok, []

        results[name] = gens.promote(root, LANE, True, smoke, lambda since: ("r.json", True, "gate", []))

    threads = [threading.Thread(target=promote, args=("pass", True, 0.3)),
               threading.Thread(target=promote, args=("fail", False, 0.8))]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["pass"].promoted and not results["fail"].promoted and results["fail"].good
    disk = gens.load_all(root, LANE)[0]
    assert disk["good"] is True and disk["promotion"]["promoted"] is True  # the failure hid nothing
    assert gens.last_good(root, LANE)["id"] == gen["id"]


WRITER = """
import sys, time
from pathlib import Path
from sparkfleet.launch import generations as g
root, gen = Path(sys.argv[1]), __import__("json").loads(sys.argv[2])
print("go", flush=True)
n = 0
while True:
    n += 1
    gen["pad"] = str(n) + "x" * 4_000_000  # never the bytes already there (write_bytes would skip)
    with g.locked(root, gen["lane"]):
        g.save(root, gen)
"""


def test_temps_left_by_kill_9_are_swept_by_the_next_writer(root):
    gen = record(root, 1_700_000_000.0)
    d = gens.generations_dir(root, LANE)
    left = 0
    for i in range(6):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root), json.dumps(gen)],
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert proc.stdout.readline() == "go\n"
        # Kill once a write is under way (a temp exists), not after a fixed sleep: on a loaded machine
        # (make test's parallel workers) the writer may not have reached its first write by then.
        deadline = time.monotonic() + 60
        while not (d.is_dir() and any(TEMP_MARK in p.name for p in d.iterdir())):
            assert time.monotonic() < deadline, "the writer never started a write"
            assert proc.poll() is None, "the writer died on its own"
            time.sleep(0.005)
        time.sleep(0.01 * i)  # then at a different point of the write each round
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        left += sum(TEMP_MARK in p.name for p in d.iterdir())
        with gens.locked(root, LANE):
            assert not [p for p in d.iterdir() if TEMP_MARK in p.name]
        found, skipped = gens.scan(root, LANE)
        assert skipped == [] and [g["id"] for g in found] in ([], [gen["id"]])  # whole or absent
    assert left > 0, "no kill landed mid-write: the sweep was never tested"
