"""Memory admission and the watchdog's decision, read through injected /proc/meminfo files."""

from __future__ import annotations

import pytest

from sparkfleet.facts.memory import GIB, MIB, MemoryNeed, admit, parse_size, read_memory
from sparkfleet.lane.recipe import memory_need

# A GB10 Spark under load (numbers as /proc/meminfo prints them, kB).
MEMINFO = """MemTotal:       125419764 kB
MemFree:         3012345 kB
MemAvailable:   {avail} kB
Buffers:          123456 kB
Cached:         20000000 kB
SwapTotal:       {swap_total} kB
SwapFree:        {swap_free} kB
HugePages_Total:       0
"""


def meminfo(tmp_path, avail_gib: float, swap_total_gib: float = 0, swap_used_gib: float = 0):
    p = tmp_path / "meminfo"
    kb = lambda g: int(g * GIB / 1024)  # noqa: E731
    p.write_text(MEMINFO.format(avail=kb(avail_gib), swap_total=kb(swap_total_gib),
                                swap_free=kb(swap_total_gib - swap_used_gib)))  # fmt: skip
    return p


def test_reads_meminfo_in_bytes_and_shm(tmp_path):
    f = read_memory(meminfo(tmp_path, 80, 16, 2), tmp_path)
    assert f.total == 125419764 * 1024
    assert f.available == int(80 * GIB / 1024) * 1024
    assert f.swap_used == pytest.approx(2 * GIB, rel=1e-6)
    assert f.shm_total and f.shm_total > 0  # statvfs of a real directory
    assert read_memory(meminfo(tmp_path, 80), tmp_path / "absent").shm_total is None


def test_fits_and_refuses_with_the_numbers(tmp_path):
    need = MemoryNeed(weights_per_rank=int(47.2 * GIB), kv_budget=30 * GIB, floor=512 * MIB)
    assert admit("dgx1", need, read_memory(meminfo(tmp_path, 100), tmp_path)) == []
    problems = admit("dgx2", need, read_memory(meminfo(tmp_path, 70), tmp_path))
    assert problems == [
        "dgx2: needs 77.2 GiB (weights 47.2 GiB + KV 30.0 GiB) + floor 0.5 GiB, "
        "but MemAvailable is 70.0 GiB of 119.6 GiB"
    ]


def test_mem_fraction_claims_its_share_and_must_hold_weights_and_kv(tmp_path):
    facts = read_memory(meminfo(tmp_path, 90), tmp_path)
    # 0.80 x 119.6 GiB = 95.7 GiB claimed by the engine: more than is available
    need = MemoryNeed(weights_per_rank=40 * GIB, kv_budget=20 * GIB, mem_fraction=0.80)
    (p,) = admit("dgx3", need, facts)
    assert "needs 95.7 GiB (mem fraction 0.8 x 119.6 GiB)" in p and "MemAvailable is 90.0 GiB" in p
    small = MemoryNeed(weights_per_rank=40 * GIB, kv_budget=20 * GIB, mem_fraction=0.40)
    (p,) = admit("dgx3", small, facts)
    assert "do not fit in mem fraction 0.4 of 119.6 GiB = 47.8 GiB" in p


def test_shm_and_swap(tmp_path):
    facts = read_memory(meminfo(tmp_path, 100, 16, 4), tmp_path)
    huge = MemoryNeed(shm=facts.shm_total + GIB, max_swap_used=GIB)
    problems = admit("dgx4", huge, facts)
    assert any(f"{tmp_path} is" in p and "shm_size" in p for p in problems)
    assert any("4.0 GiB of swap in use (limit 1.0 GiB)" in p for p in problems)


def test_recipe_keys_to_need():
    need = memory_need({"weights_gib_per_rank": 47.2, "kv_budget_gib": 30, "mem_fraction": 0.8,
                        "floor_mib": 1024, "max_swap_used_gib": 0}, "32g", "docker")  # fmt: skip
    assert need.weights_per_rank == int(47.2 * GIB) and need.kv_budget == 30 * GIB
    assert need.mem_fraction == 0.8 and need.floor == 1024 * MIB and need.max_swap_used == 0
    assert need.shm == 32 * GIB
    assert memory_need({}, "32g", "process").shm == 0  # no container, no --ipc host shm
    assert memory_need({}, "32g", "docker").floor == 512 * MIB  # coolbho3k's kit default
    assert parse_size("512m") == 512 * MIB and parse_size("1024") == 1024
    with pytest.raises(ValueError):
        parse_size("lots")


