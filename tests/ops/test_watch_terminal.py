"""`watch` as an operator meets it: its help's own example runs as written, a healthy watch shows a
one-line heartbeat on a terminal, and Ctrl-C ends `watch` and `logs -f` cleanly (exit 0, the
counts so far, never "error: interrupted")."""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from sparkfleet.base.errors import ExitCode, SparkfleetError
from sparkfleet.cli import main
from sparkfleet.demo.fleet import DEMO_LANE
from sparkfleet.fleet.sections import RecipeSections, recipe_sections
from sparkfleet.ops.supervisor import ProbeResult, Supervisor, WatchSettings, watch_settings
from support.demolane import read_until, served_demo

pytestmark = pytest.mark.xdist_group("local_lanes")  # the demo lane's ports: one module at a time


def test_only_an_interval_shrinks_the_default_latency_bound_never_a_chosen_one():
    assert watch_settings(RecipeSections(), interval_s=10).latency_s == 10
    assert watch_settings(RecipeSections(), interval_s=60).latency_s == WatchSettings.latency_s
    with pytest.raises(SparkfleetError, match="longer than the interval"):
        watch_settings(RecipeSections(), interval_s=10, latency_s=20)  # both chosen: refused, as before
    with pytest.raises(SparkfleetError, match="longer than the interval"):
        watch_settings(recipe_sections({"watch": {"latency_s": 30}}), interval_s=10)  # its bound stands


def test_ctrl_c_inside_the_loop_returns_what_was_seen():
    seen = []

    def probe():
        if len(seen) == 2:
            raise KeyboardInterrupt
        seen.append(1)
        return ProbeResult(True, 0.01)

    beats = []
    sup = Supervisor("l", WatchSettings(interval_s=0.0, latency_s=0.0), probe, lambda r: None,
                     lambda: True, lambda: None, sleep=lambda s: None,
                     on_state=lambda state, out, res: beats.append((state, out.probes, res.ok)))  # fmt: skip
    out = sup.run()
    assert out.interrupted and out.probes == 2 and out.failures == 0
    assert beats == [("watching", 1, True), ("watching", 2, True)]


@pytest.fixture(scope="module")
def demo_lane(tmp_path_factory):
    with served_demo(tmp_path_factory.mktemp("watch")) as fleet:
        yield fleet


def test_the_help_example_runs_as_written(demo_lane):
    help_text = CliRunner().invoke(main, ["watch", "--help"]).output
    examples = re.findall(r"sparkfleet watch \S+( --interval .*)", help_text)
    assert examples == [" --interval 10 --probes 3 --json"]
    result = CliRunner().invoke(
        main, ["--root", str(demo_lane.root), "watch", DEMO_LANE, *shlex.split(examples[0])]
    )
    assert result.exit_code == ExitCode.OK, result.output
    doc = json.loads(result.stdout)
    assert (doc["probes"], doc["failures"], doc["restarts"], doc["interrupted"]) == (3, 0, 0, False)


def _sparkfleet(root, *args: str) -> list[str]:
    return [sys.executable, "-m", "sparkfleet", "--root", str(root), *args]


def test_a_healthy_watch_beats_on_a_terminal_and_ctrl_c_ends_it(demo_lane):
    leader, follower = pty.openpty()
    proc = subprocess.Popen(_sparkfleet(demo_lane.root, "watch", DEMO_LANE, "--interval", "1"),
                            stdin=follower, stdout=follower, stderr=follower, close_fds=True)  # fmt: skip
    os.close(follower)
    try:
        seen = read_until(leader, rf"♥ {DEMO_LANE}: probe 2 ok in \d+\.\d\d s", 60)
        assert re.search(rf"♥ {DEMO_LANE}: probe 2 ok in", seen), seen
        assert "\r\x1b[2K" in seen  # redrawn in place: one line, not one per probe
        proc.send_signal(signal.SIGINT)  # our own child, by its PID
        rest = read_until(leader, r"restarts \(Ctrl-C", 30)
        assert proc.wait(30) == ExitCode.OK
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    assert re.search(rf"{DEMO_LANE}: \d+ probes, 0 failed, 0 restarts \(Ctrl-C: stopped watching", rest), rest
    assert "error: interrupted" not in seen + rest and "Traceback" not in seen + rest


def test_ctrl_c_ends_logs_follow_cleanly(demo_lane):
    proc = subprocess.Popen(_sparkfleet(demo_lane.root, "logs", DEMO_LANE, "-f"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        first = proc.stdout.readline()  # the head's log is there: following has begun
        assert first, proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.OK, err
    assert "error: interrupted" not in err and "Traceback" not in err
