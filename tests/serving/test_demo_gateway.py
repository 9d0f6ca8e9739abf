"""A newcomer tries the gateway and per-user keys on the demo fleet as `make demo` wrote it, no edits.

`sparkfleet gateway up` on the demo said "no lane serves through the gateway": the demo's recipe had
no `[gateway]` table. Here, on the demo fleet with its lane staged and stopped (as the demo leaves
it): `gateway up`, `keys add alice`, `launch` (the lane takes the gateway's key), then alice's chat
through the gateway is served by the demo lane, and a revoked alice gets 401.
"""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from sparkfleet.cli import main as cli
from sparkfleet.demo.fleet import DEMO_LANE, write_demo_fleet
from sparkfleet.engram import pack as engram_pack
from sparkfleet.fleet import inventory
from sparkfleet.launch import lane as lanes
from sparkfleet.serving import gateway
from sparkfleet.stage import execute
from sparkfleet.stage.targets import requests_for_host

try:
    from support.localgateway import chat_body, free_port, request
except ImportError:  # tests/ imported as a package
    from tests.support.localgateway import chat_body, free_port, request

# the demo lane's ports on this machine: one module at a time with the others that launch lanes here
pytestmark = [pytest.mark.xdist_group("local_lanes"), pytest.mark.slow, pytest.mark.timeout(600)]


def test_gateway_and_keys_work_on_the_demo_fleet_as_written(tmp_path):
    fleet = write_demo_fleet(tmp_path, shard_bytes=16 * 1024)
    inv = inventory.load(fleet.root)
    for host in inv.lane(DEMO_LANE).hosts:
        assert execute.stage(requests_for_host(inv, host, DEMO_LANE)).ok
        engram_pack.pack(inv, DEMO_LANE, host)
    state = tmp_path / "gw"
    env = {"SPARKFLEET_GATEWAY_STATE": str(state)}
    port = free_port()

    def run(*args: str):
        return CliRunner(env=env).invoke(cli, ["--root", str(fleet.root), *args])

    try:
        res = run("gateway", "up", "--port", str(port), "--bind", "127.0.0.1", "--json")
        assert res.exit_code == 0, res.output
        st = json.loads(res.stdout[res.stdout.index("{"):])
        assert st["running"] and list(st["lanes"]) == [DEMO_LANE], st
        res = run("keys", "add", "alice", "--json")
        assert res.exit_code == 0, res.output
        alice = json.loads(res.stdout)["key"]

        assert lanes.launch(inv, DEMO_LANE).ready.ok  # it takes the gateway's key, now its own
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        deadline = time.monotonic() + 60
        while (ans := request(url, alice, "POST", chat_body())).status != 200:
            assert time.monotonic() < deadline, (ans.status, ans.body[:300])  # smg adds it on health
            time.sleep(0.5)
        assert ans.headers.get(gateway.ROUTED_HEADER) == gateway.plan(inv).workers[0].url
        assert json.loads(ans.body)["choices"][0]["message"]["content"]

        res = run("keys", "revoke", "alice", "--json")
        assert res.exit_code == 0 and json.loads(res.stdout)["gateway_refuses_it"] is True, res.output
        assert request(url, alice, "POST", chat_body()).status == 401
    finally:
        lanes.stop(inv, DEMO_LANE, 5)
        run("gateway", "down")
