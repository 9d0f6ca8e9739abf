"""Files sparkfleet reads that someone else wrote, tampered with: each refused or read safely, never a crash.

Each case plants what its writer could leave (surfaces.FILES says who): any JSON value in a node's
launch record, an envelope of any shape from the quality tool, a flake.lock or a sources.manifest
that is not what it should be, a link, FIFO or directory where the stage lock goes, owner files of
any shape in a dead peer server's directory, a FIFO among NCCL's logs, a rank log full of escapes
and the lane's key. The oracle is the writer's format as documented, not the reader's code; a
planted record or owner file that names another process must never get that process signalled.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkfleet.base import lock, procs
from sparkfleet.base.errors import SparkfleetError
from sparkfleet.bench import quality
from sparkfleet.facts import apikeys
from sparkfleet.node import agent, canary_worker, receipts, records
from sparkfleet.pins import oci
from sparkfleet.pins.common import PinError
from sparkfleet.pins.manifest import parse_manifest
from sparkfleet.stage import peerserve

from .tally import bad_input, count, lost_bytes

json_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8)
json_values = (
    json_scalars
    | st.lists(json_scalars, max_size=3)
    | st.dictionaries(st.text(max_size=4), json_scalars, max_size=3)
)


@pytest.fixture(scope="module")
def sleeper():
    """A process nobody recorded: a planted record or owner file may name it, nothing may signal it."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def ask_agent(action: str, request: dict, monkeypatch) -> dict:
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(request)))
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    assert agent.main([action]) == 0
    return json.loads(out.getvalue().splitlines()[-1])


# ---- a node's launch records ----------------------------------------------------------------------

# Each field's type as `records.save` writes it: the oracle of which tampered values are bad.
INTS, OPTIONAL_INTS = ("rank", "binds"), ("pid", "start_ticks", "pgid")
STRS = ("lane", "host", "runtime", "name", "log_path")
OPTIONAL_STRS = ("boot_id", "container_id", "exit_path")
LISTS = ("argv", "env_keys", "receipts_cleared")
FIELDS = [*INTS, *OPTIONAL_INTS, *STRS, *OPTIONAL_STRS, *LISTS, "started_at"]


def _wrong_type(key: str | None, value) -> bool:
    if key is None:
        return True  # the whole record replaced by a scalar, a list or another object
    if key in INTS or key in OPTIONAL_INTS:
        return (value is not None or key in INTS) and (isinstance(value, bool) or not isinstance(value, int))
    if key in STRS or key in OPTIONAL_STRS:
        return (value is not None or key in STRS) and not isinstance(value, str)
    if key in LISTS:
        return value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value))
    return isinstance(value, bool) or not isinstance(value, int | float) or value != value  # started_at


@pytest.mark.surface("file:launch record", "agent:status", "agent:stop", "agent:logs", "agent:watch")
@given(key=st.sampled_from([None, *FIELDS]), value=json_values)
def test_a_tampered_launch_record_is_answered_and_signals_nobody(
    tmp_path_factory, monkeypatch, figures, sleeper, key, value
):
    """A record (a rank's pid, pgid, runtime, log...) as anyone with the state dir could edit it."""
    state = tmp_path_factory.mktemp("state")
    doc = {"lane": "lane-a", "host": "h", "rank": 0, "runtime": "process", "name": "lane-a-0",
           "log_path": str(state / "rank0.log"), "started_at": 1.0, "pid": sleeper.pid, "start_ticks": 1,
           "boot_id": procs.boot_id(), "pgid": sleeper.pid}  # fmt: skip  # the sleeper's pid, not its start
    doc = value if key is None else {**doc, key: value}
    path = records.record_path(state, "lane-a", 0)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    count(figures, "launch-records", "records_tried")
    for action in ("status", "logs", "watch", "stop"):
        request = {"state_dir": str(state), "lane": "lane-a", "rank": 0, "timeout": 1}
        monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(request)))
        out = io.StringIO()
        monkeypatch.setattr(sys, "stdout", out)
        try:
            agent.main([action])
            crashed = None
        except Exception as exc:  # noqa: BLE001 - what escapes main() is a traceback on the node
            crashed = exc
        finally:
            monkeypatch.undo()
        alive = sleeper.poll() is None
        if _wrong_type(key, value):
            bad_input(figures, "launch-records", refused=crashed is None and alive)
        assert crashed is None, (action, doc, crashed)
        assert alive, f"agent {action} signalled a process the record only named: {doc}"


