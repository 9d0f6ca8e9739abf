"""Each lane renders what its kit's own launcher runs, as far as it is recorded.

CI has no network, so the kits' files cannot be read here: each recipe's [kit] table records the
facts read from the kit at its commit, with the file each comes from (and its sha256), and these
tests check that sparkfleet's rendering of every rank follows them — the Aiden lane's full per-rank
argv (launch-sgl-dsv41.sh run_cmd()), the EXL3 lane's entrypoint, per-node argv and env
(portable_node.py docker_command()), and the env/knobs the TP4 kit sets. With the kits checked out
(SPARKFLEET_KIT_DIR), tests/launch/test_kit_checkout.py derives the same from the kits' own files.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest

from sparkfleet.base.errors import InventoryError
from sparkfleet.facts.fabric import FabricFacts
from sparkfleet.fleet import inventory
from sparkfleet.lane.manifest import BindManifest, BindMount
from sparkfleet.lane.recipe import launch_recipe
from sparkfleet.lane.spec import build_spec
from sparkfleet.launch.plan import dry_run, planned_argv
from support.lanefleet import STAND_IN_DIGEST, repo_fleet

ROOT = Path(__file__).resolve().parents[2]


def _fleet(tmp_path: Path) -> inventory.Inventory:
    return inventory.load(repo_fleet(tmp_path / "fleet"))


def _kit(lane: str) -> dict:
    return tomllib.loads((ROOT / "recipes" / lane / "recipe.toml").read_text())["kit"]


def _matches(kit_arg: str, ours: str, rank: int, head: str, fleet: dict[str, str] | None = None) -> bool:
    """A kit token with shell variables stands for what this fleet gives it."""
    if "$SNAP" in kit_arg:
        return ours == "<MODEL_PATH unknown>" or ours.startswith("/")  # the staged snapshot, bound
    if kit_arg == "/model":  # the EXL3 kit's model directory: the snapshot bound there once known
        return ours in ("<MODEL_PATH unknown>", "/model")
    want = kit_arg.replace("$r", str(rank)).replace("$HEAD", head)
    for var, value in (fleet or {}).items():
        want = want.replace(var, value)
    try:
        return float(want) == float(ours)  # the kit's "0.80" is sglang's 0.8
    except ValueError:
        return want == ours


def test_aiden_lane_renders_the_kits_argv_for_every_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    inv = _fleet(tmp_path)
    plan = dry_run(inv, "dsv41-flash-4x-aiden")
    kit = _kit("dsv41-flash-4x-aiden")
    head = inv.host("dgx1").fabric_ip
    assert [s.host for s in plan.by_rank()] == ["dgx1", "dgx2", "dgx3", "dgx4"]
    assert [s.host for s in plan.start_order()] == ["dgx4", "dgx3", "dgx2", "dgx1"]  # kit: ranks 3 2 1 0
    for spec in plan.by_rank():
        ours = list(spec.argv)
        assert len(ours) == len(kit["argv"]), (ours, kit["argv"])
        bad = [(k, o) for k, o in zip(kit["argv"], ours, strict=True) if not _matches(k, o, spec.rank, head)]
        assert not bad, f"rank {spec.rank}: {bad}"
        assert json.loads(ours[ours.index("--default-chat-template-kwargs") + 1]) == {"thinking": True}
        assert spec.image.endswith(STAND_IN_DIGEST) and "sparkrun-sglang-dsv41-gb10" in spec.image


@pytest.mark.parametrize("lane", ["dsv41-flash-4x-aiden", "dsv41-flash-4x-mia"])
def test_every_rank_gets_the_env_the_kit_sets(tmp_path, monkeypatch, lane):
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    plan = dry_run(_fleet(tmp_path), lane)
    kit = _kit(lane)
    expected = (
        kit.get("env")
        or tomllib.loads((ROOT / "recipes" / lane / "recipe.toml").read_text())["launch"]["env"]
    )
    for spec in plan.by_rank():
        wrong = {k: (v, spec.env.get(k)) for k, v in expected.items() if spec.env.get(k) != v}
        assert not wrong, f"{lane} rank {spec.rank}: kit vs ours {wrong}"


def test_exl3_lane_serves_with_the_kits_tested_profile(tmp_path, monkeypatch):
    """.env.ds41.example's tested knobs are what the rendered serve command carries."""
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    plan = dry_run(_fleet(tmp_path), "dsv41-flash-exl3-2x")
    env = _kit("dsv41-flash-exl3-2x")["env"]
    flags = {
        "--gpu-memory-utilization": "GPU_MEMORY_UTILIZATION",
        "--max-model-len": "MAX_MODEL_LEN",
        "--max-num-seqs": "MAX_NUM_SEQS",
        "--max-num-batched-tokens": "MAX_NUM_BATCHED_TOKENS",
    }
    for spec in plan.by_rank():
        argv = list(spec.argv)
        for flag, key in flags.items():
            assert float(argv[argv.index(flag) + 1]) == float(env[key]), (spec.rank, flag)


