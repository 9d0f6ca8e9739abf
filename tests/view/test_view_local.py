"""The view over the demo fleet on this machine (loopback hosts): the snapshot follows the lane up,
through a crash, to the operator's stop; the service serves it with and without a key; the page
is what headless Chromium draws."""

from __future__ import annotations

import base64
import json
import os
import signal
import threading
import urllib.error
import urllib.request

import pytest

from sparkfleet.demo.fleet import DEMO_LANE, write_demo_fleet
from sparkfleet.fleet import inventory
from sparkfleet.launch import lane as lanes
from sparkfleet.node import records
from sparkfleet.view.metrics import METRICS
from sparkfleet.view.refresh import Refresher
from sparkfleet.view.server import serve
from sparkfleet.view.service import key_for, parse_listen

# the demo lane serves on this machine's ports: one module at a time (make test's "local_lanes")
pytestmark = [pytest.mark.xdist_group("local_lanes"), pytest.mark.slow]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo fleet, its lane launched (weights from the NAS: nothing staged), stopped after."""
    fleet = write_demo_fleet(tmp_path_factory.mktemp("view-demo"), shard_bytes=16 * 1024)
    inv = inventory.load(fleet.root)
    try:
        report = lanes.launch(inv, DEMO_LANE, canary=False, allow_nas_weights=True)
        assert report.ready.ok, report.ready.reason
        yield inv
    finally:
        lanes.stop(inv, DEMO_LANE, 5)


def _lane(snap):
    return next(v for v in snap.lanes if v.lane == DEMO_LANE)


@pytest.fixture
def service(demo):
    """The view's HTTP service on a loopback port, over a refresher that was run once."""
    refresher = Refresher(lambda: inventory.load(demo.root), interval_s=3600, node_timeout_s=20)
    refresher.refresh()
    servers = []

    def start(key: str | None = None):
        server = serve(refresher, "127.0.0.1", 0, key, 5.0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start, refresher
    for s in servers:
        s.shutdown()
        s.server_close()
    refresher.stop()


def _get(url: str, headers: dict | None = None) -> tuple[int, bytes, dict]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=20) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def test_metrics_and_page_served_without_a_key_on_loopback(service):
    start, refresher = service
    url = start()
    status, body, headers = _get(url + "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = body.decode()
    assert f'sparkfleet_lane_up{{lane="{DEMO_LANE}"}} 1.0' in text
    assert f'sparkfleet_lane_ready{{lane="{DEMO_LANE}"}} 1.0' in text
    assert 'sparkfleet_host_reachable{host="dgx1"} 1.0' in text
    for m in METRICS:  # every family is declared on every scrape, with its type
        assert f"# TYPE {m.exposed} {m.kind}" in text
    status, page, _ = _get(url + "/")
    assert status == 200 and DEMO_LANE.encode() in page and b"<script" not in page
    assert _get(url + "/metrics", {"Authorization": "Bearer anything"})[0] == 200  # no key asked
    assert _get(url + f"/lanes/{DEMO_LANE}/history")[0] == 200
    assert _get(url + "/lanes/no-such-lane/history")[0] == 404


def test_beyond_loopback_a_key_is_made_once_and_asked_for(service, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    assert key_for(parse_listen("127.0.0.1:9841")) == (None, None)
    key, path = key_for(parse_listen("0.0.0.0:9841"))
    assert path == tmp_path / "state" / "view" / "keys" / "view.key"
    assert oct(path.stat().st_mode & 0o777) == "0o600" and key_for(parse_listen(":9841"))[0] == key
    start, _ = service
    url = start(key)
    status, _, headers = _get(url + "/metrics")
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert _get(url + "/metrics", {"Authorization": "Bearer " + key[:-1] + "x"})[0] == 401
    assert _get(url + "/metrics", {"Authorization": "Bearer " + key})[0] == 200
    basic = base64.b64encode(f"operator:{key}".encode()).decode()
    status, page, _ = _get(url + "/", {"Authorization": "Basic " + basic})
    assert status == 200 and DEMO_LANE.encode() in page
    assert key.encode() not in page


def test_snapshot_json_names_every_lane_and_host(demo):
    from click.testing import CliRunner

    from sparkfleet.cli import main

    res = CliRunner().invoke(main, ["--root", str(demo.root), "view", "snapshot", "--json"])
    doc = json.loads(res.output)
    assert [lane["lane"] for lane in doc["lanes"]] == [DEMO_LANE]
    assert sorted(h["host"] for h in doc["hosts"]) == ["dgx1", "dgx2"]
    assert all(h["reachable"] for h in doc["hosts"])


def test_a_crash_reads_down_and_wanted_until_the_operator_stops_it(demo):
    """Last in the module: it ends the lane. Before the fix, `stop` of crashed ranks left the
    generation unstopped, so the lane read "wanted" (and alerted) until it was launched again."""
    refresher = Refresher(lambda: inventory.load(demo.root), node_timeout_s=20)
    try:
        v = _lane(refresher.refresh())
        assert (v.up, v.ready, v.wanted, v.ranks_running) == (True, True, True, 2)
        assert sorted(v.nas_weight_files) == ["dgx1", "dgx2"] and min(v.nas_weight_files.values()) > 0
        for host in ("dgx1", "dgx2"):  # the crash: every rank's group, by our own records' PIDs
            for rec in records.load_all(inventory.state_dir_of(demo.host(host)), DEMO_LANE):
                os.killpg(rec.pgid or rec.pid, signal.SIGKILL)
        v = _lane(refresher.refresh())
        assert (v.up, v.wanted, v.ranks_running) == (False, True, 0)
        lanes.stop(demo, DEMO_LANE, 5)
        v = _lane(refresher.refresh())
        assert (v.up, v.wanted, v.ranks_running) == (False, False, 0)
    finally:
        refresher.stop()
