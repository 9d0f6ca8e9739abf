"""Issue 13 on real hosts: dgx1..dgx3 are network namespaces with sshd; ranks are demo OpenAI servers.

Memory is read on each node from a file the test controls ($SPARKFLEET_MEMINFO in the node's
sparkfleet command, {host} = the node's hostname), so admission and the watchdog see numbers we
choose while everything else is real: ssh, the agent, the runtime, the canary's torch gloo
collectives over the namespace network, the supervisor's HTTP probes and the relaunches.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.lanefleet import MODELS, REMOTE, netns_fields, use_ssh, write_fleet

try:
    from support.fleetnet import netns_pids
except ImportError:  # tests/ imported as a package
    from tests.support.fleetnet import netns_pids

from sparkfleet.base.errors import ExitCode
from sparkfleet.base.procs import group_members
from sparkfleet.cli import main as cli
from sparkfleet.demo.hubfixture import build_nas_hub
from sparkfleet.fleet import inventory
from sparkfleet.launch import generations
from sparkfleet.launch import lane as lanes
from sparkfleet.launch.preflight import GateRefused, lane_fingerprints
from sparkfleet.node import records
from sparkfleet.ops.supervisor import watch_lane, watch_settings

# One worker runs this module (make test's xdist): its module-scoped fixture is built once.
pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.xdist_group("gates_fleet")]
PORT = 30000
GIB_KB = 1024 * 1024
SECRET = "hf_watch_never_print_me"

# The "engine": writes a JIT cache file into $TORCHINDUCTOR_CACHE_DIR and boots faster when the
# cache is warm, as a real one does.
_ENGINE = (
    "import os, sys, pathlib; c = pathlib.Path(os.environ['TORCHINDUCTOR_CACHE_DIR']); "
    "c.mkdir(parents=True, exist_ok=True); warm = any(c.iterdir()); "
    "delay = '1.0' if warm else '2.5'; "
    "(c / 'kernel.so').write_text('jit'); "
    "os.execv(sys.executable, [sys.executable, '-m', 'sparkfleet.demo.openai_server', "
    "'--boot-delay', delay, *sys.argv[1:]])"
)


def recipe(hosts: list[str], extra_args: tuple[str, ...] = (), canary: str = "enabled = false",
           memory: str = "", watch: str = "") -> str:  # fmt: skip
    args = "".join(", " + json.dumps(a) for a in extra_args)
    return (
        f"""
[lane]
hosts = {json.dumps(hosts)}

[world]
tp = {len(hosts)}

[launch]
runtime = "process"
port = {PORT}
dist_port = 20000
fabric = "none"
served_model_name = "deepseek-v4.1-flash"
command = [{json.dumps(sys.executable)}, "-c", {json.dumps(_ENGINE)},
           "--host", "0.0.0.0", "--port", "{{port}}",
           "--served-model-name", "{{served_model_name}}"{args} ]
ready_signatures = ["The server is fired up and ready to roll!"]

[launch.env]
HF_TOKEN = "{SECRET}"

[launch.timeouts]
ready_s = 60
poll_s = 0.2
stop_s = 5

[launch.memory]
{memory}

[launch.canary]
{canary}
timeout_s = 40
size_mib = 1

[smoke]
max_tokens = 16
[[smoke.cases]]
prompt = "What is 127*89? Answer with the number only."
expect = "11303"

