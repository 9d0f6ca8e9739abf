"""Recipe + host → LaunchSpec: derived env per rank, command flags, shape errors, container argv."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkfleet.facts.fabric import FabricFacts
from sparkfleet.fleet import inventory
from sparkfleet.lane.manifest import ModelState, SnapshotFile, build_manifest
from sparkfleet.lane.recipe import launch_recipe
from sparkfleet.lane.spec import ShapeError, build_spec, redact_env
from sparkfleet.node.runtimes import container_run_argv
from support.lanefleet import MODELS, write_fleet
from support.launch_fleet import host_fields

REPO_ROOT = Path(__file__).resolve().parents[2]

TP4 = (
    """
[lane]
hosts = ["dgx1", "dgx2", "dgx3", "dgx4"]

[world]
tp = 4
ep = 1
pad = 0
launcher = "tp4"

[launch]
image = "lane-image"
runtime = "docker"
port = 30000
dist_port = 20000
served_model_name = "deepseek-v4.1-flash"
command = ["python3", "-m", "sglang.launch_server", "--model-path", "{model_path}", "--tp", "{tp}",
           "--nnodes", "{nnodes}", "--node-rank", "{node_rank}", "--dist-init-addr", "{dist_init_addr}",
           "--port", "{port}"]
receipt_roots = ["/cache/ds41-backend-attestation"]
fabric = "roce"
[launch.env]
NCCL_CUMEM_ENABLE = "0"
HF_TOKEN = "hf_do_not_print"
"""
    + MODELS
)


def fabric(i: int) -> FabricFacts:
    # Node-specific on purpose: dgx3's RoCE v2 GID sits at index 5, the others at 3.
    return FabricFacts(
        f"10.0.0.{i}", (f"rocep1s0f{i % 2}", "roceP2p1s0f0"), 5 if i == 3 else 3, f"enp1s0f{i}np0"
    )


def state(repo: str) -> ModelState:
    return ModelState(repo, "c" * 40, (SnapshotFile("config.json", False),), True)


def make_inv(tmp_path: Path, recipe: str = TP4, **host_extra) -> inventory.Inventory:
    hosts = {f"dgx{i}": host_fields(f"dgx{i}", tmp_path, fabric_ip=f"10.0.0.{i}") for i in range(1, 5)}
    for name, extra in host_extra.items():
        hosts[name].update(extra)
    write_fleet(tmp_path / "fleet", hosts, {"lane": recipe})
    return inventory.load(tmp_path / "fleet")


def specs(inv, lane="lane"):
    recipe = launch_recipe(inv, lane)
    fabrics = {f"dgx{i}": fabric(i) for i in range(1, 5)}
    out = {}
    for h in inv.lane(lane).hosts:
        host = inv.host(h)
        m = build_manifest(
            h, host.local_hub, host.nas_hub, [state(x.repo) for x in inv.lane(lane).models], "/hub"
        )
        out[h] = build_spec(inv, recipe, h, m, fabrics)
    return out


def test_tp4_env_per_rank(tmp_path):
    all_specs = specs(make_inv(tmp_path))
    for i in range(1, 5):
        s = all_specs[f"dgx{i}"]
        assert s.rank == i - 1
        env = s.env
        assert env["DSV41_LAUNCHER"] == "tp4"
        assert (env["TP_SIZE"], env["EP_SIZE"], env["DSV41_TP_PAD"]) == ("4", "1", "0")
        assert env["NODE_RANK"] == str(i - 1) and env["NNODES"] == "4"
        assert env["DIST_INIT_ADDR"] == "10.0.0.1:20000"  # the head's fabric IP on every rank
        assert env["SGLANG_HOST_IP"] == f"10.0.0.{i}"
        # per-node fabric, not one global list
        assert env["NCCL_IB_GID_INDEX"] == ("5" if i == 3 else "3")
        assert env["NCCL_IB_HCA"] == f"rocep1s0f{i % 2},roceP2p1s0f0"
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == f"enp1s0f{i}np0"
        assert env["NCCL_CUMEM_ENABLE"] == "0"
        assert env["MODEL_PATH"].startswith("/hub/models--demo-org--")
        a = s.argv
        assert a[a.index("--node-rank") + 1] == str(i - 1)
        assert a[a.index("--tp") + 1] == "4"
        assert a[a.index("--dist-init-addr") + 1] == "10.0.0.1:20000"
        assert s.name == f"sparkfleet-lane-r{i - 1}"
        assert s.image == "ghcr.io/example/lane@sha256:" + "ab" * 32
        assert s.receipt_roots == (
            str(tmp_path / f"dgx{i}" / "state" / "cache" / "lane" / "ds41-backend-attestation"),
        )
    assert all_specs["dgx1"].ready_signatures and not all_specs["dgx2"].ready_signatures
    assert redact_env(all_specs["dgx1"].env)["HF_TOKEN"] == "<redacted>"


def test_repo_tp4_recipe_sets_what_the_night_shift_missed():
    inv = inventory.load(REPO_ROOT)
    recipe = launch_recipe(inv, "dsv41-flash-4x-mia")
    fabrics = {h: fabric(i) for i, h in enumerate(inv.lane("dsv41-flash-4x-mia").hosts, start=1)}
    for h in inv.lane("dsv41-flash-4x-mia").hosts:
        host = inv.host(h)
        m = build_manifest(
            h, host.local_hub, host.nas_hub, [state("deepseek-ai/DeepSeek-V4.1-Flash")], "/hub"
        )
        env = build_spec(inv, recipe, h, m, fabrics).env
        assert env["DSV41_LAUNCHER"] == "tp4"
        assert env["TP_SIZE"] == "4" and env["DSV41_TP_PAD"] == "0" and env["EP_SIZE"] == "1"


def _bad(tmp_path, old, new, count=1):
    assert TP4.count(old) >= 1
    return make_inv(tmp_path, TP4.replace(old, new, count))


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("tp = 4", "tp = 6", "tp=6 is not divisible by nnodes=4"),
        ("ep = 1", "ep = 3", "ep=3 does not divide tp=4"),
        ('launcher = "tp4"', 'launcher = "tp3"', "gates the TP3 adapters but tp=4"),
        ('"--tp", "{tp}"', '"--tp", "8"', "--tp 8 but the world shape says 4"),
        ('"--port", "{port}"', '"--port=31000"', "--port 31000 but the world shape says 30000"),
        ('NCCL_CUMEM_ENABLE = "0"', 'TP_SIZE = "3"', "launch.env sets TP_SIZE"),
        ('NCCL_CUMEM_ENABLE = "0"', 'NCCL_IB_GID_INDEX = "3"', "launch.env sets NCCL_IB_GID_INDEX"),
        ('"{model_path}"', '"{modle_path}"', "unknown placeholder {modle_path}"),
        ('launcher = "tp4"', 'launcher = "tp4"\nranks = {dgx1 = 0, dgx2 = 1, dgx3 = 1, dgx4 = 2}',
         "dgx2 and dgx3 both have node rank 1"),
        ('launcher = "tp4"', 'launcher = "tp4"\nranks = {dgx1 = 0, dgx2 = 1, dgx3 = 2, dgx4 = 4}',
         "rank 3 missing"),
        ('launcher = "tp4"', 'launcher = "tp4"\nranks = {dgx1 = 0, dgx2 = 1, dgx3 = 2}',
         "without a rank: dgx4"),
    ],
)  # fmt: skip
def test_inconsistent_shapes_refused(tmp_path, old, new, message):
    inv = _bad(tmp_path, old, new)
    with pytest.raises(ShapeError) as exc:
        specs(inv)
    assert message in exc.value.message


def test_explicit_ranks_move_the_head(tmp_path):
    inv = _bad(
        tmp_path, 'launcher = "tp4"', 'launcher = "tp4"\nranks = {dgx1 = 3, dgx2 = 2, dgx3 = 1, dgx4 = 0}'
    )
    s = specs(inv)
    assert s["dgx4"].rank == 0 and s["dgx4"].env["DIST_INIT_ADDR"] == "10.0.0.4:20000"
    assert s["dgx1"].env["NODE_RANK"] == "3"


def test_roce_lane_without_fabric_facts_refused(tmp_path):
    inv = make_inv(tmp_path)
    host = inv.host("dgx2")
    m = build_manifest("dgx2", host.local_hub, host.nas_hub, [], "/hub")
    with pytest.raises(ShapeError, match="needs RoCE fabric facts"):
        build_spec(inv, launch_recipe(inv, "lane"), "dgx2", m, {"dgx1": fabric(1)})


def test_docker_argv_exact(tmp_path):
    s = specs(make_inv(tmp_path))["dgx2"]
    argv = container_run_argv(s, "docker", Path("/st/rank1.env"))
    cache = str(tmp_path / "dgx2" / "state" / "cache" / "lane")
    binds = []
    for b in s.binds[:-2]:
        binds += ["-v", f"{b.source}:{b.target}:ro"]
    assert argv == [
        "docker", "run", "-d", "--name", "sparkfleet-lane-r1",
        "--label", "sparkfleet.lane=lane", "--label", "sparkfleet.rank=1", "--label", "sparkfleet.host=dgx2",
        "--network", "host", "--ipc", "host",
        "--ulimit", "memlock=-1:-1", "--ulimit", "stack=67108864:67108864",
        "--shm-size", "32g", "--log-opt", "max-size=64m", "--log-opt", "max-file=2",
        "--gpus", "all", "--device", "/dev/infiniband",
        "--env-file", "/st/rank1.env",
        *binds, "-v", f"{cache}:/cache", "-v", f"{s.boot_cache_dir}:/bootcache",
        "ghcr.io/example/lane@sha256:" + "ab" * 32,
        *s.argv,
    ]  # fmt: skip
    assert not any("hf_do_not_print" in a for a in argv)  # env goes through the 0600 env file


def test_podman_uses_cdi_gpus(tmp_path):
    inv = _bad(tmp_path, 'runtime = "docker"', 'runtime = "podman"')
    s = specs(inv)["dgx1"]
    argv = container_run_argv(s, "podman", Path("/e"))
    assert "--gpus" not in argv
    i = argv.index("nvidia.com/gpu=all")
    assert argv[i - 1] == "--device"
    assert argv[argv.index("/dev/infiniband") - 1] == "--device"


def test_cdi_for_docker_when_asked(tmp_path):
    inv = _bad(tmp_path, 'fabric = "roce"', 'fabric = "roce"\ngpus = "cdi"')
    argv = container_run_argv(specs(inv)["dgx1"], "docker", Path("/e"))
    assert "--gpus" not in argv and "nvidia.com/gpu=all" in argv


def test_memlock_and_other_ulimits_come_from_the_host(tmp_path):
    # This machine's hard memlock limit is 8192: `--ulimit memlock=-1` is refused by the engine.
    inv = make_inv(tmp_path, dgx2={"ulimits": {"memlock": 8192, "stack": 67108864}}, dgx3={"ulimits": {}})
    all_specs = specs(inv)
    argv = container_run_argv(all_specs["dgx2"], "docker", Path("/e"))
    assert argv[argv.index("memlock=8192:8192") - 1] == "--ulimit"
    assert "memlock=-1:-1" not in argv and "stack=67108864:67108864" in argv
    assert "--ulimit" not in container_run_argv(all_specs["dgx3"], "docker", Path("/e"))
    assert "memlock=-1:-1" in container_run_argv(all_specs["dgx1"], "docker", Path("/e"))  # the default


def test_gpu_access_per_host(tmp_path):
    # NixOS hosts reach the GPU through CDI only (nixpkgs#340386); DGX OS through --gpus all.
    inv = make_inv(tmp_path, dgx2={"gpu_access": "cdi"}, dgx3={"os": "nixos"})
    all_specs = specs(inv)
    for host, cdi in (("dgx1", False), ("dgx2", True), ("dgx3", True)):
        argv = container_run_argv(all_specs[host], "docker", Path("/e"))
        assert ("--gpus" in argv) is not cdi and ("nvidia.com/gpu=all" in argv) is cdi, host


def test_podman_gets_no_shm_size_beside_ipc_host(tmp_path):
    # podman 4.3: "cannot set shmsize when running in the {host } IPC Namespace"
    inv = _bad(tmp_path, 'runtime = "docker"', 'runtime = "podman"')
    argv = container_run_argv(specs(inv)["dgx1"], "podman", Path("/e"))
    assert "--shm-size" not in argv and argv[argv.index("--ipc") + 1] == "host"


def test_unresolved_image_refused_before_any_node(tmp_path):
    from sparkfleet.launch.plan import check_shape

    inv = _bad(tmp_path, 'image = "lane-image"', 'image = "short-image"')
    with pytest.raises(ShapeError, match="not resolved"):
        check_shape(inv, launch_recipe(inv, "lane"))


@pytest.mark.parametrize("key", ["X\nLD_PRELOAD", "A=B", "1X", "", "tp_size", "Node_Rank", "X Y"])
def test_env_keys_are_names_and_derived_keys_any_case_refused(tmp_path, key):
    """Issue 10.1: the spec refuses what the schema refuses, for recipes built without the schema."""
    import dataclasses

    from sparkfleet.node.runtimes import RuntimeError_, _env_file_text

    inv = make_inv(tmp_path)
    recipe = dataclasses.replace(launch_recipe(inv, "lane"), env={key: "/tmp/evil.so"})
    host = inv.host("dgx1")
    m = build_manifest(
        "dgx1", host.local_hub, host.nas_hub, [state(x.repo) for x in inv.lane("lane").models], "/hub"
    )
    with pytest.raises(ShapeError, match="launch.env"):
        build_spec(inv, recipe, "dgx1", m, {f"dgx{i}": fabric(i) for i in range(1, 5)})
    if key.upper() not in ("TP_SIZE", "NODE_RANK"):
        with pytest.raises(RuntimeError_):
            _env_file_text({"OK": "1", key: "v"})


def test_cache_dir_outside_state_dir_refused_by_the_spec(tmp_path):
    """Issue 10.2: receipt roots live in cache_dir; it may not be /usr or climb out of the state dir."""
    import dataclasses

    from sparkfleet.lane.spec import cache_dir_of

    inv = make_inv(tmp_path)
    recipe = launch_recipe(inv, "lane")
    host = inv.host("dgx1")
    good = cache_dir_of(recipe, host)
    assert good == f"{host.state_dir}/cache/lane"
    for bad in (
        "/usr",
        "{state_dir}/../..",
        "{state_dir}",
        "{state_dir}/x/../../y",
        "{state_dir}//x",
        "{lane}",
    ):
        with pytest.raises(ShapeError, match="cache_dir"):
            cache_dir_of(dataclasses.replace(recipe, cache_dir=bad), host)


def test_repo_sglang_lane_takes_its_key_from_a_bound_config_file_never_argv(tmp_path):
    """SGLang reads no key variable: `--config {api_key_config}` names the 0600 YAML that launch
    keeps beside the key, bound read-only into the container; the key itself is in no argv."""
    inv = inventory.load(REPO_ROOT)
    recipe = launch_recipe(inv, "dsv41-flash-4x-mia")
    fabrics = {h: fabric(i) for i, h in enumerate(inv.lane("dsv41-flash-4x-mia").hosts, start=1)}
    host = inv.host("dgx1")
    m = build_manifest(
        "dgx1", host.local_hub, host.nas_hub, [state("deepseek-ai/DeepSeek-V4.1-Flash")], "/hub"
    )
    spec = build_spec(inv, recipe, "dgx1", m, fabrics, "sha256:" + "ab" * 32)
    i = spec.argv.index("--config")
    assert spec.argv[i + 1] == "/run/sparkfleet/api-key.yaml"
    bind = next(b for b in spec.binds if b.target == "/run/sparkfleet/api-key.yaml")
    assert bind.read_only and bind.source.name == "dsv41-flash-4x-mia.sglang.yaml"
    assert bind.source.parent.name == "keys"
    argv = container_run_argv(spec, "docker", tmp_path / "rank0.env")
    assert f"{bind.source}:/run/sparkfleet/api-key.yaml:ro" in argv and "--api-key" not in argv


def test_repo_vllm_lane_takes_the_key_guard_from_a_read_only_folder_first_on_its_pythonpath(tmp_path):
    """vLLM's key guards only /v1 paths: `--middleware {vllm_key_guard}` names sparkfleet's guard,
    whose folder (that module alone) is bound read-only and put before the kit's own PYTHONPATH."""
    from sparkfleet.lane.spec import KEY_GUARD, KEY_GUARD_DIR, KEY_GUARD_MOUNT

    inv = inventory.load(REPO_ROOT)
    lane = "dsv41-flash-exl3-2x"
    recipe = launch_recipe(inv, lane)
    fabrics = {h: fabric(i) for i, h in enumerate(inv.lane(lane).hosts, start=1)}
    host = inv.host(inv.lane(lane).hosts[0])
    m = build_manifest(host.name, host.local_hub, host.nas_hub, [], "/hub")
    spec = build_spec(inv, recipe, host.name, m, fabrics, "sha256:" + "ab" * 32)
    assert spec.argv[spec.argv.index("--middleware") + 1] == KEY_GUARD == "sparkfleet_keyguard.RequireKey"
    assert spec.env["PYTHONPATH"] == f"{KEY_GUARD_MOUNT}:{recipe.env['PYTHONPATH']}"
    bind = next(b for b in spec.binds if b.target == KEY_GUARD_MOUNT)
    assert bind.read_only and bind.source == KEY_GUARD_DIR
    assert sorted(p.name for p in KEY_GUARD_DIR.iterdir() if p.suffix == ".py") == ["sparkfleet_keyguard.py"]
    argv = container_run_argv(spec, "docker", tmp_path / "rank0.env")
    assert f"{KEY_GUARD_DIR}:{KEY_GUARD_MOUNT}:ro" in argv
