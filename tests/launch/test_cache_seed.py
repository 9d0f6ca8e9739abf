"""The EXL3 lane's /cache seeded from the kit's pinned kernel cache ([launch.cache_seed], issue 19).

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
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from sparkfleet import inventory
from sparkfleet.cacheseed import CacheSeed
from sparkfleet.doctor import cache_seed_check
from sparkfleet.errors import ExitCode, InventoryError, SparkfleetError
from sparkfleet.inventory import state_dir_of
from sparkfleet.jsonable import to_jsonable
from sparkfleet.launch import agent, records
from sparkfleet.launch.plan import check_cache_seed, dry_run, node_facts, probe_request
from sparkfleet.launch.recipe import launch_recipe
from sparkfleet.launch.spec import LaunchSpec, cache_seed_of
from sparkfleet.seedprep import prepare, prepared, seed_cache
from support.engines import (
    Dockerd,
    docker_archive,
    engines_skip_reason,
    layer_tar,
    podman_loaded,
)
from support.kitrepo import git, make_kit_repo
from support.lanefleet import repo_fleet

LANE = "dsv41-flash-exl3-2x"
REV = "878e0eecd893fadc69ad2d58b2df0fabb0fae2ee"
# portable_node.py at 878e0ee, lines 31-32, verbatim: the stand-in kit's file holds the kit's own line
CACHE_ROOTS_LINE = (
    "CACHE_ROOTS = {'flashinfer', 'tilelang', 'triton', 'torch-extensions', 'cuda', 'vllm',\n"
    "               'exllamav3', 'numba', 'torch'}\n"
)
STAND_INS = {  # what [[launch.trees]] needs of the checkout (launch's kit check), as stand-ins
    "release/runtime/serving/serve.py": b"print('serve')\n",
    "release/runtime/serving/conservative.yaml": b"max_num_seqs: 6\n",
    "release/runtime/serving/combined_worker.py": b"class CombinedWorker: ...\n",
    "release/runtime/aot/mxfp8_gemm_cutlass_sm120/mxfp8_gemm_cutlass_sm120.so": b"stand-in\n",
    "release/runtime/tools/portable_node.py": b"import os\n\n" + CACHE_ROOTS_LINE.encode(),
}
# The cache's files: a compiler's outputs under the kit's roots, each with an mtime_ns that a tar
# header cannot carry (nanoseconds), restored from the manifest as bootstrap.py does.
CACHE_FILES = {
    "triton/5Xk2/_fwd_kernel.cubin": os.urandom(3000),
    "triton/5Xk2/_fwd_kernel.json": b'{"name": "_fwd_kernel"}\n',
    "cuda/ComputeCache/index": os.urandom(512),
    "vllm/torch_compile_cache/a1b2/rank_0_0/model.py": b"# compiled\n",
    "exllamav3/exllamav3_ext.so": os.urandom(20000),
}
MTIME_NS = {
    name: 1_758_000_000_000_000_000 + i * 1_000_000_007 + 123_457 for i, name in enumerate(CACHE_FILES)
}

OTHER_NS = 1_700_000_000_000_000_001  # a file not in CACHE_FILES


def _manifest(files: dict[str, bytes]) -> bytes:
    rows = {
        n: {"bytes": len(d), "sha256": hashlib.sha256(d).hexdigest(), "mtime_ns": MTIME_NS.get(n, OTHER_NS)}
        for n, d in sorted(files.items())
    }  # fmt: skip
    return json.dumps({"format": "ds41_auxiliary_runtime_cache_v1", "files": rows}, sort_keys=True).encode()


def _tar(files: dict[str, bytes], manifest: bytes, extra: list[tarfile.TarInfo] = ()) -> bytes:
    """kernel-cache.tar as the kit packs it: cache-manifest.json, then the roots' directories and files
    (whole-second mtimes in the headers; the manifest holds the nanoseconds)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        entries = {"cache-manifest.json": manifest, **files}
        dirs = sorted({str(Path(n).parents[i]) for n in files for i in range(len(Path(n).parts) - 1)})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 1_700_000_000
            tar.addfile(info)
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
        for info in extra:
            tar.addfile(info)
    return buf.getvalue()


