"""The real gateway (smg, PyPI) in front of 2 and 4 launched demo lanes that are replicas of one model.

Each lane runs on its own network-namespace host (dgx1..dgx4, each with its own sshd), launched by
sparkfleet over ssh (process runtime) with the gateway's key as its own; `gateway up` reads them
from the inventory and the gateway reaches them over the bridge. Asserted through smg's own
`x-smg-routed-worker-id` header: requests spread as the policy says (round_robin: evenly;
cache_aware: one shared prefix sticks to one replica), a replica killed mid-run is taken out and
its requests retried (all succeed), and a missing or wrong key is refused by the gateway.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import smg  # noqa: F401 - the gateway binary: the test extra installs it (pyproject)
from click.testing import CliRunner

from sparkfleet.base.procs import group_members
from sparkfleet.cli import main as cli
from sparkfleet.demo.hubfixture import build_nas_hub
from sparkfleet.facts import apikeys
from sparkfleet.fleet import inventory
from sparkfleet.lane.replicas import replica_inventory
from sparkfleet.launch import lane as lanes
from sparkfleet.remote.nodecall import call_agent
from sparkfleet.serving import gateway
from support.lanefleet import demo_recipe, free_port, netns_fields, use_ssh, write_fleet

# One worker runs this module (make test's xdist): its module-scoped fixture is built once.
pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.xdist_group("gateway")]
MODEL = "deepseek-v4.1-flash"


def gateway_recipe(host: str, port: int, policy: str | None) -> str:
    extra = ', "--api-key-env", "SPARKFLEET_API_KEY", "--decode-tps", "4000"'
    text = demo_recipe([host], port, extra, bind="0.0.0.0")
    return text + (f'\n[gateway]\npolicy = "{policy}"\n' if policy else "\n[gateway]\n")


@pytest.fixture(scope="module")
def ns_hosts(fleetnet, tmp_path_factory):
    """dgx1..dgx4: network namespaces with their own sshd, for the whole module; torn down on failure.
    Each lane serves on port 30000 of its own host; the gateway reaches them over the bridge."""
    tmp = tmp_path_factory.mktemp("gw-hosts")
    hosts = {}
    try:
        for i in range(1, 5):
            hosts[f"dgx{i}"] = fleetnet.add_host(f"dgx{i}")
        nas = build_nas_hub(tmp / "nas" / "hub", shard_bytes=16 * 1024)
        with pytest.MonkeyPatch.context() as mp:
            use_ssh(mp, tmp / "ssh_config")
            yield hosts, nas.root
    finally:
        for h in hosts.values():
            fleetnet.remove_host(h)


def make_fleet(tmp_path: Path, n: int, policy: str | None, ns=None) -> inventory.Inventory:
    """n lanes r1..rn, replicas of one model, one per host: netns hosts (`ns`) or this machine."""
    if ns is not None:
        hosts_ns, nas = ns
        hosts = {f"dgx{i}": netns_fields(hosts_ns[f"dgx{i}"], nas) for i in range(1, n + 1)}
        lanes_ = {f"r{i}": gateway_recipe(f"dgx{i}", 30000, policy) for i in range(1, n + 1)}
        return inventory.load(write_fleet(tmp_path / "fleet", hosts, lanes_))
    hosts = {
        f"dgx{i}": {
            "address": "127.0.0.1",
            "ssh_user": "root",
            "local_hub": str(tmp_path / f"dgx{i}" / "nvme" / "hub"),
            "nas_hub": str(tmp_path / "nas"),
            "state_dir": str(tmp_path / f"dgx{i}" / "state"),
        }
        for i in range(1, n + 1)
    }
    lanes_ = {f"r{i}": gateway_recipe(f"dgx{i}", 30000 + i, policy) for i in range(1, n + 1)}
    return inventory.load(write_fleet(tmp_path / "fleet", hosts, lanes_))


def chat(url: str, key: str | None, prompt: str = "What is 19+23?") -> tuple[int, str | None]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 4}
    req = urllib.request.Request(
        f"{url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()
            return resp.status, resp.headers.get(gateway.ROUTED_HEADER)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get(gateway.ROUTED_HEADER)


@pytest.fixture
def served(tmp_path, ns_hosts):
    """launch(n, policy) -> (inv, url, key) on netns hosts; every lane and the gateway stopped after."""
    state = tmp_path / "gw"
    made: list[inventory.Inventory] = []

    def launch(n: int, policy: str | None = None):
        inv = make_fleet(tmp_path, n, policy, ns_hosts)
        made.append(inv)
        gateway.share_key(inv, state, call_agent)  # before launch: the lanes start with it
        with ThreadPoolExecutor(n) as pool:
            names = [f"r{i}" for i in range(1, n + 1)]
            reports = list(pool.map(lambda name: lanes.launch(inv, name, allow_nas_weights=True), names))
        assert all(r.ready.ok for r in reports), [r.ready for r in reports]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        st = gateway.up(inv, state, call_agent, bind="127.0.0.1", port=port, metrics_port=free_port())
        assert st["running"] and st["models"] == [MODEL], st
        assert set(st["lanes"].values()) == {"serving"}
        return inv, st["url"], gateway.gateway_key(state)

    yield launch, state
    gateway.down(state)
    for inv in made:
        for name in inv.lanes:
            lanes.stop(inv, name, 5)


def test_two_replicas_round_robin_a_killed_one_is_retried_and_a_wrong_key_refused(served):
    launch, state = served
    inv, url, key = launch(2)
    assert chat(url, None)[0] == 401 and chat(url, key + "x")[0] == 401  # refused by the gateway
    lane_key = apikeys.read_key(Path(inv.host("dgx1").state_dir), "r1")
    assert lane_key == key  # the lanes take only the gateway's key
    assert key not in Path(f"/proc/{gateway.load_record(state).pid}/cmdline").read_text()

    seen = Counter(chat(url, key)[1] for _ in range(20))
    urls = {w.url for w in gateway.plan(inv).workers}
    assert set(seen) == urls and sorted(seen.values()) == [10, 10], seen  # round_robin: even

    # bench through the gateway: its key, and the report names the policy and each request's replica
    out = Path(inv.root) / "gw-reports"
    env = {"SPARKFLEET_GATEWAY_STATE": str(state), "SPARKFLEET_API_KEY": ""}
    argv = ["bench", "--gateway", "--quick", "--no-quality", "--out", str(out), "--concurrency", "2",
            "--requests", "4", "--json"]  # fmt: skip
    res = CliRunner(env=env).invoke(cli, argv)
    assert res.exit_code in (0, 1), res.output
    assert key not in res.output
    report = json.loads(next(out.rglob("*.json")).read_text())
    assert report["gateway"]["policy"] == "round_robin"
    assert {w["lane"] for w in report["gateway"]["workers"]} == {"r1", "r2"}
    level = report["sweep"][0]
    assert len(level["served_by"]) == 4 and set(level["served_by"]) == urls, level["served_by"]
    assert not any(key in p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())

    # kill replica r2's server mid-run: every request still answers 200, from r1 once r2 is out
    victim = max(group_members(lanes.status(inv, "r2").ranks[0].pid))
    r1 = next(w.url for w in gateway.plan(inv).workers if w.lane == "r1")

    def one(i: int) -> tuple[int, str | None]:
        if i == 10:
            os.kill(victim, signal.SIGKILL)
        return chat(url, key)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(40)))
    assert all(code == 200 for code, _ in results), Counter(code for code, _ in results)
    time.sleep(3)  # two failed 1 s health checks: out
    assert {chat(url, key)[1] for _ in range(8)} == {r1}
    st = gateway.status(state)
    assert st["running"] and st["policy"] == "round_robin"
    assert gateway.down(state) and not gateway.status(state)["running"]


def test_four_replicas_spread_round_robin_while_cache_aware_sticks_a_shared_prefix(served, ns_hosts):
    ns = ns_hosts
    launch, state = served
    inv, url, key = launch(4)
    seen = Counter(chat(url, key)[1] for _ in range(20))
    assert len(seen) == 4 and set(seen.values()) == {5}, seen
    gateway.down(state)

    inv = make_fleet(Path(inv.root).parent, 4, "cache_aware", ns)  # same lanes, the policy changed
    st = gateway.up(
        inv, state, call_agent, bind="127.0.0.1", port=free_port(), metrics_port=free_port()
    )
    assert st["policy"] == "cache_aware"
    prefix = "You are a careful assistant. " * 40
    sticky = Counter(chat(st["url"], key, prefix + f"Question {i}?")[1] for i in range(12))
    assert len(sticky) == 1 and sum(sticky.values()) == 12, sticky  # MiaAI tp8.md: one replica


def test_plan_refuses_replicas_sharing_a_host_and_disagreeing_policies(tmp_path):
    inv = make_fleet(tmp_path, 2, None)
    assert gateway.plan(inv).policy == "round_robin"
    text = (Path(inv.root) / "recipes" / "r2" / "recipe.toml").read_text()
    (Path(inv.root) / "recipes" / "r2" / "recipe.toml").write_text(
        text.replace("hosts = ['dgx2']", "hosts = ['dgx1']")
    )
    with pytest.raises(Exception, match="share host dgx1"):
        gateway.plan(inventory.load(inv.root))
    (Path(inv.root) / "recipes" / "r2" / "recipe.toml").write_text(text + 'policy = "cache_aware"\n')
    with pytest.raises(Exception, match="different policies"):
        gateway.plan(inventory.load(inv.root))
    assert sys.executable  # the demo lanes run on this interpreter


def test_per_user_keys_at_the_front_smg_tenant_keys_reach_the_lane_and_are_refused(served, tmp_path):
    """Per-user keys: what smg does with its own tenant keys, and what sparkfleet does instead."""
    launch, state = served
    inv, url, key = launch(1)
    p = gateway.plan(inv)
    lane_key = apikeys.read_key(Path(inv.host("dgx1").state_dir), "r1")
    assert lane_key == key

    # measured: smg's own --tenant-api-key passes smg, and smg hands the tenant's key to the lane,
    # which refuses it (the 401 comes from the worker: smg names the worker it routed to)
    tenant = apikeys.new_key()
    port = free_port()
    admin = gateway.admin_key(state)
    argv = [*gateway.router_argv(p, key, admin, "127.0.0.1", port, free_port()),
            "--tenant-api-key", f"t1:{tenant}"]  # fmt: skip
    config = tmp_path / "plain-smg.json"
    config.write_text(json.dumps({"argv": argv}))
    config.chmod(0o600)
    plain = subprocess.Popen([sys.executable, "-m", "sparkfleet.serving.gateway_main", str(config)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 30
        while gateway.served_models(base.removesuffix("/v1"), key) != [MODEL]:
            assert time.monotonic() < deadline and plain.poll() is None
            time.sleep(0.3)
        code, routed = chat(base, tenant)
        assert code == 401 and routed == p.workers[0].url, (code, routed)  # the lane said no
        assert chat(base, "sk-sf-" + "x" * 40) == (401, None)  # smg itself refuses an unknown key
    finally:
        plain.terminate()
        plain.wait(15)

    # sparkfleet: the user's key is checked by the front, which calls smg with the gateway's key
    env = {"SPARKFLEET_GATEWAY_STATE": str(state)}
    res = CliRunner(env=env).invoke(cli, ["keys", "add", "alice", "--json"])
    assert res.exit_code == 0, res.output
    alice = json.loads(res.stdout)["key"]
    assert json.loads(res.stdout)["gateway_reloaded"] is True
    assert (state / "users" / "alice.key").stat().st_mode & 0o777 == 0o600
    assert CliRunner(env=env).invoke(cli, ["keys", "add", "alice"]).exit_code != 0  # one key per user
    code, routed = chat(url, alice)
    assert code == 200 and routed == p.workers[0].url
    assert apikeys.read_key(Path(inv.host("dgx1").state_dir), "r1") == key  # the lane: the gateway's only
    assert chat(url, alice + "x") == (401, None) and chat(url, None) == (401, None)  # refused at the front
    assert chat(url, tenant) == (401, None)
    listed = CliRunner(env=env).invoke(cli, ["keys", "list"])
    assert listed.exit_code == 0 and "alice" in listed.output and alice not in listed.output

    # no key in any argv of the gateway's processes; the access log names the user, never a key
    gw = gateway.load_record(state).pid
    kids = [int(d) for d in os.listdir("/proc") if d.isdigit() and _ppid(int(d)) == gw]
    assert kids, "the front (nginx) runs as the gateway's child"
    for pid in [gw, *kids]:
        cmdline = Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
        assert key not in cmdline and alice not in cmdline
    log = (state / "front" / "access.log").read_text()
    assert " alice " in log and alice not in log and key not in log

    res = CliRunner(env=env).invoke(cli, ["keys", "revoke", "alice"])
    assert res.exit_code == 0 and "refuses it now" in res.output, res.output
    # at once, on every connection: revoke waited until no worker of the old key map accepts one
    # (otherwise the next request can land on an old nginx worker: 200)
    assert [chat(url, alice) for _ in range(20)] == [(401, None)] * 20
    assert chat(url, key)[0] == 200  # the operator's key (the gateway's) still works
    assert not (state / "users" / "alice.key").exists()


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _with_replicas(root: Path, lane: str, replicas: list[list[str]]) -> Path:
    recipe = root / "recipes" / lane / "recipe.toml"
    recipe.write_text(recipe.read_text() + f"replicas = {replicas!r}\n")  # inside the [gateway] table
    return root


def test_replicas_key_is_checked_by_the_inventory_and_read_by_the_gateway_plan(tmp_path):
    inv = make_fleet(tmp_path, 4, None)
    root = Path(inv.root)
    for lane in ("r2", "r3", "r4"):  # one lane, r1, with its copies on dgx2..dgx4
        (root / "recipes" / lane / "recipe.toml").unlink()
        (root / "recipes" / lane).rmdir()
    _with_replicas(root, "r1", [["dgx1"], ["dgx2"], ["dgx3"], ["dgx4"]])
    inv = inventory.load(root)
    p = gateway.plan(inv)
    assert [(w.name, w.hosts) for w in p.workers] == [
        ("r1", ("dgx1",)), ("r1#1", ("dgx2",)), ("r1#2", ("dgx3",)), ("r1#3", ("dgx4",))
    ]  # fmt: skip
    assert all(w.url == f"http://{inv.host(w.hosts[0]).address}:30001" for w in p.workers)  # each copy's head
    assert p.models() == {MODEL: ["r1", "r1#1", "r1#2", "r1#3"]}

    text = (root / "recipes" / "r1" / "recipe.toml").read_text()
    for bad, says in [
        (
            "[['dgx1'], ['dgx2'], ['dgx2']]",
            r"gateway.replicas\[2\]: shares host dgx2 with gateway.replicas\[1\]",
        ),
        ("[['dgx1'], ['dgx9']]", r"gateway.replicas\[1\]\[0\]: unknown host 'dgx9'"),
        ("[['dgx2'], ['dgx3']]", r"gateway.replicas\[0\]: \['dgx2'\] is not lane.hosts"),
        ("[['dgx1'], ['dgx2', 'dgx3']]", r"gateway.replicas\[1\]: 2 hosts where lane.hosts has 1"),
        ("[['dgx1']]", r"gateway.replicas"),  # schema: at least two copies
    ]:
        (root / "recipes" / "r1" / "recipe.toml").write_text(
            text.replace("replicas = [['dgx1'], ['dgx2'], ['dgx3'], ['dgx4']]", f"replicas = {bad}")
        )
        with pytest.raises(Exception, match=says):
            inventory.load(root)


def test_launch_replica_n_plans_its_own_host_set_and_records(tmp_path):
    """`launch r1 --replica N` plans replica N's hosts ([world] ranks by position); an undeclared N is
    refused naming the copies; its generations have their own folder; status/stop/watch take it too."""
    from sparkfleet.lane.replicas import generations_home, replica_inventory, replica_of
    from sparkfleet.launch.generations import generations_dir

    inv = make_fleet(tmp_path, 4, None)
    root = Path(inv.root)
    for lane in ("r2", "r3", "r4"):
        (root / "recipes" / lane / "recipe.toml").unlink()
        (root / "recipes" / lane).rmdir()
    _with_replicas(root, "r1", [["dgx1"], ["dgx2"], ["dgx3"], ["dgx4"]])
    fleet = root / "hosts" / "fleet.toml"  # the NAS one level down: the boot caches are then not on it
    fleet.write_text(fleet.read_text().replace(f'"{tmp_path / "nas"}"', f'"{tmp_path / "nas" / "hub"}"'))
    runner = CliRunner()
    for n in range(4):
        args = ["launch", "r1", "--replica", str(n), "--dry-run", "--json"]
        res = runner.invoke(cli, ["--root", str(root), *args])
        assert res.exit_code == 0, res.output
        assert [r["host"] for r in json.loads(res.output)["ranks"]] == [f"dgx{n + 1}"]
    res = runner.invoke(cli, ["--root", str(root), "launch", "r1", "--replica", "4", "--dry-run"])
    assert res.exit_code != 0 and "lane r1 has no replica 4" in res.output
    assert "0: dgx1, 1: dgx2, 2: dgx3, 3: dgx4" in res.output
    for verb in (["stop"], ["status"], ["watch"], ["image", "load"], ["keys", "rotate"]):  # one copy's verbs
        assert "--replica" in runner.invoke(cli, [*verb, "--help"]).output, verb

    inv = inventory.load(root)
    view = replica_inventory(inv, "r1", 2)
    assert view.lane("r1").hosts == ("dgx3",) and replica_of(view.lane("r1")) == 2
    assert inv.lane("r1").hosts == ("dgx1",)  # the inventory itself is unchanged
    assert generations_home(inv, "r1") == root
    assert generations_dir(generations_home(view, "r1"), "r1") == (
        root / "recipes" / "r1" / "replicas" / "2" / "recipes" / "r1" / "generations"
    )

    # a copy's key is rotated on that copy's hosts only (each copy's head holds the key it serves with)
    from sparkfleet.launch.lanekeys import rotate

    wrote: list[tuple[str, str]] = []

    def agent(runner, action, req, **_kw):
        wrote.append((runner.name, action))
        return {"changed": True}

    done = rotate(view, "r1", agent)
    assert wrote == [("dgx3", "api-key-write")] and done.changed == ("dgx3",)

    # two hosts a copy, explicit [world] ranks: they move with the hosts, by position
    recipe = root / "recipes" / "r1" / "recipe.toml"
    text = recipe.read_text().replace("hosts = ['dgx1']", "hosts = ['dgx1', 'dgx2']")
    text = text.replace("tp = 1\n", 'tp = 2\nranks = { dgx2 = 0, dgx1 = 1 }\n')
    two = "[['dgx1', 'dgx2'], ['dgx3', 'dgx4']]"
    recipe.write_text(text.replace("[['dgx1'], ['dgx2'], ['dgx3'], ['dgx4']]", two))
    view = replica_inventory(inventory.load(root), "r1", 1)
    assert view.lane("r1").sections.world.ranks == {"dgx4": 0, "dgx3": 1}


def test_replicas_of_one_recipe_behind_the_real_gateway(tmp_path, ns_hosts):
    """One recipe with `[gateway] replicas = [["dgx1"], ["dgx2"]]`: `launch r1` and `launch r1
    --replica 1` start each copy on its own hosts; smg spreads over both; status and stop name the
    copy they act on and leave the other serving; each copy keeps its own generations."""
    from sparkfleet.launch.generations import current

    inv = make_fleet(tmp_path / "a", 2, None, ns_hosts)  # hosts dgx1, dgx2; lane r1 only
    (Path(inv.root) / "recipes" / "r2" / "recipe.toml").unlink()
    (Path(inv.root) / "recipes" / "r2").rmdir()
    root = _with_replicas(Path(inv.root), "r1", [["dgx1"], ["dgx2"]])
    inv = inventory.load(root)
    state = tmp_path / "gw"
    done = gateway.share_key(inv, state, lanes.call_agent)
    assert set(done.changed) == {"r1", "r1#1"} and not done.failed  # the key went to both replicas' hosts
    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(cli, ["--root", str(root), *args])

    try:
        for n in (0, 1):  # one after the other: CliRunner swaps sys.stdout, one invoke at a time
            res = run("launch", "r1", "--replica", str(n), "--allow-nas-weights", "--json")
            assert res.exit_code == 0, res.output
            out = json.loads(res.output[res.output.index("{"):])
            assert [r["host"] for r in out["started"]] == [f"dgx{n + 1}"] and out["ready"]["ok"], out
        gen0 = current(root, "r1")
        gen1 = current(root / "recipes" / "r1" / "replicas" / "1", "r1")
        assert gen0["hosts"] == ["dgx1"] and gen1["hosts"] == ["dgx2"]  # each copy's own history
        st = gateway.up(
            inv, state, lanes.call_agent, bind="127.0.0.1", port=free_port(), metrics_port=free_port()
        )
        assert st["lanes"] == {"r1": "serving", "r1#1": "serving"}, st["lanes"]
        key = gateway.gateway_key(state)
        # up returned once smg routes to both copies, not once it lists their one model (smg
        # registers each worker on its own: otherwise 10 of 10 requests can go to one copy)
        router = f"http://127.0.0.1:{gateway.load_record(state).router_port}"
        admin = gateway.admin_key(state)
        assert gateway.routed_workers(router, admin) == {w.url for w in gateway.plan(inv).workers}
        assert gateway.routed_workers(router, key) == set()  # smg's worker list: the admin key's only
        seen = Counter(chat(st["url"], key)[1] for _ in range(10))
        assert set(seen) == {w.url for w in gateway.plan(inv).workers} and set(seen.values()) == {5}, seen

        res = run("status", "r1", "--replica", "1")
        assert res.exit_code == 0 and "r1#1: 1/1 ranks running" in res.output and "dgx2" in res.output
        assert "dgx1" not in res.output, res.output
        res = run("launch", "r1", "--replica", "1", "--allow-nas-weights")
        assert res.exit_code != 0 and "sparkfleet stop r1 --replica 1" in res.output, res.output
        res = run("stop", "r1", "--replica", "1")
        assert res.exit_code == 0 and "dgx2: rank 0" in res.output, res.output
        assert run("status", "r1", "--replica", "1").exit_code != 0  # copy 1 is down ...
        assert run("status", "r1").exit_code == 0  # ... copy 0 serves on
        assert current(root / "recipes" / "r1" / "replicas" / "1", "r1")["stopped_at"]
        assert current(root, "r1")["stopped_at"] is None  # replica 0's history untouched
        assert all(chat(st["url"], key) == (200, gateway.plan(inv).workers[0].url) for _ in range(4))
    finally:
        gateway.down(state)
        lanes.stop(inv, "r1", 5)
        lanes.stop(replica_inventory(inv, "r1", 1), "r1", 5)
