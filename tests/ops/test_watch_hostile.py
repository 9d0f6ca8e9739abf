"""Issue 20.1–3, 17: a hostile server against `watch`'s probe and `smoke`: a failed probe, never a crash.

A `content` of the wrong JSON type, 10^5 nested brackets, a body trickled a byte at a time, a body
of 64 MiB, a stream that never ends: each ends the probe with one clear reason within the latency
bound, and the supervisor turns it into an incident. A crash of the supervisor itself (a bug)
exits with its own code (70), distinct from 1 ("a human is needed"), so its unit restarts it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from sparkfleet.base.errors import ExitCode
from sparkfleet.cli import main as cli
from sparkfleet.ops import supervisor as watchmod
from sparkfleet.ops.supervisor import ProbeResult, Supervisor, WatchSettings, probe_generation
from support.hostile_http import body, chatter, completion, hostile_server, huge, trickle
from support.lanefleet import demo_recipe, free_port, write_fleet

S = WatchSettings(interval_s=2.0, latency_s=1.5, expect="42")


# make test runs modules on xdist workers: the lanes this module launches on this machine share
# its ports (the rendezvous port 20000, the demo's serving ports), so every such module runs on
# one worker ("local_lanes"), one at a time
pytestmark = pytest.mark.xdist_group("local_lanes")

@pytest.mark.parametrize(
    ("content", "kind"), [(42, "int"), (["42"], "list"), ({}, "dict"), (True, "bool")], ids=str
)
def test_content_of_the_wrong_type_is_a_failed_probe(content, kind):
    with hostile_server(body(completion(content))) as url:
        res = probe_generation(url, "m", S)
    assert not res.ok and res.error == f"malformed completion: content is a JSON {kind}, not text"


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"choices": [' * 50_000, "nested too deeply"),
        (b"[1, 2]", "no choices list"),
        (b'{"choices": [{"message": "42"}]}', "choices[0].message is not an object"),
        (b"\xff\xfe not utf-8", "not JSON"),
    ],
    ids=["nested", "half-nested", "list", "message-str", "bytes"],
)
def test_malformed_bodies_are_failed_probes(doc, why):
    with hostile_server(body(doc)) as url:
        res = probe_generation(url, "m", S)
    assert not res.ok and why in res.error, res.error


def test_a_trickled_body_ends_at_the_latency_bound():
    # 40 bytes, one every 0.5 s: 20 s of answer against a 1.5 s bound (per-read timeouts never fire)
    with hostile_server(trickle(completion("42")[:40], 0.5)) as url:
        started = time.monotonic()
        res = probe_generation(url, "m", S)
        took = time.monotonic() - started
    assert not res.ok and "no answer within the latency bound" in res.error, res.error
    assert took < S.latency_s + 1.5, took


# The process's own peak (VmHWM): getrusage's ru_maxrss survives execve on Linux, so a child of a
# large pytest would start at pytest's peak and a growth below it would read as 0.
PROBE_RSS = """
import sys
from sparkfleet.ops.supervisor import WatchSettings, probe_generation
def peak():
    return [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
before = peak()
res = probe_generation(sys.argv[1], "m", WatchSettings(interval_s=60, latency_s=60))
print(res.error)
print((peak() - before) // 1024)
"""


def test_the_read_is_capped_at_one_mib():
    """The issue's 600 MB body took watch to 1.2 GiB RSS and was blamed on a JSON decode."""
    with hostile_server(huge(600 << 20)) as url:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-c", PROBE_RSS, url], capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        took = time.monotonic() - started
    error, grew_mib = done.stdout.splitlines()
    assert error == "answer larger than 1 MiB (stopped reading)", done.stdout + done.stderr
    assert int(grew_mib) < 32 and took < 30, (grew_mib, took)


def test_a_good_answer_still_passes():
    with hostile_server(body(completion("<think>x</think> 42"))) as url:
        assert probe_generation(url, "m", S).ok


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_every_step_that_raises_becomes_an_incident_not_a_crash():
    """The issue's crash: a probe (TypeError) and a bundle collection (KeyError 'status' from a
    malformed generation) that raise; the supervisor records incidents, restarts, then stops."""
    clock, events = Clock(), []
    script = iter([TypeError("expected string or bytes-like object, got 'int'"), True, RecursionError()])

    def probe():
        step = next(script)
        if isinstance(step, BaseException):
            raise step
        return ProbeResult(True, 0.1)

    def collect(reason):
        raise KeyError("status")

    calls = {"restart": 0, "stop": 0}

    def restart():
        calls["restart"] += 1
        raise ValueError("the relaunch broke")

    def stop():
        calls["stop"] += 1
        raise OSError("ssh went away")

    s = WatchSettings(interval_s=10, latency_s=5, max_restarts=1, backoff_s=1)
    sup = Supervisor("lane", s, probe, collect, restart, stop, clock=clock.now, sleep=clock.sleep,
                     on_event=events.append)  # fmt: skip
    out = sup.run(max_probes=10)
    assert out.needs_human and out.probes == 3 and calls == {"restart": 1, "stop": 1}
    assert [i.restarted for i in out.incidents] == [True, False]
    assert out.incidents[0].restart_ok is False and out.incidents[0].bundle is None
    assert out.incidents[0].reason.startswith("generation probe failed: the probe raised TypeError: expected")
    assert "the probe raised RecursionError" in out.incidents[1].reason
    assert any("collecting the incident bundle raised KeyError: 'status'" in e for e in events), events
    assert any("stopping the lane raised OSError: ssh went away" in e for e in events), events


def test_a_crash_of_watch_itself_exits_70_not_1(tmp_path, monkeypatch):
    root = write_fleet(tmp_path / "fleet", {"spark": {"address": "localhost", "ssh_user": "root",
                       "local_hub": str(tmp_path / "hub"), "nas_hub": str(tmp_path / "nas"),
                       "state_dir": str(tmp_path / "state")}},
                       {"demo": demo_recipe(["spark"], free_port())})  # fmt: skip

    def boom(*a, **k):
        raise AttributeError("'NoneType' object has no attribute 'ok'")

    monkeypatch.setattr(watchmod, "watch_lane", boom)
    res = CliRunner().invoke(cli, ["--root", str(root), "watch", "demo", "--probes", "1"])
    assert res.exit_code == ExitCode.CRASHED == 70 != ExitCode.SHORTFALL, res.output
    assert "crashed" in res.output and "Restart=on-failure" in res.output
    assert "AttributeError" in res.output  # the traceback, for the journal and the bug report
    # and the unit text the help and README give restarts 70 but not 1
    help_text = CliRunner().invoke(cli, ["watch", "-h"]).output
    assert "RestartPreventExitStatus=1" in help_text and "70" in help_text


@pytest.mark.serial  # a time bound: make test runs it alone, after the parallel part
def test_smoke_drops_a_never_ending_stream_at_its_deadline():
    """Issue 20.17: the deadline was noticed but the connection kept being read (~50 s per case)."""
    with hostile_server(chatter()) as url:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "sparkfleet", "smoke", "--url", url, "--model", "m", "--timeout", "2"],
            capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"},
        )  # fmt: skip
        took = time.monotonic() - started
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.count("no complete answer within the 2 s deadline") == 2, done.stdout
    assert took < 2 * 2 + 4, took  # cases × timeout, plus the interpreter's start