def test_exl3_lane_renders_the_kits_node_command(tmp_path, monkeypatch):
    """portable_node.py docker_command(): entrypoint, argv (+ --headless on node 1), env, per node."""
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    inv = _fleet(tmp_path)
    plan = dry_run(inv, "dsv41-flash-exl3-2x")
    kit = _kit("dsv41-flash-exl3-2x")
    launch = tomllib.loads((ROOT / "recipes" / "dsv41-flash-exl3-2x" / "recipe.toml").read_text())["launch"]
    fleet = {"$PORT": str(launch["port"]), "$NAME": launch["served_model_name"]}
    head = inv.host("dgx1").fabric_ip
    assert [s.host for s in plan.by_rank()] == ["dgx1", "dgx2"]
    for spec in plan.by_rank():
        want = kit["argv"] + kit["ours_added"] + (kit["worker_argv"] if spec.rank else [])
        ours = list(spec.argv)
        assert len(ours) == len(want), (ours, want)
        bad = [(k, o) for k, o in zip(want, ours, strict=True) if not _matches(k, o, spec.rank, head, fleet)]
        assert not bad, f"rank {spec.rank}: {bad}"
        assert spec.entrypoint == kit["entrypoint"] == "/opt/ds41-venv/bin/python"
        assert ("--headless" in ours) == (spec.rank == 1)
        docker = planned_argv(spec)
        assert docker[docker.index("--entrypoint") + 1] == kit["entrypoint"]
        serve = docker.index("/opt/ds41-serving/serve.py")
        assert docker.index("--entrypoint") < docker.index(spec.image) < serve
        # the kit's serving profile as env (launch_profile.environment) agrees with its argv
        assert spec.env["DS41_GPU_MEMORY_UTILIZATION"] == kit["env"]["GPU_MEMORY_UTILIZATION"]
        assert spec.env["DS41_MAX_NUM_SEQS"] == kit["env"]["MAX_NUM_SEQS"]
        assert not set(kit["node_env"]) & set(launch["env"]), "per-node keys are the node's, not the recipe's"


def test_exl3_models_are_bound_where_the_kit_reads_them(tmp_path, monkeypatch):
    """/model and /draft-exl3 (portable_node.py mounts), each entry keeping its path in the snapshot."""
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    inv = _fleet(tmp_path)
    recipe = launch_recipe(inv, "dsv41-flash-exl3-2x")
    hub = "/root/.cache/huggingface/hub"
    binds, paths = [], {}
    for pin in ("exl3-3bpw", "exl3-dspark-drafter"):
        p = inv.pins[pin]
        rel = f"models--{p.source.replace('/', '--')}/snapshots/{p.value}"
        paths[p.source] = f"{hub}/{rel}"
        for f in ("config.json", "draft/model-00001-of-00002.safetensors"):
            binds.append(BindMount(Path("/nvme/hub") / rel / f, f"{hub}/{rel}/{f}", True, "local", p.source))
    manifest = BindManifest("dgx1", tuple(binds), (), paths)
    spec = build_spec(inv, recipe, "dgx1", manifest, {"dgx1": None, "dgx2": None}, fabric_unknown_ok=True)
    targets = {b.target for b in spec.binds if b.origin == "local"}
    assert targets == {
        "/model/config.json",
        "/model/draft/model-00001-of-00002.safetensors",
        "/draft-exl3/config.json",
        "/draft-exl3/draft/model-00001-of-00002.safetensors",
    }
    assert spec.argv[:3] == ("/opt/ds41-serving/serve.py", "serve", "/model")
    assert spec.env["MODEL_PATH"] == "/model" and spec.env["DS41_DRAFT_EXL3_PATH"] == "/draft-exl3"


