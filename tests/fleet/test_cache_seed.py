"""The EXL3 lane's /cache seeded from the kit's pinned kernel cache ([launch.cache_seed]).

The kit starts every run from its "auxiliary runtime cache" (878e0ee): recipe-lock.json pins
runtime.files["kernel-cache.tar"] and runtime.cache_manifest_sha256; registry.py prepare() copies
the tar out of the pinned image (/opt/ds41-release/kernel-cache.tar, a container created and never
started, removed by ID); bootstrap.py extract() unpacks it and restores each file's mtime_ns from
cache-manifest.json; portable_node.py create() copies every file into the run's /cache. Before this,
sparkfleet bound the lane's cache dir unseeded: every boot recompiled its JIT kernels.

Real parts here: a real image (built from files, loaded into a dockerd in a network namespace and
into podman) holding a small kernel-cache.tar in the kit's format; a real git checkout of a
stand-in kit holding recipe-lock.json (pinning that tar) and a portable_node.py whose CACHE_ROOTS is
the kit's own line; the agent's own probe and start. CI has no network: the kit's 683 MB tar and
its ghcr image are stood in for, and the pins' rev and image digest are the stand-ins'.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from sparkfleet.base.errors import ExitCode, InventoryError, SparkfleetError
from sparkfleet.base.jsonable import to_jsonable
from sparkfleet.fleet import inventory
from sparkfleet.fleet.inventory import state_dir_of
from sparkfleet.lane.recipe import launch_recipe
from sparkfleet.launch.plan import check_cache_seed, dry_run
from sparkfleet.node import agent, records
from sparkfleet.node.protocol import StartRequest, StopRequest
from sparkfleet.node.seedprep import prepare, prepared, seed_cache
from sparkfleet.ops.doctor import cache_seed_check
from support.engines import engines_skip_reason, podman_loaded
from support.lanefleet import repo_fleet
from support.seedkit import (
    ASSET,
    BIG,
    CACHE_FILES,
    LANE,
    MANIFEST,
    MTIME_NS,
    OTHER_NS,
    REV,
    assert_seeded,
    kit_lock,
    lane_seed,
    placed,
    probe_seed,
    rank_spec,
    seed_dockerd,
    seed_images,
    seed_kit,
    wait_for,
)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return seed_images(tmp_path_factory.mktemp("seed-images"))


@pytest.fixture(scope="module")
def dockerd(images):
    with seed_dockerd([tar for tar, _ in images]) as daemon:
        yield daemon


@pytest.mark.netns
@pytest.mark.slow
def test_docker_image_seeds_the_cache_before_every_serve(tmp_path, images, dockerd, monkeypatch):
    (_, good), _ = images
    monkeypatch.setenv("DOCKER_HOST", dockerd.host)
    inv, _checkout = seed_kit(tmp_path, kit_lock(ASSET, MANIFEST, good.removeprefix("sha256:")))
    seed = lane_seed(inv, "docker", good)
    recipe = launch_recipe(inv, LANE)
    # doctor reads only: nothing prepared yet, and it says launch will make it
    facts = probe_seed(inv, seed, make=False)
    assert facts.cache_seed == {"ok": True, "prepared": False, "store": seed.store}
    check = cache_seed_check(inv, "dgx1", recipe, facts.cache_seed)
    assert check.ok is True and "not prepared here yet" in check.detail
    assert not Path(seed.store).exists()
    # launch's probe makes it: copied out of the image, checked, unpacked; the container is gone
    facts = probe_seed(inv, seed, make=True)
    assert (
        facts.cache_seed["ok"] and facts.cache_seed["made"] and facts.cache_seed["files"] == len(CACHE_FILES)
    )
    check_cache_seed(inv, recipe, facts)  # no refusal
    assert dockerd.docker("ps", "-aq").stdout.split() == []  # created, never started, removed by ID
    store = Path(seed.store) / hashlib.sha256(ASSET).hexdigest()
    assert sorted(p.name for p in store.iterdir()) == [".lock", "tree"]  # the tar went once unpacked
    assert_seeded(store / "tree")
    again = probe_seed(inv, seed, make=True).cache_seed  # once per asset: the second launch reuses it
    assert again["ok"] and again["made"] is False
    assert cache_seed_check(inv, "dgx1", recipe, again).ok is True
    # before the serve: agent start seeds the cache; the rank sees every file at the manifest's mtime
    cache = tmp_path / "lane-cache"
    out = agent.start(StartRequest(to_jsonable(rank_spec(tmp_path, seed, cache))))
    assert out["cache_seed"]["copied"] == len(CACHE_FILES) and out["cache_seed"]["kept"] == 0
    assert out["cache_seed"]["asset_sha256"] == hashlib.sha256(ASSET).hexdigest()  # what launch records
    wait_for(cache / "seen.json")
    assert json.loads((cache / "seen.json").read_text()) == MTIME_NS
    assert_seeded(cache)
    for root in ("flashinfer", "tilelang", "torch-extensions", "numba", "torch", "tmp", "hf"):
        assert (cache / root).is_dir()  # as create() makes them
    agent.stop(StopRequest("seedtest", str(tmp_path / "rank-state"), timeout=5))
    # the engine's own writes stay; a seeded file it changed is the seed's again next serve
    (cache / "triton" / "new_kernel.cubin").write_bytes(b"compiled by the engine")
    changed = cache / "cuda" / "ComputeCache" / "index"
    changed.write_bytes(b"rewritten")
    (cache / "seen.json").unlink()
    out = agent.start(StartRequest(to_jsonable(rank_spec(tmp_path, seed, cache))))
    assert (out["cache_seed"]["copied"], out["cache_seed"]["kept"]) == (1, len(CACHE_FILES) - 1)
    wait_for(cache / "seen.json")
    assert_seeded(cache)
    assert (cache / "triton" / "new_kernel.cubin").read_bytes() == b"compiled by the engine"
    agent.stop(StopRequest("seedtest", str(tmp_path / "rank-state"), timeout=5))


@pytest.mark.netns
@pytest.mark.slow
def test_a_tampered_asset_in_the_image_is_refused_naming_it(tmp_path, images, dockerd, monkeypatch):
    _, (_, tampered) = images
    monkeypatch.setenv("DOCKER_HOST", dockerd.host)
    # the lock pins the good tar; the image holds one whose byte differs
    inv, _ = seed_kit(tmp_path, kit_lock(ASSET, MANIFEST, tampered.removeprefix("sha256:")))
    seed = lane_seed(inv, "docker", tampered)
    recipe = launch_recipe(inv, LANE)
    facts = probe_seed(inv, seed, make=True)
    assert facts.cache_seed["ok"] is False
    problem = facts.cache_seed["problem"]
    assert f"{tampered}:/opt/ds41-release/kernel-cache.tar is not the asset" in problem
    assert str(Path(seed.lock)) in problem and hashlib.sha256(ASSET).hexdigest()[:12] in problem
    with pytest.raises(SparkfleetError) as exc:
        check_cache_seed(inv, recipe, facts)
    assert exc.value.exit_code == ExitCode.REFUSED
    assert exc.value.message.startswith(f"dgx1: lane {LANE} seeds /cache from the kit's kernel-cache.tar")
    assert f"load the lane's image {recipe.image.ref} on dgx1" in exc.value.hint  # the recipe's pin
    assert f"sparkfleet stage dgx1 --lane {LANE}" in exc.value.hint
    check = cache_seed_check(inv, "dgx1", recipe, facts.cache_seed)
    assert check.ok is False and check.refuses and check.hint == exc.value.hint
    store = Path(seed.store) / hashlib.sha256(ASSET).hexdigest()
    assert not (store / "tree").exists() and (store / "kernel-cache.tar.copying").is_file()  # kept to inspect
    assert dockerd.docker("ps", "-aq").stdout.split() == []
    with pytest.raises(SparkfleetError, match="is not the asset"):  # start refuses too: no unseeded serve
        agent.start(StartRequest(to_jsonable(rank_spec(tmp_path, seed, tmp_path / "c"))))
    assert records.load_all(tmp_path / "rank-state", "seedtest") == []  # nothing started


@pytest.mark.netns
@pytest.mark.slow
def test_podman_image_seeds_the_cache(tmp_path, images, monkeypatch):
    if reason := engines_skip_reason("podman"):
        pytest.skip(reason)
    (tar, good), _ = images
    with podman_loaded(tmp_path / "podman", tar, monkeypatch):
        hexid = good.removeprefix("sha256:")
        inv, _ = seed_kit(tmp_path, kit_lock(ASSET, MANIFEST, hexid))
        seed = lane_seed(inv, "podman", hexid)
        assert probe_seed(inv, seed, make=True).cache_seed["made"]
        left = subprocess.run(["podman", "ps", "-aq"], capture_output=True, text=True, check=True)
        assert left.stdout.split() == []  # created, never started, removed by ID
        cache = tmp_path / "lane-cache"
        out = agent.start(StartRequest(to_jsonable(rank_spec(tmp_path, seed, cache))))
        assert out["cache_seed"]["copied"] == len(CACHE_FILES)
        wait_for(cache / "seen.json")
        assert_seeded(cache)
        agent.stop(StopRequest("seedtest", str(tmp_path / "rank-state"), timeout=5))


def test_a_kill_9_mid_extract_converges_on_the_rerun(tmp_path):
    files = {**CACHE_FILES, BIG: os.urandom(1 << 20) * 48}  # 48 MiB: time to be killed in
    seed = placed(tmp_path, files)
    store = Path(seed.store) / next(p.name for p in Path(seed.store).iterdir())
    code = (
        "import json, sys; from sparkfleet.fleet.cacheseed import CacheSeed; "
        "from sparkfleet.node.seedprep import prepare; prepare(CacheSeed.from_dict(json.loads(sys.argv[1])))"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(to_jsonable(seed))])
    try:
        deadline = time.monotonic() + 60
        while not (store / "tree.extracting" / "torch-extensions").exists() and time.monotonic() < deadline:
            assert proc.poll() is None, "prepare finished before it could be killed"
            time.sleep(0.002)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    assert (store / "tree.extracting").is_dir() and not (store / "tree").exists()  # killed mid-extract
    assert prepared(seed) is None  # doctor: not prepared (a half tree is never taken for one)
    got = prepare(seed)  # the rerun: the dead run's staging removed, the tree made whole
    assert got.made and got.tree == store / "tree" and not (store / "tree.extracting").exists()
    assert (got.tree / BIG).read_bytes() == files[BIG]
    assert (got.tree / BIG).stat().st_mtime_ns == OTHER_NS
    assert_seeded(got.tree)


def test_a_link_in_the_tar_is_refused_and_nothing_is_made(tmp_path):
    link = tarfile.TarInfo("triton/evil")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    seed = placed(tmp_path, CACHE_FILES, [link])
    with pytest.raises(SparkfleetError, match="'triton/evil' is a link or a device") as exc:
        prepare(seed)
    assert exc.value.exit_code == ExitCode.REFUSED and "kernel-cache.tar" in exc.value.message
    assert prepared(seed) is None


def test_a_tree_changed_in_place_is_made_again_from_the_pinned_asset(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")  # no daemon: nothing to copy from
    seed = placed(tmp_path, CACHE_FILES)
    tree = prepare(seed).tree
    os.utime(tree / "triton/5Xk2/_fwd_kernel.cubin", ns=(1, 1))  # a stale mtime: compilers would rebuild
    with pytest.raises(SparkfleetError, match="1 files differ from cache-manifest.json"):
        prepared(seed)
    # the tar is gone once unpacked: the rerun must copy it out again, and this store has no engine
    # image (sha256:aaaa...): refused, naming the image, rather than seeding from the changed tree
    with pytest.raises(SparkfleetError, match="create` from sha256:a{64} failed"):
        prepare(seed)


def test_dry_run_shows_the_seed_and_the_recipe_names_no_sha256(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    inv = inventory.load(repo_fleet(tmp_path / "fleet"))
    plan = dry_run(inv, LANE)
    for spec in plan.by_rank():
        seed = spec.cache_seed
        assert seed is not None
        checkout = state_dir_of(inv.host(spec.host)) / "kits" / "exl3-kit" / REV
        assert (seed.lock, seed.roots_from) == (
            str(checkout / "recipe-lock.json"),
            str(checkout / "release/runtime/tools/portable_node.py"),
        )
        assert (
            seed.image == launch_recipe(inv, LANE).image.ref
            and seed.image_path == "/opt/ds41-release/kernel-cache.tar"
        )
        assert "kernel-cache.tar out of" in seed.describe() and "recipe-lock.json" in seed.describe()
    from click.testing import CliRunner

    from sparkfleet.cli import main

    args = ["--root", str(inv.root), "launch", LANE, "--dry-run"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert res.stdout.count("  cache:   seeded before the serve: kernel-cache.tar out of") == 2
    doc = json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)
    assert [r["cache_seed"] for r in doc["ranks"]] == [
        plan.specs[r["host"]].cache_seed.describe() for r in doc["ranks"]
    ]
    recipe_text = (inv.root / "recipes" / LANE / "recipe.toml").read_text()
    table = recipe_text.split("[launch.cache_seed]")[1].split("\n\n")[0]
    assert "sha256" not in table  # read from the kit's lock, never restated


def test_a_seed_pin_the_lane_does_not_check_out_is_refused(tmp_path):
    root = repo_fleet(tmp_path / "fleet")
    recipe = root / "recipes" / LANE / "recipe.toml"
    recipe.write_text(
        recipe.read_text().replace(
            '[launch.cache_seed]\npin = "exl3-kit"', '[launch.cache_seed]\npin = "exl3-kit-image"'
        )
    )
    inv = inventory.load(root)
    with pytest.raises(
        InventoryError,
        match=r"launch.cache_seed.pin 'exl3-kit-image' is not a pin of the lane's \[\[launch.trees\]\]",
    ):
        launch_recipe(inv, LANE)


def test_the_seed_never_writes_through_a_link_the_engine_left_in_the_cache(tmp_path):
    seed = placed(tmp_path, CACHE_FILES)
    cache, outside = tmp_path / "lane-cache", tmp_path / "outside"
    outside.mkdir()
    cache.mkdir()
    (cache / "triton").symlink_to(outside)  # a rank wrote a link where a cache root belongs
    with pytest.raises(SparkfleetError, match=r"lane-cache/triton is a link or a file, where the kit's"):
        seed_cache(seed, str(cache))
    assert list(outside.iterdir()) == []  # nothing written through it
    assert sorted(p.name for p in cache.iterdir()) == ["triton"]  # refused before anything was copied
    (cache / "triton").unlink()
    got = seed_cache(seed, str(cache))
    assert (got.copied, got.kept) == (len(CACHE_FILES), 0)
    assert_seeded(cache)


def test_doctor_shows_the_kernel_cache_line_and_never_prepares_it(tmp_path):
    """doctor over the agent on this machine: the recipe's own pin (its image digest is the lock's),
    first not prepared (doctor only reads: no tree is made), then prepared with its size."""
    from sparkfleet.ops.doctor import doctor

    pinned = "30557154f0d56b613a95867d41918c50d61f94107fa46861343d08f28c54bce3"  # hosts/fleet.toml
    seed = placed(tmp_path, CACHE_FILES, digest=pinned)
    inv = inventory.load(tmp_path / "fleet")
    (line,) = [c for c in doctor(inv, LANE).checks if (c.host, c.name) == ("dgx1", "kernel cache")]
    assert line.ok is True and "not prepared here yet" in line.detail, line
    assert not (Path(seed.store) / hashlib.sha256(ASSET).hexdigest() / "tree").exists()
    prepare(dataclasses.replace(seed, image=launch_recipe(inv, LANE).image.ref))
    (line,) = [c for c in doctor(inv, LANE).checks if (c.host, c.name) == ("dgx1", "kernel cache")]
    assert line.ok is True and f"prepared, {len(CACHE_FILES)} files" in line.detail, line
    assert line.sizes == {"bytes": sum(len(d) for d in CACHE_FILES.values())}


def test_a_lock_whose_assets_are_not_in_the_image_is_refused_naming_the_key(tmp_path):
    lock = json.loads(kit_lock(ASSET, MANIFEST, "a" * 64))
    lock["runtime"]["transport"] = "huggingface"  # bootstrap.py downloads those; no image holds them
    inv, checkout = seed_kit(tmp_path, json.dumps(lock).encode())
    seed = lane_seed(inv, "docker", "sha256:" + "a" * 64)
    with pytest.raises(SparkfleetError, match=r"recipe-lock.json: runtime.transport 'huggingface'") as exc:
        prepare(seed)
    assert exc.value.exit_code == ExitCode.REFUSED and str(checkout) in exc.value.message
    assert not Path(seed.store).exists()  # nothing made


@pytest.mark.netns
@pytest.mark.slow
def test_an_image_the_host_has_not_loaded_is_refused_never_pulled(tmp_path, dockerd, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", dockerd.host)
    absent = "b" * 64
    inv, _ = seed_kit(tmp_path, kit_lock(ASSET, MANIFEST, absent))
    seed = lane_seed(
        inv, "docker", f"ghcr.io/coolbho3k/deepseek-v4.1-flash-exl3-3bpw-2x-dgx-spark@sha256:{absent}"
    )
    facts = probe_seed(inv, seed, make=True)
    assert facts.cache_seed["ok"] is False
    assert f"`docker create` from {seed.image} failed" in facts.cache_seed["problem"]
    assert (
        "No such image" in facts.cache_seed["problem"]
    )  # --pull=never: the pinned image is loaded, not fetched
    with pytest.raises(SparkfleetError) as exc:
        check_cache_seed(inv, launch_recipe(inv, LANE), facts)
    assert exc.value.exit_code == ExitCode.REFUSED and "load the lane's image" in exc.value.hint