def _lock(asset: bytes, manifest: bytes, image_digest: str) -> bytes:
    """recipe-lock.json in the kit's format (ds41_public_recipe_lock_v2's runtime block)."""
    runtime = {
        "cache_manifest_sha256": hashlib.sha256(manifest).hexdigest(),
        "files": {
            "kernel-cache.tar": {"bytes": len(asset), "sha256": hashlib.sha256(asset).hexdigest()},
            "runtime-source.tar.gz": {"bytes": 6315050, "sha256": "2c73ce72" * 8},
        },
        "image": f"ghcr.io/coolbho3k/deepseek-v4.1-flash-exl3-3bpw-2x-dgx-spark@sha256:{image_digest}",
        "transport": "ghcr",
    }
    return json.dumps(
        {"format": "ds41_public_recipe_lock_v2", "runtime": runtime}, indent=2, sort_keys=True
    ).encode()


def _fleet(tmp_path: Path) -> inventory.Inventory:
    """The repository's fleet, dgx1 this machine (its agent runs here) with its state_dir under
    tmp_path (where its checkout and store go)."""
    root = repo_fleet(tmp_path / "fleet")
    fleet = root / "hosts" / "fleet.toml"
    state = tmp_path / "dgx1-state"
    dgx1 = f'[hosts.dgx1]\naddress = "localhost"\nstate_dir = "{state}"\n'
    fleet.write_text(fleet.read_text().replace('[hosts.dgx1]\naddress = "dgx1"\n', dgx1, 1))
    return inventory.load(root)


def _kit(tmp_path: Path, lock: bytes) -> tuple[inventory.Inventory, Path]:
    """The exl3-kit pin's checkout on dgx1 as `sparkfleet stage` leaves it (a real git clone at the
    pin's rev, which is the stand-in's commit), holding `lock` as recipe-lock.json."""
    inv = _fleet(tmp_path)
    kit = make_kit_repo(tmp_path / "exl3-kit-repo", {**STAND_INS, "recipe-lock.json": lock})
    fleet = inv.root / "hosts" / "fleet.toml"
    fleet.write_text(fleet.read_text().replace(f'rev = "{REV}"', f'rev = "{kit.rev}"'))
    checkout = state_dir_of(inv.host("dgx1")) / "kits" / "exl3-kit" / kit.rev
    git(tmp_path, "clone", "--quiet", "--no-checkout", str(kit.path), str(checkout))
    git(checkout, "checkout", "--quiet", "--detach", kit.rev)
    return inventory.load(inv.root), checkout


def _seed(inv: inventory.Inventory, engine: str, image: str) -> CacheSeed:
    """The lane's own [launch.cache_seed] on dgx1, run by `engine` from the stand-in image."""
    seed = cache_seed_of(launch_recipe(inv, LANE), inv.host("dgx1"))
    assert seed is not None and seed.asset == "kernel-cache.tar" and seed.engine == "docker"
    return dataclasses.replace(seed, engine=engine, image=image)


def _probe(inv: inventory.Inventory, seed: CacheSeed, make: bool):
    """The agent's own probe for dgx1, asking only about the cache seed (as launch or doctor)."""
    req = probe_request(inv, launch_recipe(inv, LANE), inv.host("dgx1"))
    req.update(models=[], ports=[], memory=False, kits={}, display=None)
    req["cache_seed"] = {**to_jsonable(seed), "prepare": make}
    return node_facts("dgx1", agent.probe(req))


def _image_archive(tmp: Path, asset: bytes, tag: str) -> tuple[Path, str]:
    """A one-layer image holding `asset` at /opt/ds41-release/kernel-cache.tar (nothing else: it is
    created, never started); returns the archive and the image ID."""
    root = tmp / f"rootfs-{tag}"
    (root / "opt" / "ds41-release").mkdir(parents=True)
    (root / "opt" / "ds41-release" / "kernel-cache.tar").write_bytes(asset)
    image_id = docker_archive(layer_tar(root), tmp / f"{tag}.tar", f"sfl-seed:{tag}", tag)
    return tmp / f"{tag}.tar", image_id


MANIFEST = _manifest(CACHE_FILES)
ASSET = _tar(CACHE_FILES, MANIFEST)


