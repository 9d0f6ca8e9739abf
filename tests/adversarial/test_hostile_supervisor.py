"""The supervisor's surfaces under attack, counted: hostile answers to `watch`'s probe, tampered
generation records, and the death of the process that owns the rsyncd peer daemon.

Each input here is bad by construction (the test's own oracle: a mutation it applied), never by
the checker's verdict; a fault is counted only when a process was really killed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkfleet.base.procs import process_state, start_ticks
from sparkfleet.launch import generations as gens
from sparkfleet.ops.supervisor import WatchSettings, probe_generation
from support.hostile_http import body, completion, hostile_server, huge, trickle

from .tally import bad_input, count

pytestmark = pytest.mark.slow

S = WatchSettings(interval_s=2.0, latency_s=1.5, expect="42")

HOSTILE_ANSWERS = {
    "content-int": lambda: body(completion(42)),
    "content-list": lambda: body(completion(["42"])),
    "content-object": lambda: body(completion({})),
    "content-bool": lambda: body(completion(True)),
    "nested-brackets": lambda: body(b"[" * 100_000 + b"]" * 100_000),
    "no-choices": lambda: body(b"[1, 2]"),
    "message-not-object": lambda: body(b'{"choices": [{"message": "42"}]}'),
    "not-utf8": lambda: body(b"\xff\xfe not utf-8"),
    "html-error-page": lambda: body(b"<html>502 Bad Gateway</html>", "text/html"),
    "trickle": lambda: trickle(completion("42")[:40], 0.5),
    "huge": lambda: huge(64 << 20),
}


@pytest.mark.parametrize("kind", list(HOSTILE_ANSWERS))
def test_a_hostile_answer_is_a_failed_probe_within_the_bound(figures, kind):
    with hostile_server(HOSTILE_ANSWERS[kind]()) as url:
        started = time.monotonic()
        res = probe_generation(url, "m", S)  # anything raised escapes and fails the test
        took = time.monotonic() - started
    bad_input(figures, "watch-probe", refused=not res.ok)
    count(figures, "watch-probe", "probes_within_bound" if took < S.latency_s + 1.5 else "probes_overran")
    assert not res.ok and res.error, res
    assert took < S.latency_s + 1.5, took


def test_a_right_answer_still_passes(figures):
    with hostile_server(body(completion("42"))) as url:
        res = probe_generation(url, "m", S)
    count(figures, "watch-probe", "good_answers_passed" if res.ok else "good_answers_failed")
    assert res.ok, res


LANE = "demo"


def _record(t: float) -> dict:
    recipe = '[lane]\nhosts = ["spark"]\n'
    return {"id": gens.utc_id(t), "lane": LANE, "created_at": t, "status": "ready", "good": True,
            "image": None, "pins": {}, "recipe_text": recipe, "fleet_text": "", "hosts": ["spark"],
            "recipe_sha256": hashlib.sha256(recipe.encode()).hexdigest(), "drift": [],
            "boot": {"cache": "cold", "time_to_ready_s": 1.0}, "rolled_back_from": None}  # fmt: skip


TYPED = ["id", "lane", "status", "recipe_text", "recipe_sha256", "created_at", "good", "boot", "drift",
         "hosts"]  # fmt: skip
json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
json_values = (
    json_scalars
    | st.lists(json_scalars, max_size=2)
    | st.dictionaries(st.text(max_size=3), json_scalars, max_size=2)
)


def _wrong_type(key: str, value) -> bool:
    """The oracle: is `value` of a type that field can never hold?"""
    if key in ("id", "lane", "status", "recipe_text", "recipe_sha256"):
        return not isinstance(value, str)
    if key == "created_at":
        return isinstance(value, bool) or not isinstance(value, int | float) or value != value
    if key == "good":
        return not isinstance(value, bool)
    if key == "boot":
        return not isinstance(value, dict)
    return not isinstance(value, list)  # drift, hosts


@pytest.mark.surface("file:generation record")
@given(key=st.sampled_from(TYPED), value=json_values, edit_recipe=st.booleans())
def test_a_tampered_generation_is_refused_naming_its_file(tmp_path_factory, figures, key, value, edit_recipe):
    root = tmp_path_factory.mktemp("fleet")
    d = gens.generations_dir(root, LANE)
    d.mkdir(parents=True)
    gen = _record(1_700_000_000.0)
    gen[key] = value
    if edit_recipe and isinstance(gen["recipe_text"], str):
        gen["recipe_text"] += "# edited after it was recorded\n"
    known_bad = _wrong_type(key, value) or (edit_recipe and isinstance(gen["recipe_text"], str))
    path = d / f"{gens.utc_id(1_700_000_000.0)}.json"
    path.write_text(json.dumps(gen))
    count(figures, "generations", "records_tried")
    try:
        gens.load_strict(root, LANE)
        refused = False
    except gens.GenerationError as exc:
        refused = True
        assert path.name in exc.message
    if known_bad:
        bad_input(figures, "generations", refused=refused)
        assert refused, (key, value)
    assert [g["id"] for g in gens.load_all(root, LANE)] == ([] if refused else [gen["id"]])  # history skips


SERVER = """
import sys, time
from pathlib import Path
from sparkfleet.stage.peerserve import DaemonSpec, serve
spec = DaemonSpec(Path(sys.argv[1]), "127.0.0.1", ("127.0.0.1",))
with serve(spec, "run-secret-0123456789") as (port, pid):
    print(port, pid, flush=True)
    time.sleep(3600)
"""


@pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync")
def test_the_rsyncd_daemon_dies_with_its_killed_parent(tmp_path, figures):
    (tmp_path / "share").mkdir()
    parent = subprocess.Popen([sys.executable, "-c", SERVER, str(tmp_path / "share")], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "TMPDIR": str(tmp_path)})  # fmt: skip
    try:
        port, pid = map(int, parent.stdout.readline().split())
        ticks = start_ticks(pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        count(figures, "rsyncd", "faults_injected")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and process_state(pid) not in (None, "Z", "X") \
                and start_ticks(pid) == ticks:  # fmt: skip
            time.sleep(0.1)
        gone = process_state(pid) in (None, "Z", "X") or start_ticks(pid) != ticks
        count(figures, "rsyncd", "daemons_ended" if gone else "daemons_orphaned")
        assert gone, f"rsyncd {pid} (port {port}) outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
