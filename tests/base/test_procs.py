"""Process identity: a recorded (pid, start ticks, boot id) names one process, never a recycled PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from sparkfleet.base import procs


def test_a_running_process_is_the_one_its_identity_names():
    me = procs.identity(os.getpid())
    assert me["boot_id"] and isinstance(me["start_ticks"], int)
    assert procs.same_process(me["pid"], me["start_ticks"], me["boot_id"])


def test_another_start_time_or_another_boot_is_not_the_same_process():
    me = procs.identity(os.getpid())
    assert not procs.same_process(me["pid"], me["start_ticks"] + 1, me["boot_id"])  # a recycled PID
    assert not procs.same_process(me["pid"], me["start_ticks"], "another-boot")  # after a reboot
    assert not procs.same_process(me["pid"], me["start_ticks"], None)  # a record that names no boot


def test_a_zombie_and_a_reaped_process_are_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    ident = procs.identity(child.pid)
    deadline = time.monotonic() + 10
    while procs.process_state(child.pid) not in procs.GONE_STATES and time.monotonic() < deadline:
        time.sleep(0.01)  # until it has exited and is not yet reaped: a zombie
    assert procs.process_state(child.pid) == "Z"
    assert not procs.same_process(child.pid, ident["start_ticks"], ident["boot_id"])
    child.wait()
    assert procs.process_state(child.pid) is None and procs.start_ticks(child.pid) is None
    assert not procs.same_process(child.pid, ident["start_ticks"], ident["boot_id"])


def test_a_process_group_lists_its_live_members():
    code = "import subprocess, time; subprocess.Popen(['sleep', '30']); time.sleep(30)"
    leader = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(procs.group_members(leader.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        members = procs.group_members(leader.pid)
        assert leader.pid in members and len(members) == 2
    finally:
        os.killpg(leader.pid, signal.SIGKILL)  # the group this test started, by its id
        leader.wait()
    deadline = time.monotonic() + 10
    while procs.group_members(leader.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert procs.group_members(leader.pid) == []