# ---- the quality tool's result --------------------------------------------------------------------


def _well_formed(doc) -> bool:
    """tool-eval-bench's envelope as it documents it: scores an object, final_score a number, each
    scenario result an object."""
    if not isinstance(doc, dict):
        return False
    scores = doc.get("scores") or {}
    if not isinstance(scores, dict):
        return False
    results = scores.get("scenario_results") or []
    score = doc.get("final_score", scores.get("final_score"))
    return (
        isinstance(results, list) and all(isinstance(r, dict) for r in results)
        and (score is None or (isinstance(score, int | float) and not isinstance(score, bool)))
        and isinstance(doc.get("safety_warnings") or [], list)
    )  # fmt: skip


@pytest.mark.surface("file:quality tool output", "cli:bench --quality-scenarios")
@given(
    doc=json_values
    | st.fixed_dictionaries({"final_score": json_values, "scores": json_values})
    | st.fixed_dictionaries({"final_score": st.just(80.0), "scores": st.fixed_dictionaries(
        {"scenario_results": st.lists(json_values, max_size=2)})})
)  # fmt: skip
def test_any_quality_envelope_is_a_result_never_a_crash(figures, doc):
    try:
        result = quality.parse_envelope(doc, "1.0", ["tool-eval-bench"])
        crashed = None
    except Exception as exc:  # noqa: BLE001 - it would end the whole bench with a traceback
        result, crashed = None, exc
    if not _well_formed(doc):
        bad_input(figures, "quality-output", refused=crashed is None and result.status == "failed")
    assert crashed is None, (doc, crashed)
    if not _well_formed(doc):
        assert result.status == "failed" and result.score is None, (doc, result)


# ---- flake.lock, sources.manifest -----------------------------------------------------------------

LOCKS = {
    "not-json": "{",
    "a-list": "[]",
    "nodes-a-string": '{"nodes": "x"}',
    "root-without-inputs": '{"nodes": {"root": {}}}',
    "inputs-a-list": '{"nodes": {"root": {"inputs": ["nixpkgs"]}}}',
    "deep": "[" * 100_000 + "]" * 100_000,
}


@pytest.mark.surface("file:flake.lock")
@pytest.mark.parametrize("case", sorted(LOCKS))
def test_a_flake_lock_without_a_locked_nixpkgs_is_refused(tmp_path, figures, case):
    (tmp_path / "flake.lock").write_text(LOCKS[case])
    try:
        oci.locked_tool_argv(tmp_path, "nix-prefetch-docker")
        refused = False
    except SparkfleetError as exc:
        refused = "flake.lock" in exc.message
    bad_input(figures, "flake-lock", refused=refused)
    assert refused


SHA = "ab" * 32
MANIFESTS = {
    "three-columns": f"torch 0123abc {SHA}\n",
    "five-columns": f"torch 0123abc {SHA} https://x.invalid/t.whl extra\n",
    "sha-short": "torch 0123abc abcd https://x.invalid/t.whl\n",
    "sha-upper": f"torch 0123abc {SHA.upper()} https://x.invalid/t.whl\n",
    "url-an-option": f"torch 0123abc {SHA} -oProxyCommand=x\n",
    "url-a-path": f"torch 0123abc {SHA} /etc/passwd\n",
    "url-ftp": f"torch 0123abc {SHA} ftp://x.invalid/t.whl\n",
}


