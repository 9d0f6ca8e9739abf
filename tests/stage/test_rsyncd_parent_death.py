"""Issue 20.12: the rsyncd peer daemon dies with the process that started it, even by `kill -9`,
and the next run removes the private directory (and its secret) that such a run left behind:
identified by its owner's PID + start time, never by its name alone."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkfleet.base.procs import boot_id, process_state, start_ticks
from sparkfleet.stage import peerserve
from sparkfleet.stage.peerserve import OWNER_FILE, PRIVATE_PREFIX, sweep_leftovers

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync")

SERVER = """
import sys, time
from pathlib import Path
from sparkfleet.stage.peerserve import DaemonSpec, serve
spec = DaemonSpec(Path(sys.argv[1]), "127.0.0.1", ("127.0.0.1",))
with serve(spec, "run-secret-0123456789") as (port, pid):
    print(port, pid, flush=True)
    time.sleep(3600)
"""


def _gone(pid: int, ticks: int | None) -> bool:
    return process_state(pid) in (None, "Z", "X") or start_ticks(pid) != ticks


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setenv("TMPDIR", str(d))
    monkeypatch.setattr(peerserve.tempfile, "tempdir", str(d))
    return d


def _start(hub: Path) -> tuple[subprocess.Popen, int, int]:
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(hub)], stdout=subprocess.PIPE, text=True)
    port, pid = map(int, proc.stdout.readline().split())
    return proc, port, pid


def test_daemon_dies_with_a_kill_9_parent_and_the_next_run_sweeps_its_secret(tmp_path, private_tmp):
    hub = tmp_path / "hub"
    hub.mkdir()
    victim, port, daemon = _start(hub)
    ticks = start_ticks(daemon)
    alive, alive_port, alive_daemon = _start(hub)  # another run, still serving: never touched
    try:
        assert _listening(port) and not _gone(daemon, ticks)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        deadline = time.monotonic() + 10
        while not _gone(daemon, ticks) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(daemon, ticks), "the rsync daemon outlived its parent"
        assert not _listening(port)
        left = [d for d in private_tmp.glob(PRIVATE_PREFIX + "*")
                if json.loads((d / OWNER_FILE).read_text())["owner"]["pid"] == victim.pid]  # fmt: skip
        assert len(left) == 1 and (left[0] / "secrets").exists()  # kill -9 left it: the sweep's job
        # a directory with the right name but no owner we can read is not ours to judge
        (private_tmp / (PRIVATE_PREFIX + "stranger")).mkdir()
        removed = sweep_leftovers()
        assert removed == left and not left[0].exists()
        assert (private_tmp / (PRIVATE_PREFIX + "stranger")).is_dir()
        assert _listening(alive_port) and len(list(private_tmp.glob(PRIVATE_PREFIX + "*"))) == 2
    finally:
        for p in (victim, alive):
            if p.poll() is None:
                p.terminate()  # serve()'s own cleanup stops its daemon and removes its directory
                p.wait(10)
    deadline = time.monotonic() + 10
    while not _gone(alive_daemon, start_ticks(alive_daemon)) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_leftover_daemon_is_killed_by_pid_and_start_time(tmp_path, private_tmp):
    """A daemon from a run before parent-death signals (PPID 1, still listening) is ended by the
    identity its directory recorded; a recycled PID (other start time) is left alone."""
    sleeper = subprocess.Popen(["sleep", "60"])
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        gone_owner = {"pid": 2**22 + 7, "start_ticks": 1, "boot_id": "x"}
        me = {"pid": sleeper.pid, "start_ticks": start_ticks(sleeper.pid)}
        d1 = private_tmp / (PRIVATE_PREFIX + "a")
        d1.mkdir(mode=0o700)
        daemon = {**me, "boot_id": boot_id()}
        (d1 / OWNER_FILE).write_text(json.dumps({"owner": gone_owner, "daemon": daemon}))
        d2 = private_tmp / (PRIVATE_PREFIX + "b")  # names the stranger's PID with another start time
        d2.mkdir(mode=0o700)
        wrong = {"pid": stranger.pid, "start_ticks": start_ticks(stranger.pid) + 1, "boot_id": boot_id()}
        (d2 / OWNER_FILE).write_text(json.dumps({"owner": gone_owner, "daemon": wrong}))
        assert sorted(sweep_leftovers()) == [d1, d2]
        assert sleeper.wait(5) == -signal.SIGKILL
        assert stranger.poll() is None  # a recycled PID is not the daemon: never killed
    finally:
        for p in (sleeper, stranger):
            if p.poll() is None:
                p.kill()
                p.wait()