def _repo_copy(tmp_path, recipe_edit=None):
    import shutil
    from pathlib import Path

    from sparkfleet.fleet import inventory

    repo = Path(__file__).resolve().parents[2]
    shutil.copytree(repo / "hosts", tmp_path / "hosts", ignore=shutil.ignore_patterns("*.nix"))
    shutil.copytree(repo / "recipes", tmp_path / "recipes", ignore=shutil.ignore_patterns("reports"))
    if recipe_edit:
        p = tmp_path / "recipes" / "dsv41-flash-4x-mia" / "recipe.toml"
        p.write_text(recipe_edit(p.read_text()))
    return inventory.load(tmp_path)


def _tp4_spec(inv, host="dgx2"):
    from sparkfleet.facts.fabric import FabricFacts
    from sparkfleet.lane.manifest import build_manifest
    from sparkfleet.lane.recipe import launch_recipe
    from sparkfleet.lane.spec import build_spec

    recipe = launch_recipe(inv, "dsv41-flash-4x-mia")
    fabrics = {h: FabricFacts(f"10.0.0.{i}", ("rocep1s0f0",), 3, "enp1s0f0np0")
               for i, h in enumerate(inv.lane("dsv41-flash-4x-mia").hosts, start=1)}  # fmt: skip
    h = inv.host(host)
    manifest = build_manifest(host, h.local_hub, h.nas_hub, [], "/hub")
    return build_spec(inv, recipe, host, manifest, fabrics, BUILT)  # the lane runs its Nix-built image


BUILT = "sha256:" + "ab" * 32  # the image ID `sparkfleet image load` recorded for the TP4 build


def test_mem_fraction_declared_once_fills_the_command(tmp_path):
    from sparkfleet.lane.spec import ShapeError, flag_values

    spec = _tp4_spec(_repo_copy(tmp_path / "a"))
    assert flag_values(spec.argv, "--mem-fraction-static") == ["0.8"]
    # boot caches: node-local, keyed by image digest x model revision x world shape, bound into the image
    assert spec.boot_cache_key == "abababababababab-fb2764a5-tp4ep1pad0n4"
    assert spec.env["TRITON_CACHE_DIR"] == "/bootcache/triton"
    assert any(b.target == "/bootcache" and not b.read_only and b.origin == "bootcache" for b in spec.binds)
    with pytest.raises(ShapeError, match="--mem-fraction-static 0.9 but the world shape says 0.8"):
        _tp4_spec(_repo_copy(tmp_path / "b", lambda t: t.replace('"{mem_fraction}"', '"0.9"')))


def test_canary_runs_in_the_lane_image_with_the_lane_flags(tmp_path):
    from pathlib import Path

    from sparkfleet.base.jsonable import to_jsonable
    from sparkfleet.node.node_checks import WORKER_MOUNT, container_canary_argv
    from sparkfleet.node.protocol import CanaryRequest

    spec = _tp4_spec(_repo_copy(tmp_path))
    req = {"spec": to_jsonable(spec), "master": "10.0.0.1", "port": 20000,
           "canary": {"backend": "nccl", "bytes": 16 << 20, "iters": 5, "timeout": 120}}  # fmt: skip
    worker = "/opt/sf/canary_worker.py"
    canary = CanaryRequest.decode(req)  # as the agent reads the controller's JSON
    argv = container_canary_argv(spec, canary, "/usr/bin/docker", Path("/st/canary1.env"), worker)
    image = argv.index(spec.image)
    flags, command = argv[:image], argv[image + 1 :]
    assert flags[:5] == ["/usr/bin/docker", "run", "--rm", "--name", f"{spec.name}-canary"]
    pairs = [flags[i : i + 2] for i in range(len(flags) - 1)]
    wanted = [["--network", "host"], ["--ipc", "host"], ["--gpus", "all"], ["--device", "/dev/infiniband"],
              ["--env-file", "/st/canary1.env"], ["-v", f"{worker}:{WORKER_MOUNT}:ro"]]  # fmt: skip
    for pair in wanted:
        assert pair in pairs
    assert sum(1 for a in flags if a == "-v") == 1  # no model binds: no weights load in the canary
    assert command == ["python3", WORKER_MOUNT, "--rank", "1", "--world", "4", "--master", "10.0.0.1",
                       "--port", "20000", "--backend", "nccl", "--bytes", str(16 << 20), "--pair-bytes",
                       str(4 << 20), "--iters", "5", "--timeout", "120"]  # fmt: skip