@pytest.mark.surface("file:pins manifest")
@pytest.mark.parametrize("case", sorted(MANIFESTS))
def test_a_malformed_sources_manifest_row_is_refused_naming_its_line(tmp_path, figures, case):
    path = tmp_path / "sources.manifest"
    path.write_text("# a comment\n" + MANIFESTS[case])
    try:
        parse_manifest(path.read_text(), path)
        refused = False
    except PinError as exc:
        refused = f"{path}:2" in exc.message
    bad_input(figures, "pins-manifest", refused=refused)
    assert refused


# ---- the stage lock -------------------------------------------------------------------------------


def _plant(kind: str, where: Path, victim: Path) -> None:
    if kind == "link-to-a-file":
        where.symlink_to(victim)
    elif kind == "fifo":
        os.mkfifo(where)
    elif kind == "directory":
        where.mkdir()
    elif kind == "dangling-link":
        where.symlink_to(where.parent / "nothing-here")


@pytest.mark.surface("file:stage lock")
@pytest.mark.parametrize("kind", ["link-to-a-file", "fifo", "directory", "dangling-link"])
def test_whatever_is_planted_at_the_stage_lock_is_refused_and_left_alone(tmp_path, figures, kind):
    hub = tmp_path / "hub"
    (hub / lock.LOCK_PATH).parent.mkdir(parents=True)
    victim = tmp_path / "a-shard.safetensors"
    victim.write_bytes(b"weights" * 100)
    _plant(kind, hub / lock.LOCK_PATH, victim)
    done = threading.Event()
    outcome: dict = {}

    def take() -> None:
        try:
            with lock.hub_lock(hub):
                outcome["taken"] = True
        except Exception as exc:  # noqa: BLE001 - the test judges what came out
            outcome["error"] = exc
        done.set()

    threading.Thread(target=take, daemon=True).start()
    finished = done.wait(10)  # a FIFO opened for reading without O_NONBLOCK would wait forever
    error = outcome.get("error")
    refused = finished and isinstance(error, SparkfleetError) and str(lock.LOCK_PATH.name) in error.message
    bad_input(figures, "stage-lock", refused=refused)
    assert finished, "taking the lock hung"
    assert refused, outcome
    assert victim.read_bytes() == b"weights" * 100


# ---- a dead peer server's private directory -------------------------------------------------------


@pytest.mark.surface("file:peer-serve leftovers")
@given(owner=json_values | st.fixed_dictionaries({"owner": json_values, "daemon": json_values}))
def test_an_owner_file_of_any_shape_never_gets_a_process_killed(tmp_path_factory, figures, sleeper, owner):
    base = tmp_path_factory.mktemp("tmp")
    d = base / f"{peerserve.PRIVATE_PREFIX}planted"
    d.mkdir()
    if isinstance(owner, dict) and isinstance(owner.get("daemon"), dict):
        owner["daemon"]["pid"] = sleeper.pid  # names the sleeper, not its identity (start, boot)
    (d / peerserve.OWNER_FILE).write_text(json.dumps(owner))
    try:
        peerserve.sweep_leftovers(base)
        crashed = None
    except Exception as exc:  # noqa: BLE001 - the next stage run would die of it
        crashed = exc
    count(figures, "peer-serve-leftovers", "owner_files_tried")
    assert crashed is None, (owner, crashed)
    assert sleeper.poll() is None, f"a planted owner file got pid {sleeper.pid} killed: {owner}"


# ---- NCCL's logs inside the lane's image ----------------------------------------------------------


@pytest.mark.surface("file:NCCL logs")
def test_the_canary_reads_nccls_logs_without_waiting_on_a_fifo_or_stopping_at_a_directory(tmp_path, figures):
    logs = tmp_path / "nccl"
    logs.mkdir()
    os.mkfifo(logs / "a-fifo")
    (logs / "b-dir").mkdir()
    (logs / "c.log").write_bytes(b"NCCL INFO ring 0\n\xff\xfe\x1b[2J\n")
    done = threading.Event()
    out: dict = {}

    def read() -> None:
        out["text"] = canary_worker._read_nccl_logs(str(logs))
        done.set()

    threading.Thread(target=read, daemon=True).start()
    finished = done.wait(10)
    if not finished:  # let the stuck reader go
        with open(logs / "a-fifo", "wb"):
            pass
    bad_input(figures, "nccl-logs", refused=finished and "ring 0" in out.get("text", ""))
    assert finished, "the canary waited on a FIFO among NCCL's logs"
    assert "ring 0" in out["text"]


