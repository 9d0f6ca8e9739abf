"""A 4-node lane over real ssh: dgx1..dgx4 are network namespaces, each with its own sshd and NVMe dir.

The serve command is the demo OpenAI-compatible server printing the TP4 boot signatures, run by
the process runtime. Asserted: every rank's env, the bind manifests (staged+verified nodes bind
locally, the unstaged node binds the NAS), stale receipts removed (one root-owned, one another
user's), readiness, status, logs, and that stop leaves nothing running in any namespace.
Failures: an unreachable host and a bad shape are refused before anything starts.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.lanefleet import MODELS, netns_fields, use_ssh, write_fleet

try:
    from support.fleetnet import netns_pids
except ImportError:  # tests/ imported as a package
    from tests.support.fleetnet import netns_pids

from sparkfleet.cli import main as cli
from sparkfleet.demo.hubfixture import DRAFTER_REPO, WEIGHTS_REPO, build_nas_hub
from sparkfleet.fleet import inventory
from sparkfleet.lane.spec import ShapeError
from sparkfleet.launch import lane as lanes
from sparkfleet.remote.hosts import HostUnreachable
from sparkfleet.stage.execute import stage
from sparkfleet.stage.plan import StageRequest

# One worker runs this module (make test's xdist): its module-scoped fixture is built once.
pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.xdist_group("launch_fleet")]
OTHER_UID = 54321
PORT = 30000
SIGNATURES = ["DSV41 shared-expert padding K: (5120, 576) -> (5120, 640)", "RoCEnante ready: world=4",
              "[moe_b12x_next] armed: routed MoE at EP_SIZE=1"]  # fmt: skip


def recipe(hosts: list[str], tp: int, extra: str = "", ready_s: float = 60) -> str:
    sig_args = "".join(
        f', "--signature", {json.dumps(s)}' for s in ["Load weight end. elapsed=1.5 s", *SIGNATURES]
    )
    return (
        f"""
[lane]
hosts = {json.dumps(hosts)}

[world]
tp = {tp}
ep = 1
pad = 0
launcher = "tp{tp}"

[launch]
runtime = "process"
port = {PORT}
dist_port = 20000
served_model_name = "deepseek-v4.1-flash"
fabric = "none"
command = ["{sys.executable}", "-m", "sparkfleet.demo.openai_server",
           "--host", "0.0.0.0", "--port", "{{port}}",
           "--served-model-name", "{{served_model_name}}", "--boot-delay", "1.0"{sig_args}{extra}]
ready_signatures = {json.dumps([*SIGNATURES, "The server is fired up and ready to roll!"])}
receipt_roots = ["/cache/ds41-backend-attestation", "/cache/ds41-combined-ready", "/cache/ds41-display-kv"]
[launch.timeouts]
ready_s = {ready_s}
poll_s = 0.3
stop_s = 5
"""
        + MODELS
    )


# rank 2 (dgx3) exits half-way through its boot; the head would need 8 s to come up
_WRAPPER = (
    "import os, sys; args = sys.argv[1:]; "
    "args += ['--exit-during-boot'] if os.environ['NODE_RANK'] == '2' else []; "
    "os.execv(sys.executable, [sys.executable, '-m', 'sparkfleet.demo.openai_server', *args])"
)
WORKER_DIES = (
    f"""
[lane]
hosts = ["dgx1", "dgx2", "dgx3", "dgx4"]

[world]
tp = 4

[launch]
runtime = "process"
port = {PORT}
fabric = "none"
command = [{json.dumps(sys.executable)}, "-c", {json.dumps(_WRAPPER)},
           "--host", "0.0.0.0", "--port", "{{port}}",
           "--boot-delay", "8", "--signature", "RoCEnante ready: world=4"]
ready_signatures = ["RoCEnante ready: world=4", "The server is fired up and ready to roll!"]
[launch.timeouts]
ready_s = 30
poll_s = 0.3
stop_s = 5
"""
    + MODELS
)


@pytest.fixture(scope="module")
def fleet(fleetnet, tmp_path_factory):
    """dgx1..dgx4 for the whole module (hosts are the slow part); torn down even on failure."""
    tmp_path = tmp_path_factory.mktemp("launch-fleet")
    hosts = {}
    try:
        for name in ("dgx1", "dgx2", "dgx3", "dgx4"):
            hosts[name] = fleetnet.add_host(name)
        with pytest.MonkeyPatch.context() as mp:
            yield from _fleet(fleetnet, hosts, tmp_path, mp)
    finally:
        for h in hosts.values():
            fleetnet.remove_host(h)


def _fleet(fleetnet, hosts, tmp_path, monkeypatch):
    nas = build_nas_hub(fleetnet.unique_dir("nas") / "hub", shard_bytes=16 * 1024)
    use_ssh(monkeypatch, tmp_path / "ssh_config")
    fields = {name: netns_fields(h, nas.root) for name, h in hosts.items()}
    fields["ghost"] = {**fields["dgx1"], "address": str(fleetnet.subnet.broadcast_address - 1),
                       "state_dir": str(tmp_path / "ghost")}  # fmt: skip
    root = write_fleet(
        tmp_path / "fleet",
        fields,
        {
            "tp4": recipe(list(hosts), 4, ', "--api-key-env", "SPARKFLEET_API_KEY"'),
            "withghost": recipe(["dgx1", "ghost"], 2),
            "badshape": recipe(["dgx1", "ghost"], 3),
            "workerdies": WORKER_DIES,
        },
    )
    inv = inventory.load(root)
    try:
        yield inv, hosts, nas
    finally:
        lanes.stop(inv, "tp4", 5)


def _server_env(pid: int) -> dict[str, str]:
    """The env of the serve command under the rank's supervisor (same PID namespace as the test)."""
    from sparkfleet.base.procs import group_members

    child = max(p for p in group_members(pid) if p != pid)
    raw = Path(f"/proc/{child}/environ").read_text()
    return dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)