def test_kit_sources_name_every_file_with_a_sha256():
    """Every lane whose facts come from a kit names the files they were read from, with their sha256."""
    for lane in ("dsv41-flash-exl3-2x", "dsv41-flash-4x-aiden"):
        sources = _kit(lane).get("sources", {})
        assert sources, lane
        assert all(len(v) == 64 and int(v, 16) >= 0 for v in sources.values()), lane


def test_node_env_spells_the_nodes_facts_as_each_kit_does(tmp_path, monkeypatch):
    """[launch.node_env]: the Aiden kit's HOST_IP/B12X_ROCE_*, the EXL3 kit's NCCL_IB_HCA/TP_SOCKET_IFNAME."""
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    inv = _fleet(tmp_path)
    facts = FabricFacts("10.100.32.2", ("rocep1s0f1", "roceP2p1s0f1"), 3, "enp1s0f1np1")
    empty = BindManifest("dgx2", (), (), {})
    aiden = build_spec(inv, launch_recipe(inv, "dsv41-flash-4x-aiden"), "dgx2", empty, {"dgx2": facts})
    assert aiden.env["HOST_IP"] == "10.100.32.2"
    assert aiden.env["B12X_ROCE_HCA"] == aiden.env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
    assert aiden.env["B12X_ROCE_GID_INDEX"] == aiden.env["NCCL_IB_GID_INDEX"] == "3"
    exl3 = build_spec(inv, launch_recipe(inv, "dsv41-flash-exl3-2x"), "dgx2", empty, {"dgx2": facts})
    assert exl3.env["NCCL_IB_HCA"] == "=rocep1s0f1:1" and exl3.env["TP_SOCKET_IFNAME"] == "enp1s0f1np1"
    unknown = build_spec(
        inv, launch_recipe(inv, "dsv41-flash-exl3-2x"), "dgx2", empty, {"dgx2": None}, fabric_unknown_ok=True
    )
    assert "TP_SOCKET_IFNAME" not in unknown.env  # never a guess


def test_node_env_with_an_unknown_fact_is_refused(tmp_path):
    inv_root = tmp_path / "fleet"
    (inv_root / "hosts").mkdir(parents=True)
    (inv_root / "hosts" / "fleet.toml").write_text((ROOT / "hosts" / "fleet.toml").read_text())
    shutil.copytree(ROOT / "recipes", inv_root / "recipes")
    recipe = inv_root / "recipes" / "dsv41-flash-exl3-2x" / "recipe.toml"
    recipe.write_text(
        recipe.read_text().replace('TP_SOCKET_IFNAME = "{netdev}"', 'TP_SOCKET_IFNAME = "{nic}"')
    )
    with pytest.raises(
        InventoryError, match=r"launch.node_env.TP_SOCKET_IFNAME uses unknown placeholder \{nic\}"
    ):
        launch_recipe(inventory.load(inv_root), "dsv41-flash-exl3-2x")


