"""The EXL3 kit's kernel-cache seed, stood in for (CI has no network): a kit checkout, its lock, a tar.

Shared by tests/fleet/test_cache_seed.py and tests/adversarial/test_hostile_cache_seed.py: a real
git checkout of a stand-in kit holding recipe-lock.json (pinning a small kernel-cache.tar in the
kit's format) and a portable_node.py whose CACHE_ROOTS is the kit's own line; images holding the
tar, loaded into a dockerd in a network namespace; and a store whose tar was already copied out
(`placed`), for the cases that need no engine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sparkfleet.base.jsonable import to_jsonable
from sparkfleet.fleet import inventory
from sparkfleet.fleet.cacheseed import CacheSeed
from sparkfleet.fleet.inventory import state_dir_of
from sparkfleet.lane.recipe import launch_recipe
from sparkfleet.lane.spec import LaunchSpec, cache_seed_of
from sparkfleet.launch.plan import node_facts, probe_request
from sparkfleet.node import agent
from support.engines import Dockerd, docker_archive, engines_skip_reason, layer_tar
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


def kit_files(lock: bytes, **changed: bytes) -> dict[str, bytes]:
    """The stand-in kit's files: STAND_INS with `changed` (path, `/` spelled `__`, `.` spelled `_dot_`),
    recipe-lock.json `lock`, and the kit's own release/runtime/bundle-manifest.json listing them."""
    files = dict(STAND_INS)
    files.update({k.replace("__", "/").replace("_dot_", "."): v for k, v in changed.items()})
    listing = {
        n.removeprefix("release/runtime/"): {"bytes": len(d), "sha256": hashlib.sha256(d).hexdigest()}
        for n, d in files.items()
        if n.startswith("release/runtime/")
    }
    files["release/runtime/bundle-manifest.json"] = json.dumps({"files": listing}).encode()
    return {**files, "recipe-lock.json": lock}


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


def cache_manifest(files: dict[str, bytes]) -> bytes:
    rows = {
        n: {"bytes": len(d), "sha256": hashlib.sha256(d).hexdigest(), "mtime_ns": MTIME_NS.get(n, OTHER_NS)}
        for n, d in sorted(files.items())
    }  # fmt: skip
    return json.dumps({"format": "ds41_auxiliary_runtime_cache_v1", "files": rows}, sort_keys=True).encode()


def cache_tar(
    files: dict[str, bytes],
    manifest: bytes,
    extra: list[tarfile.TarInfo] = (),
    pax: dict[str, dict[str, str]] | None = None,
) -> bytes:
    """kernel-cache.tar as the kit packs it: cache-manifest.json, then the roots' directories and files
    (whole-second mtimes in the headers; the manifest holds the nanoseconds); then `extra` members.
    `pax`: pax header records for some members (by name), which make it a pax archive."""
    buf = io.BytesIO()
    pax = pax or {}
    fmt = tarfile.PAX_FORMAT if pax or any(e.pax_headers for e in extra) else tarfile.USTAR_FORMAT
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        entries = {"cache-manifest.json": manifest, **files}
        dirs = sorted({str(Path(n).parents[i]) for n in files for i in range(len(Path(n).parts) - 1)})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 1_700_000_000
            tar.addfile(info)
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 1_700_000_000
            info.pax_headers = dict(pax.get(name, {}))
            tar.addfile(info, io.BytesIO(data))
        for info in extra:
            tar.addfile(info)
    return buf.getvalue()


def kit_lock(asset: bytes, manifest: bytes, image_digest: str) -> bytes:
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


def seed_fleet(tmp_path: Path) -> inventory.Inventory:
    """The repository's fleet, dgx1 this machine (its agent runs here) with its state_dir under
    tmp_path (where its checkout and store go)."""
    root = repo_fleet(tmp_path / "fleet")
    fleet = root / "hosts" / "fleet.toml"
    state = tmp_path / "dgx1-state"
    dgx1 = f'[hosts.dgx1]\naddress = "localhost"\nstate_dir = "{state}"\n'
    fleet.write_text(fleet.read_text().replace('[hosts.dgx1]\naddress = "dgx1"\n', dgx1, 1))
    return inventory.load(root)


def seed_kit(tmp_path: Path, lock: bytes, **changed: bytes) -> tuple[inventory.Inventory, Path]:
    """The exl3-kit pin's checkout on dgx1 as `sparkfleet stage` leaves it (a real git clone at the
    pin's rev, which is the stand-in's commit), holding `lock` as recipe-lock.json (and the files
    `changed`, as kit_files names them)."""
    inv = seed_fleet(tmp_path)
    kit = make_kit_repo(tmp_path / "exl3-kit-repo", kit_files(lock, **changed))
    fleet = inv.root / "hosts" / "fleet.toml"
    fleet.write_text(fleet.read_text().replace(f'rev = "{REV}"', f'rev = "{kit.rev}"'))
    checkout = state_dir_of(inv.host("dgx1")) / "kits" / "exl3-kit" / kit.rev
    git(tmp_path, "clone", "--quiet", "--no-checkout", str(kit.path), str(checkout))
    git(checkout, "checkout", "--quiet", "--detach", kit.rev)
    return inventory.load(inv.root), checkout