def _assert_seeded(cache: Path) -> None:
    for name, data in CACHE_FILES.items():
        path = cache / name
        assert path.read_bytes() == data, name
        assert path.stat().st_mtime_ns == MTIME_NS[name], name  # the manifest's, to the nanosecond


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """The good image and a tampered one (one byte of the tar changed, same size)."""
    tmp = tmp_path_factory.mktemp("seed-images")
    tampered = bytearray(ASSET)
    tampered[ASSET.index(CACHE_FILES["exllamav3/exllamav3_ext.so"][:64]) + 10] ^= 0xFF
    return _image_archive(tmp, ASSET, "good"), _image_archive(tmp, bytes(tampered), "tampered")


@pytest.fixture(scope="module")
def dockerd(images):
    if reason := engines_skip_reason("docker"):
        pytest.skip(reason)
    ns = f"sfl-seed-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    daemon = Dockerd()
    try:
        daemon.start(ns)
        for tar, _ in images:
            daemon.docker("load", "-i", str(tar))
        yield daemon
    finally:
        daemon.stop()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _rank_spec(tmp_path: Path, seed: CacheSeed, cache: Path) -> LaunchSpec:
    """A rank whose serve reads its /cache when it starts: what it sees is what the seed left."""
    names = json.dumps(sorted(CACHE_FILES))
    see = (
        f"import json, os; json.dump({{n: os.stat(n).st_mtime_ns for n in {names}}}, open('seen.json', 'w'))"
    )
    return LaunchSpec(
        lane="seedtest", host="dgx1", rank=0, nnodes=1, runtime="process", name="sparkfleet-seedtest-r0",
        image=None, argv=(sys.executable, "-c", see), env={}, binds=(), devices=(), port=30000,
        gpus="none", shm_size="1g", state_dir=str(tmp_path / "rank-state"), cache_dir=str(cache),
        receipt_roots=(), cache_seed=seed,
    )  # fmt: skip