# ---- a rank's log ---------------------------------------------------------------------------------


@pytest.mark.surface("file:rank log", "agent:logs")
def test_a_rank_log_of_escapes_and_binary_comes_back_as_text_without_the_key(tmp_path, monkeypatch, figures):
    state = tmp_path / "state"
    key = apikeys.new_key()
    apikeys.write_key(state, "lane-a", key)
    log = records.log_path(state, "lane-a", 0)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(
        b"\xff\xfe\x00 boot\n\x1b]0;title\x07 --api-key " + key.encode() + b"\n" + b"x" * 70_000 + b"\n"
    )
    rec = records.LaunchRecord("lane-a", "h", 0, "process", "lane-a-0", str(log), time.time())
    records.save(state, rec)
    answer = ask_agent("logs", {"state_dir": str(state), "lane": "lane-a", "lines": 5}, monkeypatch)
    text = answer["logs"]["0"]
    bad_input(figures, "rank-log", refused=key not in text)
    assert answer["ok"] and key not in text and "--api-key" in text


# ---- the lane's cache dir, where the containers (root inside) write -------------------------------


def _plant_in_cache(kind: str, cache: Path, victim: Path) -> list[str]:
    """What a container can leave where the receipts are cleared; the receipt roots the recipe names."""
    if kind == "root-is-a-link":
        (cache / "receipts").symlink_to(victim)
        return [str(cache / "receipts")]
    if kind == "parent-is-a-link":
        (cache / "kv").symlink_to(victim)
        return [str(cache / "kv" / "receipts")]
    if kind == "link-inside-the-root":
        (cache / "receipts").mkdir()
        (cache / "receipts" / "escape").symlink_to(victim)
        return [str(cache / "receipts")]
    if kind == "root-climbs-out":
        return [str(cache / ".." / ".." / "victim")]
    raise AssertionError(kind)


@pytest.mark.surface("file:lane cache dir")
@pytest.mark.parametrize(
    "kind", ["root-is-a-link", "parent-is-a-link", "link-inside-the-root", "root-climbs-out"]
)
def test_what_a_container_leaves_in_its_cache_never_makes_a_clear_delete_outside(tmp_path, figures, kind):
    state = tmp_path / "state"
    cache = state / "lanes" / "lane-a" / "cache"
    cache.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "receipts").mkdir()
    (victim / "keep.bin").write_bytes(b"not the lane's" * 64)
    source = {"keep.bin": (victim / "keep.bin").read_bytes()}
    roots = _plant_in_cache(kind, cache, victim)
    try:
        receipts.clear_receipts(roots, sudo=("false",), base=str(cache), state_dir=str(state))
        outcome = "cleared"
    except SparkfleetError:
        outcome = "refused"
    final = {p.name: p.read_bytes() for p in victim.iterdir() if p.is_file()}
    lost = lost_bytes(figures, "lane-cache-dir", source, final)
    bad_input(figures, "lane-cache-dir", refused=lost == 0 and (victim / "receipts").is_dir())
    assert lost == 0 and (victim / "receipts").is_dir(), (kind, outcome, sorted(os.listdir(victim)))


@pytest.mark.surface("file:launch record")
def test_a_record_that_lacks_the_optional_fields_still_loads(tmp_path):
    """Strict types, not strict presence: a record without the newer keys keeps its rank stoppable."""
    doc = {"lane": "lane-a", "host": "h", "rank": 0, "runtime": "process", "name": "lane-a-0",
           "log_path": "/nonexistent/rank0.log", "started_at": 1.0, "pid": 12345}  # fmt: skip
    path = records.record_path(tmp_path, "lane-a", 0)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    [rec] = records.load_all(tmp_path, "lane-a")
    assert rec.pid == 12345 and rec.binds == 0 and rec.argv == ()
