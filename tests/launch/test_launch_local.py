"""The process runtime end to end on this machine (LocalHost): launch, ready, status, logs, stop.

Also: stop never kills a process whose PID was recycled, and a second launch of a running lane
is refused.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkfleet.base import procs
from sparkfleet.base.errors import SparkfleetError
from sparkfleet.base.http import free_port
from sparkfleet.demo.hubfixture import build_nas_hub
from sparkfleet.fleet import inventory
from sparkfleet.launch import lane as lanes
from sparkfleet.node import records
from sparkfleet.node.runtimes import ProcessRuntime
from support.lanefleet import demo_recipe, write_fleet

# make test runs modules on xdist workers: the lanes this module launches on this machine share
# its ports (the rendezvous port 20000, the demo's serving ports), so every such module runs on
# one worker ("local_lanes"), one at a time
pytestmark = pytest.mark.xdist_group("local_lanes")

@pytest.fixture
def local_fleet(tmp_path):
    nas = build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=16 * 1024)
    port = free_port()
    hosts = {
        "spark": {
            "address": "localhost",
            "ssh_user": "root",
            "local_hub": str(tmp_path / "nvme" / "hub"),
            "nas_hub": str(nas.root),
            "state_dir": str(tmp_path / "state"),
        }
    }
    root = write_fleet(
        tmp_path / "fleet",
        hosts,
        {
            "demo": demo_recipe(["spark"], port),
            "dies": demo_recipe(["spark"], port, ', "--exit-during-boot"'),
            "silent": demo_recipe(["spark"], port, ', "--omit-ready-line"', ready_s=3),
        },
    )
    inv = inventory.load(root)
    yield inv, port, tmp_path
    for lane in ("demo", "dies", "silent"):  # never leave a rank behind, even on failure
        lanes.stop(inv, lane, 5)


def test_launch_ready_status_logs_stop(local_fleet):
    inv, port, tmp = local_fleet
    cache = tmp / "state" / "cache" / "demo"
    (cache / "ds41-backend-attestation" / "root").mkdir(parents=True)
    (cache / "ds41-backend-attestation" / "root" / "worker.json").write_text("{}")

    report = lanes.launch(inv, "demo", allow_nas_weights=True)
    assert report.ready is not None and report.ready.ok, report.ready
    assert report.ready.weight_load_s == 0.42
    assert list(report.ready.stages) == [
        "RoCEnante ready: world=1",
        "The server is fired up and ready to roll!",
    ]
    assert report.ready.models == ["deepseek-v4.1-flash"] and report.ready.health == 200
    assert report.started[0].receipts_cleared == [str(cache / "ds41-backend-attestation")]
    assert not (cache / "ds41-backend-attestation").exists()

    st = lanes.status(inv, "demo")
    assert st.running == 1 and st.endpoints["health"] == 200
    pid = st.ranks[0].pid
    env = Path(f"/proc/{pid}/environ")
    # the supervisor carries the derived env to the serve command
    child = procs.group_members(pid)
    assert len(child) >= 2
    server_env = dict(
        kv.split("=", 1) for kv in Path(f"/proc/{max(child)}/environ").read_text().split("\0") if "=" in kv
    )
    assert env.exists() and server_env["NODE_RANK"] == "0" and server_env["TP_SIZE"] == "1"
    assert server_env["SPARKFLEET_CACHE_DIR"] == str(cache)

    text = lanes.logs(inv, "demo")["spark"]["0"]
    assert "RoCEnante ready: world=1" in text and "fired up" in text
    with lanes.follow(inv, "demo", "spark", lines=50) as stream:  # the host runner's stream interface
        seen = []
        for line in stream:
            seen.append(line)
            if "fired up" in line:
                break
    assert any("RoCEnante ready" in line for line in seen)

    with pytest.raises(SparkfleetError, match="already running"):
        lanes.launch(inv, "demo", allow_nas_weights=True)

    res = lanes.stop(inv, "demo", 5)
    assert [r["stopped"] for r in res] == [True]
    assert procs.group_members(pid) == []
    assert lanes.status(inv, "demo").running == 0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_exit_during_boot_is_reported_and_cleaned(local_fleet):
    inv, _, _ = local_fleet
    report = lanes.launch(inv, "dies", allow_nas_weights=True)
    assert not report.ready.ok
    assert "rank 0 exited with code 1" in report.ready.reason
    assert "last boot stage" in report.ready.reason
    assert report.stopped_after_failure
    assert lanes.status(inv, "dies").running == 0


@pytest.mark.serial  # a time bound: make test runs it alone, after the parallel part
def test_missing_ready_line_times_out_naming_the_stage(local_fleet):
    inv, _, _ = local_fleet
    t0 = time.monotonic()
    report = lanes.launch(inv, "silent", allow_nas_weights=True)
    assert time.monotonic() - t0 < 20
    r = report.ready
    assert not r.ok and r.reason.startswith("timeout after 3 s: last boot stage 'RoCEnante ready: world=1'")
    assert r.missing == ["The server is fired up and ready to roll!"]
    assert any("RoCEnante ready" in line for line in r.tail)
    assert lanes.status(inv, "silent").ranks == []  # stopped and forgotten


def test_stop_never_kills_a_recycled_pid(tmp_path):
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        rec = records.LaunchRecord(
            lane="x",
            host="h",
            rank=0,
            runtime="process",
            name="sparkfleet-x-r0",
            log_path=str(tmp_path / "l"),
            started_at=time.time(),
            pid=victim.pid,
            start_ticks=(procs.start_ticks(victim.pid) or 0) + 1,
            boot_id=procs.boot_id(),
            pgid=victim.pid,
        )
        assert not records.is_ours(rec)
        res = ProcessRuntime().stop(rec, 1)
        assert res.detail == "not running" and victim.poll() is None
        # the same record with the true start time is ours
        assert records.is_ours(dataclasses.replace(rec, start_ticks=procs.start_ticks(victim.pid)))
        assert not records.is_ours(dataclasses.replace(rec, boot_id="another-boot"))
    finally:
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()


def test_killed_supervisor_leaves_a_server_that_status_shows_and_stop_ends(local_fleet):
    """`kill -9` of a rank's supervisor: the server lives on in the rank's process group; status
    names that state, a second launch is refused, and stop ends the whole group (port free)."""
    inv, port, tmp = local_fleet
    assert lanes.launch(inv, "demo", allow_nas_weights=True).ready.ok
    st = lanes.status(inv, "demo")
    sup = st.ranks[0].pid
    server = [p for p in procs.group_members(sup) if p != sup]
    assert server
    os.kill(sup, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while sup in procs.group_members(sup) and time.monotonic() < deadline:
        time.sleep(0.05)
    socket.create_connection(("127.0.0.1", port), timeout=2).close()  # the server still serves

    st = lanes.status(inv, "demo")
    rank = st.ranks[0]
    assert st.running == 0 and not st.ok
    assert rank.orphan_pid in server
    assert rank.detail.startswith("supervisor dead, server alive")
    with pytest.raises(SparkfleetError, match="supervisor dead, server alive"):
        lanes.launch(inv, "demo", allow_nas_weights=True)
    from sparkfleet.node import watchdog

    assert watchdog.running(tmp / "state", "demo")  # the memory watchdog keeps guarding the server

    res = lanes.stop(inv, "demo", 5)
    assert [r["stopped"] for r in res] == [True] and "its supervisor had died" in res[0]["detail"]
    assert procs.group_members(sup) == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert lanes.status(inv, "demo").ranks == []


def test_watch_relaunches_a_rank_whose_supervisor_was_killed(local_fleet):
    """`watch` after kill -9 of a supervisor tried three relaunches, each "serving port … already in
    use", and ended "needs a human" with the server still up. Its restart now ends the group first."""
    from sparkfleet.ops.supervisor import WatchSettings, watch_lane

    inv, port, _ = local_fleet
    assert lanes.launch(inv, "demo", canary=False, allow_nas_weights=True).ready.ok
    sup = lanes.status(inv, "demo").ranks[0].pid
    old = [p for p in procs.group_members(sup) if p != sup]
    os.kill(sup, signal.SIGKILL)
    settings = WatchSettings(interval_s=2, latency_s=2, max_restarts=1, backoff_s=0)
    events: list[str] = []
    out = watch_lane(inv, "demo", settings, max_probes=1, on_event=events.append)
    assert out.restarts == 1 and out.incidents[0].restart_ok, events
    assert "0 of 1 ranks running" in out.incidents[0].reason
    assert not any("already in use" in e for e in events)
    st = lanes.status(inv, "demo")
    assert st.running == 1 and st.ranks[0].pid != sup
    assert all(procs.process_state(p) in (None, "Z") for p in old)  # the orphaned server is gone