def lane_seed(inv: inventory.Inventory, engine: str, image: str) -> CacheSeed:
    """The lane's own [launch.cache_seed] on dgx1, run by `engine` from the stand-in image."""
    seed = cache_seed_of(launch_recipe(inv, LANE), inv.host("dgx1"))
    assert seed is not None and seed.asset == "kernel-cache.tar" and seed.engine == "docker"
    return dataclasses.replace(seed, engine=engine, image=image)


def probe_seed(inv: inventory.Inventory, seed: CacheSeed, make: bool):
    """The agent's own probe for dgx1, asking only about the cache seed (as launch or doctor)."""
    req = probe_request(inv, launch_recipe(inv, LANE), inv.host("dgx1"))
    req = dataclasses.replace(req, models=[], ports=[], memory=False, kits=None, display=None,
                              cache_seed=to_jsonable(seed))  # fmt: skip
    return node_facts("dgx1", agent.probe(req.preparing_seed() if make else req))


def image_archive(tmp: Path, asset: bytes, tag: str) -> tuple[Path, str]:
    """A one-layer image holding `asset` at /opt/ds41-release/kernel-cache.tar (nothing else: it is
    created, never started); returns the archive and the image ID."""
    root = tmp / f"rootfs-{tag}"
    (root / "opt" / "ds41-release").mkdir(parents=True)
    (root / "opt" / "ds41-release" / "kernel-cache.tar").write_bytes(asset)
    image_id = docker_archive(layer_tar(root), tmp / f"{tag}.tar", f"sfl-seed:{tag}", tag)
    return tmp / f"{tag}.tar", image_id


MANIFEST = cache_manifest(CACHE_FILES)
ASSET = cache_tar(CACHE_FILES, MANIFEST)


def assert_seeded(cache: Path) -> None:
    for name, data in CACHE_FILES.items():
        path = cache / name
        assert path.read_bytes() == data, name
        assert path.stat().st_mtime_ns == MTIME_NS[name], name  # the manifest's, to the nanosecond


def seed_images(tmp: Path) -> tuple[tuple[Path, str], tuple[Path, str]]:
    """The good image and a tampered one (one byte of the tar changed, same size): (archive, ID) each."""
    tampered = bytearray(ASSET)
    tampered[ASSET.index(CACHE_FILES["exllamav3/exllamav3_ext.so"][:64]) + 10] ^= 0xFF
    return image_archive(tmp, ASSET, "good"), image_archive(tmp, bytes(tampered), "tampered")


@contextmanager
def seed_dockerd(archives: list[Path]) -> Iterator[Dockerd]:
    """A dockerd in a network namespace of its own, the archives loaded; stopped and removed after."""
    if reason := engines_skip_reason("docker"):
        pytest.skip(reason)
    ns = f"sfl-seed-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    daemon = Dockerd()
    try:
        daemon.start(ns)
        for tar in archives:
            daemon.docker("load", "-i", str(tar))
        yield daemon
    finally:
        daemon.stop()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def rank_spec(tmp_path: Path, seed: CacheSeed, cache: Path) -> LaunchSpec:
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


def wait_for(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert path.exists(), f"{path} never appeared"


BIG = "torch-extensions/py311_cu128/big_ext/big_ext.so"


def placed(
    tmp_path: Path,
    files: dict[str, bytes],
    extra: list[tarfile.TarInfo] = (),
    digest: str = "a" * 64,
    **changed: bytes,
) -> CacheSeed:
    """A store whose tar was already copied out of the image (registry.py's state after `docker cp`):
    no engine is asked again, so no engine is needed. `changed`: the kit's files, as seed_kit takes them."""
    manifest = cache_manifest(files)
    return placed_asset(tmp_path, cache_tar(files, manifest, extra), manifest, digest, **changed)


def placed_asset(
    tmp_path: Path, asset: bytes, manifest: bytes, digest: str = "a" * 64, **changed: bytes
) -> CacheSeed:
    """`placed` for a tar made elsewhere (a hostile one): the kit's lock pins it and `manifest`;
    `changed` as seed_kit takes it."""
    inv, _ = seed_kit(tmp_path, kit_lock(asset, manifest, digest), **changed)
    seed = lane_seed(inv, "docker", "sha256:" + digest)
    store = Path(seed.store) / hashlib.sha256(asset).hexdigest()
    store.mkdir(parents=True)
    (store / "kernel-cache.tar").write_bytes(asset)
    return seed