[watch]
{watch}
"""
        + MODELS
    )


def set_mem(memdir: Path, host: str, avail_gib: float, total_gib: float = 119.6) -> None:
    p = memdir / f"{host}.meminfo"
    tmp = p.with_suffix(".tmp")
    tmp.write_text(
        f"MemTotal: {int(total_gib * GIB_KB)} kB\nMemFree: 1000 kB\n"
        f"MemAvailable: {int(avail_gib * GIB_KB)} kB\n"
        "SwapTotal: 0 kB\nSwapFree: 0 kB\n"
    )
    tmp.replace(p)  # the watchdog never reads a half-written file


@pytest.fixture(scope="module")
def gates(fleetnet, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gates")
    hosts = {}
    try:
        for name in ("dgx1", "dgx2", "dgx3"):
            hosts[name] = fleetnet.add_host(name)
        with pytest.MonkeyPatch.context() as mp:
            yield from _fleet(fleetnet, hosts, tmp, mp)
    finally:
        for h in hosts.values():
            fleetnet.remove_host(h)


def _fleet(fleetnet, hosts, tmp, mp):
    nas = build_nas_hub(fleetnet.unique_dir("nas") / "hub", shard_bytes=16 * 1024)
    memdir = tmp / "mem"
    memdir.mkdir()
    for name in hosts:
        set_mem(memdir, name, 100)
    use_ssh(mp, tmp / "ssh_config", remote=f"env SPARKFLEET_MEMINFO={memdir}/{{host}}.meminfo {REMOTE}")
    fields = {name: netns_fields(h, nas.root) for name, h in hosts.items()}
    two = ["dgx1", "dgx2"]
    lanes_ = {
        "fit": recipe(two, memory="weights_gib_per_rank = 47.2\nkv_budget_gib = 30\nwatchdog_interval_s = 0.3"),  # noqa: E501
        "canary3": recipe(list(hosts), canary="enabled = true\nmin_busbw_gbps = 0.001"),
        "wedge": recipe(two, ("--hang-generation-after", "2"),
                        watch="interval_s = 1.5\nlatency_s = 1.0\nmax_restarts = 1\nbackoff_s = 0.2"),
        "gen": recipe(two),
        "pair": recipe(two, memory="watchdog_interval_s = 0.3") + '[watchdog]\nscope = "lane"\n',
    }  # fmt: skip
    root = write_fleet(tmp / "fleet", fields, lanes_)
    inv = inventory.load(root)
    try:
        yield inv, hosts, memdir
    finally:
        for name in lanes_:
            lanes.stop(inv, name, 5)
        for name in hosts:
            set_mem(memdir, name, 100)


def nothing_runs(hosts, wait: float = 5.0) -> bool:
    """Only sshd left in every namespace (a stopped watchdog gets a moment to exit)."""
    deadline = time.monotonic() + wait
    while True:
        if all(netns_pids(h.netns) == [h.sshd_pid] for h in hosts.values()):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def test_lane_that_cannot_fit_is_refused_before_anything_starts(gates):
    inv, hosts, memdir = gates
    set_mem(memdir, "dgx2", 60)
    try:
        with pytest.raises(GateRefused) as exc:
            lanes.launch(inv, "fit", allow_nas_weights=True)
        assert exc.value.exit_code == ExitCode.REFUSED
        assert ("dgx2: needs 77.2 GiB (weights 47.2 GiB + KV 30.0 GiB) + floor 0.5 GiB, but MemAvailable is "
                "60.0 GiB of 119.6 GiB") in exc.value.message  # fmt: skip
        assert "dgx1" not in exc.value.message.split("memory; nothing was started:")[1]
        assert nothing_runs(hosts)
        assert not (hosts["dgx1"].root / "state" / "lanes" / "fit").exists()
        res = CliRunner().invoke(cli, ["--root", str(inv.root), "launch", "fit", "--allow-nas-weights"])
        assert res.exit_code == ExitCode.REFUSED and "MemAvailable is 60.0 GiB" in res.output
    finally:
        set_mem(memdir, "dgx2", 100)


def test_watchdog_stops_the_lane_under_the_floor_and_says_why(gates):
    inv, hosts, memdir = gates
    report = lanes.launch(inv, "fit", allow_nas_weights=True)
    try:
        assert report.ready.ok, report.ready.reason
        assert report.notes == []  # scope = "rank" (the default): each node's watchdog is enough
        assert lanes.status(inv, "fit").running == 2
        set_mem(memdir, "dgx2", 0.4)  # 410 MiB: under coolbho3k's 512 MiB floor
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and lanes.status(inv, "fit").running == 2:
            time.sleep(0.3)
        st = lanes.status(inv, "fit")
        by_host = {r.host: r.running for r in st.ranks}
        assert by_host == {"dgx1": True, "dgx2": False}  # only the starving host's rank was stopped
        (err,) = [e["error"] for e in st.errors if e["host"] == "dgx2"]
        assert err.startswith("memory watchdog: MemAvailable 0.4 GiB fell under the floor 0.5 GiB")
        memstop = json.loads((hosts["dgx2"].root / "state" / "lanes" / "fit" / "memstop.json").read_text())
        assert memstop["mem_available"] == int(0.4 * GIB_KB) * 1024 and memstop["floor"] == 512 * 1024**2
        assert memstop["stopped"][0]["stopped"] is True
        # the supervisor sees the missing rank and does not relaunch into the same memory pressure
        settings = watch_settings(inv.lane("fit").sections, interval_s=1.0, latency_s=1.0)
        out = watch_lane(inv, "fit", settings, max_probes=3)
        assert out.needs_human and out.restarts == 0 and out.probes == 1
        assert "1 of 2 ranks running (rank 1 on dgx2" in out.incidents[0].reason
        assert "dgx2: memory watchdog: MemAvailable 0.4 GiB" in out.message
        assert lanes.status(inv, "fit").running == 0
        summary = json.loads((Path(out.incidents[0].bundle) / "summary.json").read_text())
        assert summary["memstop"]["dgx2"]["floor"] == 512 * 1024**2
    finally:
        set_mem(memdir, "dgx2", 100)
        lanes.stop(inv, "fit", 5)
    assert nothing_runs(hosts)  # stop also ends both nodes' watchdogs


def test_lane_scoped_watchdog_stops_every_node_and_is_not_restarted(gates):
    """[watchdog] scope = "lane" (the EXL3 kit's portable_pair.py watch(): either node under 512 MiB,
    or either container gone, stops BOTH and never restarts them): dgx2's own watchdog stops its
    rank and records why; `sparkfleet status` then stops dgx1's rank, naming that reason; and
    `sparkfleet watch` stops a lane whose rank died instead of relaunching it."""
    inv, hosts, memdir = gates
    report = lanes.launch(inv, "pair", allow_nas_weights=True)
    try:
        assert report.ready.ok, report.ready.reason
        # a launch by hand has no controller beside it (the kit's launcher always runs one): it says so
        assert report.notes == [
            "watchdog scope = lane: run `sparkfleet watch pair` beside this lane (a deployed lane's "
            "watch unit does); it is what stops every rank when one stops"
        ]
        set_mem(memdir, "dgx2", 0.4)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and lanes.status(inv, "pair").running == 2:
            time.sleep(0.3)
        assert {r.host: r.running for r in lanes.status(inv, "pair").ranks} == {"dgx1": True, "dgx2": False}
        res = CliRunner().invoke(cli, ["--root", str(inv.root), "status", "pair"])
        assert res.exit_code == ExitCode.SHORTFALL, res.output
        assert (
            "watchdog scope = lane: stopped sparkfleet-pair-r0 on dgx1 because dgx2's memory watchdog: "
            "MemAvailable 0.4 GiB fell under the floor 0.5 GiB"
        ) in res.output
        assert lanes.status(inv, "pair").running == 0 and nothing_runs(hosts)
        assert "because dgx2's memory watchdog" in generations.load_all(inv.root, "pair")[-1]["stopped_why"]

        set_mem(memdir, "dgx2", 100)  # a rank that dies (the kit: a container not running) stops both
        report = lanes.launch(inv, "pair", allow_nas_weights=True)
        assert report.ready.ok, report.ready.reason
        (rec,) = records.load_all(hosts["dgx2"].root / "state", "pair")
        os.killpg(rec.pgid or rec.pid, signal.SIGKILL)  # the rank this test started, by its recorded group
        settings = watch_settings(inv.lane("pair").sections, interval_s=1.0, latency_s=1.0, max_restarts=3)
        out = watch_lane(inv, "pair", settings, max_probes=5)
        assert out.needs_human and out.restarts == 0, out.message
        assert "watchdog scope = lane: stopped sparkfleet-pair-r0 on dgx1 because rank 1 on dgx2 is down" in (
            out.message
        )
        assert lanes.status(inv, "pair").running == 0
    finally:
        set_mem(memdir, "dgx2", 100)
        lanes.stop(inv, "pair", 5)
    assert nothing_runs(hosts)


def test_fabric_canary_passes_then_names_the_broken_pair(gates):
    inv, hosts, _ = gates
    report = lanes.launch(inv, "canary3", allow_nas_weights=True)
    try:
        rep = report.preflight.canary
        assert report.ready.ok and rep.ok and rep.backend == "gloo" and len(rep.ranks) == 3
        assert all(r["stage"] == "done" and r["ifname"] == "eth0" for r in rep.ranks)
        assert all(len(r["pairs"]) == 6 and all(p["ok"] for p in r["pairs"]) for r in rep.ranks)
        assert rep.busbw_gbps > 0.001  # the recipe's floor; a floor not met is test_supervisor's
        recorded = report.generation["canary"]
        assert recorded["ok"] and recorded["busbw_gbps"] == rep.busbw_gbps
        # what it measured is kept on each node for the roofline's fabric term
        from sparkfleet.roofline.machine import load_measurements

        for name in ("dgx1", "dgx2", "dgx3"):
            measured = load_measurements(hosts[name].root / "state")
            assert measured["fabric_link"].value > 0 and "canary" in measured["fabric_link"].method
            assert 0 < measured["fabric_latency"].value < 5.0
    finally:
        lanes.stop(inv, "canary3", 5)
    assert nothing_runs(hosts)  # the canary left nothing behind
    block = ["ip", "-n", hosts["dgx2"].netns, "route", "add", "blackhole", f"{hosts['dgx3'].addr}/32"]
    subprocess.run(block, check=True)
    try:
        with pytest.raises(GateRefused) as exc:
            lanes.launch(inv, "canary3", allow_nas_weights=True)
        msg = exc.value.message
        a2, a3 = hosts["dgx2"].addr, hosts["dgx3"].addr
        assert f"rank 1 (dgx2, {a2} on eth0) cannot reach rank 2 (dgx3, {a3} on eth0) port" in msg
        assert "rank 0 (dgx1" not in msg  # the healthy pairs are not named
        assert nothing_runs(hosts)
    finally:
        subprocess.run(
            ["ip", "-n", hosts["dgx2"].netns, "route", "del", "blackhole", f"{hosts['dgx3'].addr}/32"]
        )


def test_drift_refused_unless_allowed(gates, tmp_path):
    inv, hosts, _ = gates
    kernel = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
    fleet = (inv.root / "hosts" / "fleet.toml").read_text()
    fleet += f'\n[defaults.stack]\nkernel = "{kernel}"\n\n[hosts.dgx2.stack]\nkernel = "7.0.0-1019-nvidia"\n'
    root = tmp_path / "drift"
    (root / "hosts").mkdir(parents=True)
    (root / "hosts" / "fleet.toml").write_text(fleet)
    (root / "recipes" / "fit").mkdir(parents=True)
    (root / "recipes" / "fit" / "recipe.toml").write_text((inv.root / "recipes/fit/recipe.toml").read_text())
    drifted = inventory.load(root)
    assert drifted.host("dgx1").stack == {"kernel": kernel}
    with pytest.raises(GateRefused) as exc:
        lanes.launch(drifted, "fit", allow_nas_weights=True)
    assert f"dgx2: kernel is {kernel}, declared 7.0.0-1019-nvidia" in exc.value.message
    assert "dgx1:" not in exc.value.message and nothing_runs(hosts)
    res = CliRunner().invoke(cli, ["--root", str(root), "doctor", "fit", "--json"])
    checks = {(c["host"], c["name"]): c for c in json.loads(res.stdout)["checks"]}
    assert (
        checks[("dgx2", "host stack")]["ok"] is False
        and "7.0.0-1019" in checks[("dgx2", "host stack")]["detail"]
    )
    assert checks[("dgx1", "host stack")]["ok"] is True
    mem = checks[("dgx1", "memory")]
    assert mem["ok"] is True and "MemAvailable 100.0 GiB" in mem["detail"]
    assert lane_fingerprints(drifted, "fit")["dgx2"]["kernel"] == kernel  # what a bench report carries
    report = lanes.launch(drifted, "fit", allow_drift=True, allow_nas_weights=True)
    try:
        assert report.ready.ok
        gen = report.generation
        assert gen["drift"] == [f"dgx2: kernel is {kernel}, declared 7.0.0-1019-nvidia"]
        assert gen["fingerprints"]["dgx2"]["kernel"] == kernel
    finally:
        lanes.stop(drifted, "fit", 5)


def test_wedged_engine_detected_bundled_restarted_then_handed_to_a_human(gates):
    inv, hosts, _ = gates
    assert lanes.launch(inv, "wedge", allow_nas_weights=True).ready.ok
    settings = watch_settings(inv.lane("wedge").sections)
    events: list[str] = []
    try:
        out = watch_lane(inv, "wedge", settings, max_probes=20, on_event=events.append)
    finally:
        lanes.stop(inv, "wedge", 5)
    # 2 good probes, a hang -> bundle + restart; 2 good, a hang -> bundle; budget (1 restart) spent
    assert out.needs_human and out.restarts == 1 and len(out.incidents) == 2, events
    assert out.probes == 6
    assert all(d <= 2 * settings.interval_s for d in out.detect_s) and len(out.detect_s) == 2
    assert nothing_runs(hosts)  # stopped, not left wedged
    bundle = Path(out.incidents[0].bundle)
    assert bundle.parent == inv.root / "recipes" / "wedge" / "incidents"
    summary = json.loads((bundle / "summary.json").read_text())
    assert summary["reason"].startswith("generation probe failed: no answer within the latency bound")
    assert summary["hosts"] == ["dgx1", "dgx2"]
    for host, rank in (("dgx1", 0), ("dgx2", 1)):
        meta = json.loads((bundle / f"{host}.rank{rank}.json").read_text())
        assert meta["running"] is True and meta["boot_stage"] == "The server is fired up and ready to roll!"
        assert meta["env"]["HF_TOKEN"] == "<redacted>" and meta["env"]["NODE_RANK"] == str(rank)
        assert meta["record"]["name"] == f"sparkfleet-wedge-r{rank}"
        assert "listening on" in (bundle / f"{host}.rank{rank}.log").read_text()
        assert (bundle / f"{host}.dmesg.txt").exists() and (bundle / f"{host}.nvidia-smi-q.txt").exists()
    assert "MemAvailable" in (bundle / "dgx1.meminfo.txt").read_text()
    for f in bundle.parent.rglob("*"):
        if f.is_file():
            assert SECRET not in f.read_text(errors="replace"), f


def test_generations_boot_cache_promote_rollback_history(gates):
    inv, hosts, _ = gates
    runner = CliRunner()
    root = ["--root", str(inv.root)]
    first = lanes.launch(inv, "gen", allow_nas_weights=True)
    try:
        assert first.ready.ok
        g1 = first.generation
        assert g1["boot"]["cache"] == "cold" and g1["status"] == "ready"
        assert g1["canary"] is None and g1["fingerprints"]["dgx1"]["kernel"]
        assert set(g1["pins"]) == {"weights", "drafter"}
        cache = Path(hosts["dgx1"].root / "state" / "bootcache" / "gen" / g1["boot"]["cache_key"])
        assert (cache / "torchinductor" / "kernel.so").exists()  # node-local, keyed
        assert g1["boot"]["cache_key"].endswith("-main-tp2ep1pad0n2")
        # promote: smoke passes but no bench report yet -> refused; after a quick bench (no baseline), --first
        res = runner.invoke(cli, [*root, "promote", "gen"])
        assert res.exit_code == 1 and "no bench report since this generation came up" in res.output
        res = runner.invoke(cli, [*root, "bench", "gen", "--quick", "--concurrency", "1"])
        assert res.exit_code == 0, res.output
        res = runner.invoke(cli, [*root, "promote", "gen", "--first"])
        assert res.exit_code == 0 and "promoted" in res.output, res.output
    finally:
        lanes.stop(inv, "gen", 5)

    # a new generation: a recipe change (a different decode rate), warm boot this time
    recipe_path = inv.root / "recipes" / "gen" / "recipe.toml"
    good_text = recipe_path.read_text()
    recipe_path.write_text(
        good_text.replace('"{served_model_name}" ]', '"{served_model_name}", "--decode-tps", "77" ]')
    )
    inv2 = inventory.load(inv.root)
    second = lanes.launch(inv2, "gen", allow_nas_weights=True)
    try:
        assert second.ready.ok
        g2 = second.generation
        assert g2["boot"]["cache"] == "warm" and g2["recipe_sha256"] != g1["recipe_sha256"]
        assert g2["boot"]["time_to_ready_s"] > 0  # how long is measured, not asserted (a loaded box)
        # rollback: stops generation 2 and relaunches generation 1's recipe on every host
        res = runner.invoke(cli, [*root, "rollback", "gen", "--json"])
        assert res.exit_code == 0, res.output
        rb = json.loads(res.stdout)
        assert rb["rolled_back_to"] == g1["id"] and rb["ok"]
        st = lanes.status(inv2, "gen")
        assert st.running == 2
        for r in st.ranks:
            server = max(group_members(r.pid))
            assert b"77" not in Path(f"/proc/{server}/cmdline").read_bytes().split(b"\0")
    finally:
        lanes.stop(inv2, "gen", 5)
        recipe_path.write_text(good_text)
    gens = generations.load_all(inv.root, "gen")
    assert [g["rolled_back_to"] for g in gens] == [None, None, g1["id"]]
    assert [g["rolled_back_from"] for g in gens] == [None, None, g2["id"]]  # the generation it replaced
    assert [bool(g["stopped_at"]) for g in gens] == [True, True, True]  # each ended by stop
    assert gens[-1]["good"] and gens[-1]["recipe_sha256"] == g1["recipe_sha256"]
    res = runner.invoke(cli, [*root, "history", "gen", "--json"])
    rows = json.loads(res.output)["generations"]
    assert [r["id"] for r in rows] == [g["id"] for g in reversed(generations.load_all(inv.root, "gen"))]
    assert any(r["reports"] for r in rows if r["id"] == g1["id"])  # the quick bench belongs to gen 1
    text = runner.invoke(cli, [*root, "history", "gen"]).output
    assert "good" in text and f"rolled back from {g2['id']} to {g1['id']}" in text and " warm boot " in text
    assert " ready " not in text and "stopped" in text  # no generation of a stopped lane reads ready
    assert nothing_runs(hosts)
