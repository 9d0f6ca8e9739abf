"""A lane launched before `gateway up` and launched again to take the gateway's key (what `up` tells
the operator to do), then `bench --gateway` at once: the real gateway (nginx front + smg) over a real
demo lane server on loopback ports.

smg registers a worker on its own schedule, a retry with a growing pause. `bench --gateway` right
after the relaunch met a gateway that had not taken the lane yet, and failed on 503 "No models
available"; it now waits until the gateway routes to every lane that serves with its key, and says
why when none does.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet.cli import main as cli
from sparkfleet.remote.nodecall import call_agent
from sparkfleet.serving import gateway

try:
    from support.localgateway import LANE, MODEL, free_port, start_lane, write_gateway_fleet
except ImportError:  # tests/ imported as a package
    from tests.support.localgateway import LANE, MODEL, free_port, start_lane, write_gateway_fleet

pytestmark = pytest.mark.timeout(300)

# smg's log line announcing its next try at registering a worker: "Step retrying ... delay_ms=4000"
RETRY = re.compile(r"Step retrying .*step_id=detect_backend .*delay_ms=(\d+)")


def _ansi_free(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _next_retry_at_least(log: Path, ms: int, timeout: float = 60) -> None:
    """Until smg's log says its next try at the refused worker is at least `ms` away: a lane that
    starts serving now is not routed to before then, however fast this machine is."""
    deadline = time.monotonic() + timeout
    while True:
        text = _ansi_free(log.read_text(errors="replace"))
        if any(int(d) >= ms for d in RETRY.findall(text)):
            return
        assert time.monotonic() < deadline, f"smg never paused {ms} ms before a retry:\n{text[-3000:]}"
        time.sleep(0.1)


@pytest.fixture
def refused(tmp_path):
    """The gateway up over its one lane, which serves with another key (launched before `up`)."""
    state = tmp_path / "gw"
    lane_port = free_port()
    inv = write_gateway_fleet(tmp_path, lane_port, tmp_path / "host-state")
    lanes = [start_lane(lane_port, "a-key-from-before-the-gateway")]
    try:
        st = gateway.up(inv, state, call_agent, bind="127.0.0.1", port=free_port(), metrics_port=free_port())
        assert st["lanes"][LANE].startswith("refuses the gateway key (HTTP 401)"), st
        assert f"sparkfleet launch {LANE} --replace" in st["lanes"][LANE]  # one command to run
        yield state, lane_port, lanes
    finally:
        gateway.down(state)
        for lane in lanes:
            lane.terminate()
            lane.wait(10)


def _bench(state: Path, out: Path):
    env = {"SPARKFLEET_GATEWAY_STATE": str(state), "SPARKFLEET_API_KEY": ""}
    argv = ["bench", "--gateway", "--quick", "--no-quality", "--out", str(out), "--concurrency", "1",
            "--requests", "2", "--json"]  # fmt: skip
    return CliRunner(env=env).invoke(cli, argv)


def test_bench_through_the_gateway_waits_for_a_lane_relaunched_with_its_key(refused, tmp_path):
    state, lane_port, lanes = refused
    _next_retry_at_least(state / "gateway.log", 3000)
    lanes[0].terminate()
    lanes[0].wait(10)
    lanes.append(start_lane(lane_port, gateway.gateway_key(state)))  # the relaunch: the gateway's key now
    assert gateway.status(state)["models"] == []  # smg has not taken it yet

    res = _bench(state, tmp_path / "reports")
    assert "503" not in res.output and "No models available" not in res.output, res.output
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["status"] == "ok", res.stdout
    assert gateway.status(state)["models"] == [MODEL]


def test_bench_through_the_gateway_with_no_lane_taking_its_key_says_which_and_how(refused, tmp_path):
    state, _, _ = refused
    res = _bench(state, tmp_path / "reports")
    assert res.exit_code == 1, res.output
    err = json.loads(res.stdout)
    assert err["error"].startswith(f"no lane behind the gateway serves with its key: {LANE}: refuses"), err
    assert f"sparkfleet launch {LANE} --replace" in err["error"]
    assert "Traceback" not in res.output and not (tmp_path / "reports").exists()