def test_dry_run_marks_node_env_it_cannot_fill_naming_the_fact(tmp_path, monkeypatch):
    """A [launch.node_env] key whose node facts are unknown is shown unknown, naming the fact
    (`netdev` of dgx2), the way an unknown DIST_INIT_ADDR is: it used to vanish from the env."""
    from click.testing import CliRunner

    from sparkfleet.cli import main

    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    root = repo_fleet(tmp_path / "fleet")
    inv = inventory.load(root)
    plan = dry_run(inv, "dsv41-flash-exl3-2x")
    for host in ("dgx1", "dgx2"):
        unknown = plan.unknown[host]
        assert f"`netdev` of {host}" in unknown["TP_SOCKET_IFNAME"], unknown
        assert f"`hca` of {host}" in unknown["NCCL_IB_HCA"] and "'={hca}:1'" in unknown["NCCL_IB_HCA"]
        assert "TP_SOCKET_IFNAME" not in plan.specs[host].env
    aiden = dry_run(inv, "dsv41-flash-4x-aiden").unknown["dgx3"]
    assert "`hcas` of dgx3" in aiden["B12X_ROCE_HCA"]
    assert "`gid_index` of dgx3" in aiden["B12X_ROCE_GID_INDEX"]
    assert "HOST_IP" not in aiden  # dgx3's fabric_ip is in hosts/fleet.toml
    res = CliRunner().invoke(main, ["--root", str(root), "launch", "dsv41-flash-exl3-2x", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "# unknown TP_SOCKET_IFNAME: [launch.node_env] '{netdev}' needs `netdev` of dgx2" in res.stdout
    args = ["--root", str(root), "launch", "dsv41-flash-exl3-2x", "--dry-run", "--json"]
    doc = json.loads(CliRunner().invoke(main, args).stdout)
    assert all("TP_SOCKET_IFNAME" in r["unknown"] for r in doc["ranks"])


def test_a_real_launch_refuses_node_env_it_cannot_fill(tmp_path, monkeypatch):
    """Outside a dry run an unfillable node_env key is refused, not silently left out: the kit
    would run with NCCL picking its own rail (here: a lane whose fabric is not probed as RoCE)."""
    from sparkfleet.lane.spec import ShapeError

    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    root = repo_fleet(tmp_path / "fleet")
    recipe = root / "recipes" / "dsv41-flash-exl3-2x" / "recipe.toml"
    recipe.write_text(recipe.read_text().replace('fabric = "roce"', 'fabric = "none"'))
    inv = inventory.load(root)
    empty = BindManifest("dgx2", (), (), {})
    with pytest.raises(ShapeError, match=r"launch.node_env.NCCL_IB_HCA needs `hca` of dgx2"):
        build_spec(inv, launch_recipe(inv, "dsv41-flash-exl3-2x"), "dgx2", empty, {"dgx2": None})


def test_exl3_container_runs_in_the_kits_box_on_docker_and_podman(tmp_path, monkeypatch):
    """[kit.container] (portable_node.py docker_command() `args`, verbatim) is what the rendered
    docker and podman argv carry: --memory 9g, --cpus 6, --read-only, --cap-drop ALL, --user ..."""
    from sparkfleet.node.runtimes import container_run_argv
    from support.kitflags import kit_pairs, missing_flags, run_pairs

    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    kit = _kit("dsv41-flash-exl3-2x")["container"]
    assert kit["source"].startswith("release/runtime/tools/portable_node.py docker_command()")
    assert "release/runtime/tools/portable_node.py" in _kit("dsv41-flash-exl3-2x")["sources"]
    inv = _fleet(tmp_path)
    card = {"DRM_CARD": inv.host("dgx1").drm_card or "", "DRM_GID": "44"}  # the card's group on the node
    want = kit_pairs(kit["flags"], "1000:1000", card)
    for flag in ("--memory", "--cpus", "--read-only", "--cap-drop", "--user", "--ipc", "--pids-limit"):
        assert any(k == flag for k, _ in want), f"[kit.container] lacks {flag}"
    assert ("--device", "/dev/dri/card0:/dev/dri/card0") in want and ("--group-add", "44") in want
    plan = dry_run(inv, "dsv41-flash-exl3-2x")
    for spec in plan.by_rank():
        docker = container_run_argv(spec, "docker", Path("/st/r.env"), "1000:1000", 44)
        assert not missing_flags(want, run_pairs(docker, spec.image)), spec.rank
        podman = container_run_argv(spec, "podman", Path("/st/r.env"), "1000:1000", 44)
        # podman: GPUs by CDI (gpus = "all" is docker's --gpus), the rest the same flags
        lacking = missing_flags(want, run_pairs(podman, spec.image))
        assert lacking == [("--gpus", "all")], lacking
        assert podman[podman.index("--shm-size") + 1] == "2g"  # --ipc private: podman takes a shm size
        planned = planned_argv(spec)  # off the node: the user is shown as what it will be, not guessed
        assert planned[planned.index("--user") + 1] == f"<uid:gid of the sparkfleet user on {spec.host}>"
        assert planned[planned.index("--group-add") + 1] == f"<gid of /dev/dri/card0 on {spec.host}>"


def test_container_limits_are_checked_when_the_recipe_is_read(tmp_path):
    """A bad [launch.container] value is refused naming the key, before any host is asked."""
    root = repo_fleet(tmp_path / "fleet")
    recipe = root / "recipes" / "dsv41-flash-exl3-2x" / "recipe.toml"
    text = recipe.read_text()
    recipe.write_text(text.replace('memory_swap = "9g"', 'memory_swap = "4g"'))
    with pytest.raises(InventoryError, match=r"launch.container.memory_swap = '4g' needs memory \(= '9g'\)"):
        launch_recipe(inventory.load(root), "dsv41-flash-exl3-2x")
    recipe.write_text(text.replace('memory = "9g"', 'memory = "9 GB"'))
    with pytest.raises(InventoryError, match=r"container"):
        inventory.load(root)
    without = text[: text.index("[launch.container]")] + text[text.index("# The kit keeps its JIT") :]
    recipe.write_text(without)
    lim = launch_recipe(inventory.load(root), "dsv41-flash-exl3-2x").container
    assert lim.ipc == "host" and lim.memory is None and not lim.read_only  # left out: as before


def test_the_box_travels_to_the_node_with_the_spec(tmp_path, monkeypatch):
    """The agent rebuilds the spec from JSON: the limits arrive as the controller planned them."""
    from sparkfleet.base.jsonable import to_jsonable
    from sparkfleet.lane.spec import LaunchSpec

    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    spec = dry_run(_fleet(tmp_path), "dsv41-flash-exl3-2x").specs["dgx2"]
    back = LaunchSpec.from_dict(json.loads(json.dumps(to_jsonable(spec))))
    assert back.container == spec.container and back.container.cap_drop == ("ALL",)
    assert back == spec


def test_every_kit_file_the_argv_names_is_a_needed_tree_file(tmp_path):
    """What the kit's argv runs from /opt/ds41-serving (serve.py, --config conservative.yaml,
    --worker-cls combined_worker.*, on PYTHONPATH) is required of the bound tree ([[launch.trees]])."""
    inv = _fleet(tmp_path)
    recipe = launch_recipe(inv, "dsv41-flash-exl3-2x")
    kit = _kit("dsv41-flash-exl3-2x")
    (serving,) = [t for t in recipe.trees if t.target == "/opt/ds41-serving"]
    named = {a.removeprefix("/opt/ds41-serving/") for a in kit["argv"] if a.startswith("/opt/ds41-serving/")}
    worker = kit["argv"][kit["argv"].index("--worker-cls") + 1].split(".")[0] + ".py"
    assert named | {worker} == set(serving.needs) == {"serve.py", "conservative.yaml", "combined_worker.py"}
    assert (serving.pin, serving.path, serving.rev) == ("exl3-kit", "release/runtime/serving", kit["commit"])
    aot = [m["target"] for m in kit["mounts"] if "flashinfer/data/aot" in m["target"]]
    assert aot and aot[0] in {t.target for t in recipe.trees}
