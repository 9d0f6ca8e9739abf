"""Debian's Prometheus scrapes `sparkfleet view serve` over a demo lane running on netns hosts.

dgx1 and dgx2 are network namespaces with their own sshd; the lane `demo-view` is the demo
OpenAI server under the process runtime (as `make demo` runs it), launched over real ssh. dgx3 is
a third host with no lane: the one made unreachable. The exporter runs here (the head host's
role), Prometheus too, reading the file_sd targets and the rules `sparkfleet view targets` wrote
from this inventory. Everything below is read back through Prometheus's own HTTP API.

Time bounds are held to what was served: the moment the lane went down is when its ranks were
killed, the moment Prometheus saw it is the timestamp of the first 0 sample it stored, and the
allowance is two scrape intervals plus the refresh time the exporter itself reported.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
from click.testing import CliRunner

from sparkfleet.base.http import free_port
from sparkfleet.cli import main as cli
from sparkfleet.demo.hubfixture import build_nas_hub
from sparkfleet.fleet import inventory
from sparkfleet.launch import lane as lanes
from sparkfleet.node import records
from sparkfleet.view.targets import JOBS
from support.lanefleet import MODELS, netns_fields, use_ssh, write_fleet

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.xdist_group("view_fleet")]
PROMETHEUS = "/usr/bin/prometheus"
LANE = "demo-view"
PORT = 30100
SCRAPE_S = 1.0
NODE_TIMEOUT_S = 3.0


def recipe() -> str:
    argv = [sys.executable, "-m", "sparkfleet.demo.openai_server", "--host", "0.0.0.0", "--port", "{port}",
            "--served-model-name", "{served_model_name}", "--boot-delay", "0.5",
            "--api-key-env", "SPARKFLEET_API_KEY", "--signature", "RoCEnante ready: world=2"]  # fmt: skip
    return f"""
[lane]
hosts = ["dgx1", "dgx2"]

[world]
tp = 2

[launch]
runtime = "process"
port = {PORT}
fabric = "none"
served_model_name = "deepseek-v4.1-flash"
command = {json.dumps(argv)}
ready_signatures = ["RoCEnante ready: world=2", "The server is fired up and ready to roll!"]

[launch.timeouts]
ready_s = 60
poll_s = 0.3
stop_s = 5

[view]
reference_tps = 35.0
""" + MODELS


def get_json(url: str, timeout: float = 10) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def wait_for(what: str, check, timeout: float = 60.0, every: float = 0.25):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            last = check()
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def stop_proc(proc: subprocess.Popen) -> None:
    """Our own child, by its PID: SIGTERM, then SIGKILL."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Prom:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict]:
        q = urllib.parse.urlencode({"query": expr})
        return get_json(f"{self.url}/api/v1/query?{q}")["data"]["result"]

    def value(self, expr: str) -> float | None:
        res = self.query(expr)
        return float(res[0]["value"][1]) if res else None

    def series(self, expr: str, start: float, end: float) -> list[tuple[float, float]]:
        q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": 0.25})
        res = get_json(f"{self.url}/api/v1/query_range?{q}")["data"]["result"]
        return [(float(t), float(v)) for t, v in res[0]["values"]] if res else []

    def alerts(self) -> list[dict]:
        return get_json(f"{self.url}/api/v1/alerts")["data"]["alerts"]


