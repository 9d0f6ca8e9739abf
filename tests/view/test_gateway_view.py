"""The gateway in the view: its users' requests counted from the front's access log, and its
replicas up as the gateway's own key finds them (a real demo server answers one of two)."""

from __future__ import annotations

import threading

import pytest

from sparkfleet.demo.openai_server import FakeLaneServer, parse_args
from sparkfleet.facts import apikeys
from sparkfleet.fleet import inventory
from sparkfleet.serving.front import paths as front_paths
from sparkfleet.serving.gateway import KEY_NAME
from sparkfleet.view.gatewaylog import access_counts, gateway_view
from sparkfleet.view.metrics import gateway_samples
from sparkfleet.view.snapshot import FleetSnapshot, snapshot_json
from support.lanefleet import lane_recipe, write_fleet

KEY = "sk-sf-" + "g" * 40


@pytest.fixture
def worker():
    server = FakeLaneServer(parse_args(["--host", "127.0.0.1", "--port", "0", "--api-key", KEY,
                                        "--served-model-name", "m"]))  # fmt: skip
    server.state.ready = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_requests_per_user_and_replicas_up(tmp_path, worker):
    hosts = {
        name: {"address": addr, "ssh_user": "root", "local_hub": str(tmp_path / name / "hub"),
               "nas_hub": str(tmp_path / "nas")}
        for name, addr in (("spark1", "127.0.0.1"), ("spark2", "127.0.0.2"))
    }  # fmt: skip
    launch = (f'\n[launch]\nruntime = "process"\nport = {worker}\nfabric = "none"\ncommand = ["true"]\n'
              'served_model_name = "m"\n[gateway]\nreplicas = [["spark1"], ["spark2"]]\n')  # fmt: skip
    lanes = {"lane": lane_recipe(["spark1"], extra=launch)}
    inv = inventory.load(write_fleet(tmp_path / "fleet", hosts, lanes))
    state = tmp_path / "gateway"
    apikeys.write_key(state, KEY_NAME, KEY)
    log = front_paths(state).access_log
    log.parent.mkdir(parents=True)
    log.write_text(
        '2026-09-27T05:30:09+00:00 10.0.0.9 alice "POST /v1/chat/completions HTTP/1.1" 200 w1 1.2\n'
        '2026-09-27T05:30:10+00:00 10.0.0.9 alice "POST /v1/chat/completions HTTP/1.1" 200 w2 1.1\n'
        '2026-09-27T05:30:11+00:00 10.0.0.7 - "GET /v1/models HTTP/1.1" 401 - 0.000\n'
    )
    counts = access_counts(state)
    view = gateway_view(inv, state, counts)
    assert view is not None and view.running is False  # no record: `gateway up` never ran here
    assert view.requests == {("alice", "200"): 2, ("-", "401"): 1}
    assert (view.replicas, view.replicas_up) == ({"m": 2}, {"m": 1})  # spark2's address answers nothing
    samples = dict(gateway_samples(view)).get
    names = [name for name, _ in gateway_samples(view)]
    assert names.count("sparkfleet_gateway_requests") == 2 and samples("sparkfleet_gateway_up") == ((), 0.0)
    with log.open("a") as fh:
        fh.write('2026-09-27T05:31:00+00:00 10.0.0.9 alice "GET /v1/models HTTP/1.1" 200 w1 0.01\n')
    again = gateway_view(inv, state, counts)
    assert again.requests[("alice", "200")] == 3  # only the new line is read
    rows = snapshot_json(FleetSnapshot(1.0, 0.1, 1, None, (), (), again))["gateway"]["requests"]
    assert {"user": "alice", "code": "200", "requests": 3} in rows