def _wait_for(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert path.exists(), f"{path} never appeared"


@pytest.mark.netns
@pytest.mark.slow
def test_docker_image_seeds_the_cache_before_every_serve(tmp_path, images, dockerd, monkeypatch):
    (_, good), _ = images
    monkeypatch.setenv("DOCKER_HOST", dockerd.host)
    inv, _checkout = _kit(tmp_path, _lock(ASSET, MANIFEST, good.removeprefix("sha256:")))
    seed = _seed(inv, "docker", good)
    recipe = launch_recipe(inv, LANE)
    # doctor reads only: nothing prepared yet, and it says launch will make it
    facts = _probe(inv, seed, make=False)
    assert facts.cache_seed == {"ok": True, "prepared": False, "store": seed.store}
    check = cache_seed_check(inv, "dgx1", recipe, facts.cache_seed)
    assert check.ok is True and "not prepared here yet" in check.detail
    assert not Path(seed.store).exists()
    # launch's probe makes it: copied out of the image, checked, unpacked; the container is gone
    facts = _probe(inv, seed, make=True)
    assert (
        facts.cache_seed["ok"] and facts.cache_seed["made"] and facts.cache_seed["files"] == len(CACHE_FILES)
    )
    check_cache_seed(inv, recipe, facts)  # no refusal
    assert dockerd.docker("ps", "-aq").stdout.split() == []  # created, never started, removed by ID
    store = Path(seed.store) / hashlib.sha256(ASSET).hexdigest()
    assert sorted(p.name for p in store.iterdir()) == [".lock", "tree"]  # the tar went once unpacked
    _assert_seeded(store / "tree")
    again = _probe(inv, seed, make=True).cache_seed  # once per asset: the second launch reuses it
    assert again["ok"] and again["made"] is False
    assert cache_seed_check(inv, "dgx1", recipe, again).ok is True
    # before the serve: agent start seeds the cache; the rank sees every file at the manifest's mtime
    cache = tmp_path / "lane-cache"
    out = agent.start({"spec": to_jsonable(_rank_spec(tmp_path, seed, cache))})
    assert out["cache_seed"]["copied"] == len(CACHE_FILES) and out["cache_seed"]["kept"] == 0
    assert out["cache_seed"]["asset_sha256"] == hashlib.sha256(ASSET).hexdigest()  # what launch records
    _wait_for(cache / "seen.json")
    assert json.loads((cache / "seen.json").read_text()) == MTIME_NS
    _assert_seeded(cache)
    for root in ("flashinfer", "tilelang", "torch-extensions", "numba", "torch", "tmp", "hf"):
        assert (cache / root).is_dir()  # as create() makes them
    agent.stop({"state_dir": str(tmp_path / "rank-state"), "lane": "seedtest", "timeout": 5})
    # the engine's own writes stay; a seeded file it changed is the seed's again next serve
    (cache / "triton" / "new_kernel.cubin").write_bytes(b"compiled by the engine")
    changed = cache / "cuda" / "ComputeCache" / "index"
    changed.write_bytes(b"rewritten")
    (cache / "seen.json").unlink()
    out = agent.start({"spec": to_jsonable(_rank_spec(tmp_path, seed, cache))})
    assert (out["cache_seed"]["copied"], out["cache_seed"]["kept"]) == (1, len(CACHE_FILES) - 1)
    _wait_for(cache / "seen.json")
    _assert_seeded(cache)
    assert (cache / "triton" / "new_kernel.cubin").read_bytes() == b"compiled by the engine"
    agent.stop({"state_dir": str(tmp_path / "rank-state"), "lane": "seedtest", "timeout": 5})


@pytest.mark.netns
@pytest.mark.slow
def test_a_tampered_asset_in_the_image_is_refused_naming_it(tmp_path, images, dockerd, monkeypatch):
    _, (_, tampered) = images
    monkeypatch.setenv("DOCKER_HOST", dockerd.host)
    # the lock pins the good tar; the image holds one whose byte differs
    inv, _ = _kit(tmp_path, _lock(ASSET, MANIFEST, tampered.removeprefix("sha256:")))
    seed = _seed(inv, "docker", tampered)
    recipe = launch_recipe(inv, LANE)
    facts = _probe(inv, seed, make=True)
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
        agent.start({"spec": to_jsonable(_rank_spec(tmp_path, seed, tmp_path / "c"))})
    assert records.load_all(tmp_path / "rank-state", "seedtest") == []  # nothing started


@pytest.mark.netns
@pytest.mark.slow
def test_podman_image_seeds_the_cache(tmp_path, images, monkeypatch):
    if reason := engines_skip_reason("podman"):
        pytest.skip(reason)
    (tar, good), _ = images
    with podman_loaded(tmp_path / "podman", tar, monkeypatch):
        hexid = good.removeprefix("sha256:")
        inv, _ = _kit(tmp_path, _lock(ASSET, MANIFEST, hexid))
        seed = _seed(inv, "podman", hexid)
        assert _probe(inv, seed, make=True).cache_seed["made"]
        left = subprocess.run(["podman", "ps", "-aq"], capture_output=True, text=True, check=True)
        assert left.stdout.split() == []  # created, never started, removed by ID
        cache = tmp_path / "lane-cache"
        out = agent.start({"spec": to_jsonable(_rank_spec(tmp_path, seed, cache))})
        assert out["cache_seed"]["copied"] == len(CACHE_FILES)
        _wait_for(cache / "seen.json")
        _assert_seeded(cache)
        agent.stop({"state_dir": str(tmp_path / "rank-state"), "lane": "seedtest", "timeout": 5})


BIG = "torch-extensions/py311_cu128/big_ext/big_ext.so"


def _placed(
    tmp_path: Path, files: dict[str, bytes], extra: list[tarfile.TarInfo] = (), digest: str = "a" * 64
) -> CacheSeed:
    """A store whose tar was already copied out of the image (registry.py's state after `docker cp`):
    no engine is asked again, so no engine is needed."""
    manifest = _manifest(files)
    asset = _tar(files, manifest, extra)
    inv, _ = _kit(tmp_path, _lock(asset, manifest, digest))
    seed = _seed(inv, "docker", "sha256:" + digest)
    store = Path(seed.store) / hashlib.sha256(asset).hexdigest()
    store.mkdir(parents=True)
    (store / "kernel-cache.tar").write_bytes(asset)
    return seed


def test_a_kill_9_mid_extract_converges_on_the_rerun(tmp_path):
    files = {**CACHE_FILES, BIG: os.urandom(1 << 20) * 48}  # 48 MiB: time to be killed in
    seed = _placed(tmp_path, files)
    store = Path(seed.store) / next(p.name for p in Path(seed.store).iterdir())
    code = (
        "import json, sys; from sparkfleet.cacheseed import seed_from_dict; "
        "from sparkfleet.seedprep import prepare; prepare(seed_from_dict(json.loads(sys.argv[1])))"
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
    _assert_seeded(got.tree)


def test_a_link_in_the_tar_is_refused_and_nothing_is_made(tmp_path):
    link = tarfile.TarInfo("triton/evil")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    seed = _placed(tmp_path, CACHE_FILES, [link])
    with pytest.raises(SparkfleetError, match="'triton/evil' is a link or a device") as exc:
        prepare(seed)
    assert exc.value.exit_code == ExitCode.REFUSED and "kernel-cache.tar" in exc.value.message
    assert prepared(seed) is None


def test_a_tree_changed_in_place_is_made_again_from_the_pinned_asset(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")  # no daemon: nothing to copy from
    seed = _placed(tmp_path, CACHE_FILES)
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
    seed = _placed(tmp_path, CACHE_FILES)
    cache, outside = tmp_path / "lane-cache", tmp_path / "outside"
    outside.mkdir()
    cache.mkdir()
    (cache / "triton").symlink_to(outside)  # a rank wrote a link where a cache root belongs
    with pytest.raises(SparkfleetError, match="a link, a file or a directory stands on its path"):
        seed_cache(seed, str(cache))
    assert list(outside.iterdir()) == []  # nothing written through it
    (cache / "triton").unlink()
    got = seed_cache(seed, str(cache))  # cuda/ and exllamav3/ came in before triton/ was refused
    assert (got.copied, got.kept) == (3, 2)
    _assert_seeded(cache)


def test_doctor_shows_the_kernel_cache_line_and_never_prepares_it(tmp_path):
    """doctor over the agent on this machine: the recipe's own pin (its image digest is the lock's),
    first not prepared (doctor only reads: no tree is made), then prepared with its size."""
    from sparkfleet.doctor import doctor

    pinned = "30557154f0d56b613a95867d41918c50d61f94107fa46861343d08f28c54bce3"  # hosts/fleet.toml
    seed = _placed(tmp_path, CACHE_FILES, digest=pinned)
    inv = inventory.load(tmp_path / "fleet")
    (line,) = [c for c in doctor(inv, LANE).checks if (c.host, c.name) == ("dgx1", "kernel cache")]
    assert line.ok is True and "not prepared here yet" in line.detail, line
    assert not (Path(seed.store) / hashlib.sha256(ASSET).hexdigest() / "tree").exists()
    prepare(dataclasses.replace(seed, image=launch_recipe(inv, LANE).image.ref))
    (line,) = [c for c in doctor(inv, LANE).checks if (c.host, c.name) == ("dgx1", "kernel cache")]
    assert line.ok is True and f"prepared, {len(CACHE_FILES)} files" in line.detail, line
    assert line.sizes == {"bytes": sum(len(d) for d in CACHE_FILES.values())}


def test_a_lock_whose_assets_are_not_in_the_image_is_refused_naming_the_key(tmp_path):
    lock = json.loads(_lock(ASSET, MANIFEST, "a" * 64))
    lock["runtime"]["transport"] = "huggingface"  # bootstrap.py downloads those; no image holds them
    inv, checkout = _kit(tmp_path, json.dumps(lock).encode())
    seed = _seed(inv, "docker", "sha256:" + "a" * 64)
    with pytest.raises(SparkfleetError, match=r"recipe-lock.json: runtime.transport 'huggingface'") as exc:
        prepare(seed)
    assert exc.value.exit_code == ExitCode.REFUSED and str(checkout) in exc.value.message
    assert not Path(seed.store).exists()  # nothing made


@pytest.mark.netns
@pytest.mark.slow
def test_an_image_the_host_has_not_loaded_is_refused_never_pulled(tmp_path, dockerd, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", dockerd.host)
    absent = "b" * 64
    inv, _ = _kit(tmp_path, _lock(ASSET, MANIFEST, absent))
    seed = _seed(
        inv, "docker", f"ghcr.io/coolbho3k/deepseek-v4.1-flash-exl3-3bpw-2x-dgx-spark@sha256:{absent}"
    )
    facts = _probe(inv, seed, make=True)
    assert facts.cache_seed["ok"] is False
    assert f"`docker create` from {seed.image} failed" in facts.cache_seed["problem"]
    assert (
        "No such image" in facts.cache_seed["problem"]
    )  # --pull=never: the pinned image is loaded, not fetched
    with pytest.raises(SparkfleetError) as exc:
        check_cache_seed(inv, launch_recipe(inv, LANE), facts)
    assert exc.value.exit_code == ExitCode.REFUSED and "load the lane's image" in exc.value.hint