@pytest.fixture(scope="module")
def fleet(fleetnet, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("view-fleet")
    hosts, procs = {}, []
    try:
        for name in ("dgx1", "dgx2", "dgx3"):
            hosts[name] = fleetnet.add_host(name)
        with pytest.MonkeyPatch.context() as mp:
            nas = build_nas_hub(fleetnet.unique_dir("nas") / "hub", shard_bytes=16 * 1024)
            use_ssh(mp, tmp / "ssh_config")
            fields = {n: netns_fields(h, nas.root) for n, h in hosts.items()}
            fields["dgx1"]["node_exporter_port"] = 9100  # nothing listens: a target Prometheus sees down
            root = write_fleet(tmp / "fleet", fields, {LANE: recipe()})
            inv = inventory.load(root)
            report = lanes.launch(inv, LANE, allow_nas_weights=True, canary=False)
            assert report.ready.ok, (report.ready.reason, report.ready.tail)

            view_port, prom_port = free_port(), free_port()
            promdir = tmp / "prom"
            res = CliRunner().invoke(cli, ["--root", str(root), "view", "targets", "--out", str(promdir),
                                           "--view", f"127.0.0.1:{view_port}", "--interval", str(SCRAPE_S),
                                           "--json"])  # fmt: skip
            assert res.exit_code == 0, res.output
            view = subprocess.Popen(
                [sys.executable, "-m", "sparkfleet", "--root", str(root), "view", "serve",
                 "--listen", f"127.0.0.1:{view_port}", "--interval", "1",
                 "--node-timeout", str(NODE_TIMEOUT_S)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            procs.append(view)
            prom = subprocess.Popen(
                [PROMETHEUS, f"--config.file={promdir / 'prometheus.yml'}",
                 f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}",
                 "--log.level=warn"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            procs.append(prom)
            yield {"inv": inv, "hosts": hosts, "prom": Prom(f"http://127.0.0.1:{prom_port}"),
                   "view": f"http://127.0.0.1:{view_port}", "targets": json.loads(res.output)["targets"],
                   "view_proc": view, "prom_proc": prom}  # fmt: skip
            lanes.stop(inv, LANE, 5)
    finally:
        for p in reversed(procs):
            stop_proc(p)
        for h in hosts.values():
            fleetnet.remove_host(h)


@pytest.mark.skipif(not os.access(PROMETHEUS, os.X_OK), reason="Debian's prometheus is not installed")
def test_prometheus_sees_the_lane_go_down_and_the_unreachable_host(fleet):
    prom, inv, hosts = fleet["prom"], fleet["inv"], fleet["hosts"]
    up = f'sparkfleet_lane_up{{lane="{LANE}"}}'
    assert wait_for("lane_up 1 through Prometheus", lambda: prom.value(up) == 1.0, timeout=90)

    # the targets Prometheus scrapes are the file_sd targets generated from this inventory
    active = get_json(f"{prom.url}/api/v1/targets")["data"]["activeTargets"]
    scraped = sorted((t["scrapePool"], t["discoveredLabels"]["__address__"]) for t in active)
    generated = sorted(
        (JOBS[f], a) for f, groups in fleet["targets"].items() for g in groups for a in g["targets"]
    )
    head = inv.host("dgx1").address
    assert generated == sorted([("sparkfleet-view", fleet["view"].removeprefix("http://")),
                                ("sparkfleet-engines", f"{head}:{PORT}"),
                                ("sparkfleet-nodes", f"{head}:9100")])  # fmt: skip
    assert scraped == generated
    engine = f'up{{job="sparkfleet-engines",lane="{LANE}"}}'
    assert wait_for("the engine's /metrics scraped", lambda: prom.value(engine) == 1.0)
    assert prom.value(f'sparkfleet_lane_ranks_running{{lane="{LANE}"}}') == 2.0
    assert prom.value(f'sparkfleet_lane_decode_reference_tokens_per_second{{lane="{LANE}"}}') == 35.0
    nas = prom.value(f'sparkfleet_lane_nas_weight_files{{lane="{LANE}",host="dgx1"}}')
    assert nas and nas > 0  # launched with --allow-nas-weights: nothing was staged
    assert prom.value('sparkfleet_host_reachable{host="dgx3"}') == 1.0

    # a crash: every rank's process group killed (by the PIDs our records hold), no `stop`
    refresh_s = max(prom.value("max_over_time(sparkfleet_view_refresh_duration_seconds[1m])") or 0, 1.0)
    killed_at = time.time()
    for name in ("dgx1", "dgx2"):
        for rec in records.load_all(hosts[name].root / "state", LANE):
            os.killpg(rec.pgid or rec.pid, signal.SIGKILL)
    wait_for("lane_up 0", lambda: prom.value(up) == 0.0, timeout=60)

    def stored_zeros() -> list[float]:
        # a range query's last step can fall just before the sample the instant query saw: ask
        # again until the stored 0 is inside the range
        return [t for t, v in prom.series(up, killed_at - 5, time.time()) if v == 0.0]

    zeros = wait_for("Prometheus to store a 0 sample", stored_zeros, timeout=10)
    # the first stored 0: within two scrape intervals of the refresh that saw the ranks gone
    seen_after = zeros[0] - killed_at
    assert seen_after <= 2 * SCRAPE_S + refresh_s + 1.0 + 0.25, (seen_after, refresh_s)

    def firing() -> list[dict]:
        return [a for a in prom.alerts() if a["labels"]["alertname"] == "SparkfleetLaneDown"
                and a["labels"].get("lane") == LANE and a["state"] == "firing"]  # fmt: skip

    assert wait_for("SparkfleetLaneDown firing", firing, timeout=30)

    # the operator's stop: the lane is no longer wanted, the alert resolves
    lanes.stop(inv, LANE, 5)
    wait_for("SparkfleetLaneDown resolved", lambda: not firing(), timeout=30)
    assert prom.value(f'sparkfleet_lane_wanted{{lane="{LANE}"}}') == 0.0

    # dgx3 made unreachable (its leg of the bridge down): shown as such, and every scrape succeeds
    subprocess.run(["ip", "link", "set", hosts["dgx3"].veth, "down"], check=True)
    try:
        reach = 'sparkfleet_host_reachable{host="dgx3"}'
        gone_at = time.time()
        wait_for("dgx3 unreachable", lambda: prom.value(reach) == 0.0, timeout=NODE_TIMEOUT_S + 30)
        view_up = prom.series('up{job="sparkfleet-view"}', gone_at, time.time())
        assert view_up and all(v == 1.0 for _, v in view_up), view_up  # not one failed scrape
        longest = prom.value('max_over_time(scrape_duration_seconds{job="sparkfleet-view"}[1m])')
        assert longest is not None and longest < SCRAPE_S, longest  # the scrape never waited on dgx3
        assert prom.value('sparkfleet_host_reachable{host="dgx1"}') == 1.0
    finally:
        subprocess.run(["ip", "link", "set", hosts["dgx3"].veth, "up"], check=False)