def test_four_node_lane_launch_to_stop(fleet):
    inv, hosts, nas = fleet
    # dgx1-3 staged locally and verified; dgx4 never staged (reads everything from the NAS)
    for name in ("dgx1", "dgx2", "dgx3"):
        reqs = [StageRequest(nas.root, hosts[name].nvme / "hub", WEIGHTS_REPO, "main", (), ("page15/*",)),
                StageRequest(nas.root, hosts[name].nvme / "hub", DRAFTER_REPO, "main")]  # fmt: skip
        assert stage(reqs).ok
    # yesterday's receipts: root-owned on dgx1, another user's on dgx2
    stale = {}
    for name, uid in (("dgx1", 0), ("dgx2", OTHER_UID)):
        d = hosts[name].root / "state" / "cache" / "tp4" / "ds41-backend-attestation" / "root"
        d.mkdir(parents=True)
        (d / "worker.json").write_text("{}")
        for p in (d / "worker.json", d, d.parent):
            os.chown(p, uid, uid)
        stale[name] = d.parent

    runner = CliRunner()
    res = runner.invoke(cli, ["--root", str(inv.root), "manifest", "tp4", "dgx1", "--json"])
    assert res.exit_code == 0, res.output
    m1 = json.loads(res.output)
    n_page = len(nas.weights.optional[next(iter(nas.weights.optional))])
    assert m1["nas"] == n_page and m1["local"] == m1["total"] - n_page and m1["local"] > 0
    m4 = json.loads(runner.invoke(cli, ["--root", str(inv.root), "manifest", "tp4", "dgx4", "--json"]).output)
    assert m4["local"] == 0 and m4["nas"] == m1["total"]
    env3 = json.loads(runner.invoke(cli, ["--root", str(inv.root), "env", "tp4", "dgx3", "--json"]).output)
    assert env3["env"]["NODE_RANK"] == "2" and env3["env"]["DSV41_LAUNCHER"] == "tp4"

    report = lanes.launch(inv, "tp4", allow_nas_weights=True)
    assert report.ready.ok, (report.ready.reason, report.ready.tail)
    assert [r.host for r in report.started] == ["dgx4", "dgx3", "dgx2", "dgx1"]  # workers first, head last
    assert report.ready.weight_load_s == 1.5
    assert list(report.ready.stages)[:3] == SIGNATURES
    for name in ("dgx1", "dgx2"):
        assert not stale[name].exists()
        started = next(r for r in report.started if r.host == name)
        assert str(stale[name]) in started.receipts_cleared

    st = lanes.status(inv, "tp4")
    assert st.running == 4 and st.endpoints["health"] == 200
    assert st.endpoints["models"] == ["deepseek-v4.1-flash"]  # the agent sent the lane's key
    head = inv.host("dgx1").address
    # one key, 0600 under each host's state dir (launch made it); the head refuses anyone without it
    key_files = [hosts[n].root / "state" / "keys" / "tp4.key" for n in hosts]
    assert {oct(f.stat().st_mode & 0o777) for f in key_files} == {"0o600"}
    assert len({f.read_text() for f in key_files}) == 1
    key = key_files[0].read_text().strip()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://{head}:{PORT}/v1/models", timeout=10)
    assert refused.value.code == 401
    bearer = {"Authorization": f"Bearer {key}"}
    keyed = urllib.request.Request(f"http://{head}:{PORT}/v1/models", headers=bearer)
    with urllib.request.urlopen(keyed, timeout=10) as resp:
        assert resp.status == 200
    res = CliRunner().invoke(cli, ["--root", str(inv.root), "smoke", "tp4"])  # the key read over ssh
    assert res.exit_code == 0 and key not in res.output, res.output
    doc = CliRunner().invoke(cli, ["--root", str(inv.root), "doctor", "tp4", "--json"])
    api = [c for c in json.loads(doc.output)["checks"] if c["name"] == "API key"]
    assert len(api) == 4 and all(c["ok"] for c in api), api
    assert key not in doc.output
    for r in st.ranks:
        env = _server_env(r.pid)
        i = int(r.host[-1])
        assert env["NODE_RANK"] == str(i - 1)
        assert (env["TP_SIZE"], env["EP_SIZE"], env["DSV41_TP_PAD"], env["NNODES"]) == ("4", "1", "0", "4")
        assert env["DSV41_LAUNCHER"] == "tp4"
        assert env["DIST_INIT_ADDR"] == f"{head}:20000"
        local_model = str(hosts[r.host].nvme / "hub")
        assert env["MODEL_PATH"].startswith(local_model if i < 4 else str(nas.root))
        # the rank really runs inside its node's network namespace
        assert r.pid in netns_pids(hosts[r.host].netns)

    res = runner.invoke(cli, ["--root", str(inv.root), "logs", "tp4", "dgx2", "-n", "20"])
    assert res.exit_code == 0 and "RoCEnante ready: world=4" in res.output and "dgx2 rank 1" in res.output
    res = runner.invoke(cli, ["--root", str(inv.root), "status", "tp4", "--json"])
    assert json.loads(res.output)["running"] == 4

    res = runner.invoke(cli, ["--root", str(inv.root), "stop", "tp4"])
    assert res.exit_code == 0, res.output
    for name, h in hosts.items():
        assert netns_pids(h.netns) == [h.sshd_pid], f"{name} still runs something"
    assert lanes.status(inv, "tp4").running == 0


def test_unreachable_host_refused_before_anything_starts(fleet):
    inv, hosts, _ = fleet
    with pytest.raises(HostUnreachable, match="ghost: ssh failed"):
        lanes.launch(inv, "withghost", allow_nas_weights=True)
    assert netns_pids(hosts["dgx1"].netns) == [hosts["dgx1"].sshd_pid]
    assert not (hosts["dgx1"].root / "state" / "lanes" / "withghost").exists()


def test_bad_shape_refused_before_any_ssh(fleet):
    inv, hosts, _ = fleet
    # the lane includes the unreachable host: a ShapeError (not HostUnreachable) proves no ssh happened
    with pytest.raises(ShapeError, match="tp=3 is not divisible by nnodes=2"):
        lanes.launch(inv, "badshape", allow_nas_weights=True)
    res = CliRunner().invoke(cli, ["--root", str(inv.root), "launch", "badshape"])
    assert res.exit_code == 2 and "tp=3 is not divisible" in res.output
    assert not (hosts["dgx1"].root / "state" / "lanes" / "badshape").exists()


def test_doctor_lines(fleet):
    inv, hosts, _ = fleet
    res = CliRunner().invoke(cli, ["--root", str(inv.root), "doctor", "tp4", "--json"])
    report = json.loads(res.output)
    by = {(c["host"], c["name"]): c for c in report["checks"]}
    assert by[("dgx1", "ssh")]["ok"] is True
    assert by[("dgx4", "staged+verified")]["ok"] is False  # nothing staged on dgx4 yet
    assert by[("dgx2", "env")]["ok"] is True and "NODE_RANK=1" in by[("dgx2", "env")]["detail"]
    assert by[("dgx1", "GPU")]["ok"] is None and by[("dgx1", "fabric")]["ok"] is None
    assert res.exit_code == 1 and not report["ok"]
    text = CliRunner().invoke(cli, ["--root", str(inv.root), "doctor", "ghost"]).output
    assert text.startswith("✗ ghost") and "ssh" in text


def test_real_ssh_keeps_every_argument_intact(fleet):
    inv, _, _ = fleet
    from sparkfleet.remote.hosts import SshHost, connect

    runner = connect(inv.host("dgx2"))
    assert isinstance(runner, SshHost)
    res = runner.run(["printf", "%s|", "a b", "$(id)", "it's", "x;echo pwned"])
    assert res.ok and res.stdout == "a b|$(id)|it's|x;echo pwned|"
    assert runner.run(["hostname"]).stdout.strip() == "dgx2"


def test_worker_exit_during_boot_names_rank_and_stops_the_lane(fleet):
    inv, hosts, _ = fleet
    report = lanes.launch(inv, "workerdies", allow_nas_weights=True)
    r = report.ready
    assert not r.ok and r.failed is not None
    assert (r.failed.host, r.failed.rank, r.failed.returncode) == ("dgx3", 2, 1)
    assert r.reason.startswith("rank 2 on dgx3 exited with code 1 (last boot stage:")
    assert any("listening on" in line for line in r.tail)  # dgx3's own log tail, fetched over ssh
    assert report.stopped_after_failure
    for name, h in hosts.items():
        assert netns_pids(h.netns) == [h.sshd_pid], f"{name} still runs something"
