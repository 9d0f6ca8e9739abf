"""A launched container really runs in the box [launch.container] declares, on real
docker and podman here (runc, cgroupfs, cgroup v1).

The box is the EXL3 lane's own ([launch.container] = the kit's portable_node.py docker_command() at
878e0ee), started through sparkfleet's ContainerRuntime, then read back twice: from the engine
(`inspect`: HostConfig and Config) and from inside the container (its cgroup limits, capability
bounding set, uid, read-only root, tmpfs, working directory). The memory limit is enforced here:
a rank that allocates past it is OOM-killed.

What this machine cannot hold, replaced and said so: --cpus 6 (2 cores here; docker refuses a
quota above the machine's) -> 1.5; --memory 9g -> 96m (so the OOM kill is seen without 9 GiB);
user = "host" runs as root under this root-run test, so docker keeps "host" (asserting it becomes
this process's uid:gid) and podman gets a literal 1234:1234 to show --user takes effect.
No GPU and no /dev/infiniband here: those flags are the CI argv test's (test_kit_entry.py). No DRM
card either: the rank's [launch.display] card is a character device made here with mknod, owned by
a group of its own, and the rank must see it at /dev/dri/card0 and be in that group.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from sparkfleet.facts.display import DisplayDevice
from sparkfleet.fleet import inventory
from sparkfleet.lane.manifest import BindMount
from sparkfleet.lane.recipe import launch_recipe
from sparkfleet.lane.spec import LaunchSpec
from sparkfleet.node.runtimes import ContainerRuntime
from support.engines import (
    Dockerd,
    docker_archive,
    engines_skip_reason,
    layer_tar,
    make_rootfs,
    podman_loaded,
)
from support.lanefleet import repo_fleet

pytestmark = [pytest.mark.netns, pytest.mark.slow]

# Inside the container: report the box, then allocate past the memory limit (touching every page).
PROBE = """
import json, os, stat
try:
    c = os.stat("/dev/dri/card0")
    card = dict(char=stat.S_ISCHR(c.st_mode), rdev=[os.major(c.st_rdev), os.minor(c.st_rdev)], gid=c.st_gid)
except OSError as exc:
    card = str(exc)
st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
def cg(path):
    try:
        return open(path).read().strip()
    except OSError as exc:
        return str(exc)
try:
    open("/root-probe", "w")
    ro = False
except OSError:
    ro = True
open("/tmp/probe", "w").write("x")
json.dump(dict(uid=os.getuid(), gid=os.getgid(), cwd=os.getcwd(), capbnd=st["CapBnd"].strip(),
               nonewprivs=st.get("NoNewPrivs", "").strip(), ro=ro,
               memory=cg("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
               memsw=cg("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"),
               pids=cg("/sys/fs/cgroup/pids/pids.max"), cpu=cg("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
               card=card, groups=os.getgroups()),
          open("/cache/box.json", "w"))
hog = b"x" * (400 << 20)
print("survived", len(hog), flush=True)
"""
IPC_LOCK_ONLY = f"{1 << 14:016x}"  # CAP_IPC_LOCK is capability 14


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    for engine in ("docker", "podman"):
        if reason := engines_skip_reason(engine):
            pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("limits-image")
    layer = layer_tar(make_rootfs(tmp / "rootfs"))
    image_id = docker_archive(layer, tmp / "image.tar", "sfl-limits:test", "lim")
    return tmp / "image.tar", image_id


def _box(tmp_path: Path, user: str):
    """The EXL3 lane's [launch.container], less what this machine cannot hold (module docstring)."""
    inv = inventory.load(repo_fleet(tmp_path / "fleet"))
    lim = launch_recipe(inv, "dsv41-flash-exl3-2x").container
    assert (lim.memory, lim.cpus, lim.read_only, lim.cap_drop, lim.ipc, lim.user) == (
        "9g", 6.0, True, ("ALL",), "private", "host"
    )
    return dataclasses.replace(lim, memory="96m", memory_swap="96m", cpus=1.5, user=user)


CARD_GID = 4242  # the stand-in card's group: what --group-add must give the rank


def _card(tmp_path: Path) -> DisplayDevice:
    """The EXL3 lane's [launch.display] on a host whose card is a real character device (the null
    device's numbers, mknod'ed here: this machine has no DRM card) owned by group CARD_GID."""
    inv = inventory.load(repo_fleet(tmp_path / "fleet-display"))
    need = launch_recipe(inv, "dsv41-flash-exl3-2x").display
    assert need is not None and need.target == "/dev/dri/card0"
    card = tmp_path / "dev-dri" / "card0"
    card.parent.mkdir(parents=True)
    os.mknod(card, stat.S_IFCHR | 0o660, os.makedev(1, 3))
    os.chown(card, 0, CARD_GID)
    return need.on(str(card))


def _spec(tmp_path: Path, engine: str, image: str, container) -> LaunchSpec:
    cache = tmp_path / f"cache-{engine}"
    cache.mkdir()
    cache.chmod(0o777)  # a non-root --user writes its report here
    return LaunchSpec(
        lane="limits", host="h1", rank=0, nnodes=1, runtime=engine,
        name=f"sfl-limits-{engine}-{uuid.uuid4().hex[:8]}", image=image,
        argv=("python3", "-c", PROBE), env={"PYTHONUNBUFFERED": "1"},
        binds=(BindMount(cache, "/cache", False, "cache"),), devices=(), port=30000, gpus="none",
        shm_size="2g", state_dir=str(tmp_path / f"state-{engine}"), cache_dir=str(cache),
        receipt_roots=(), labels={"sparkfleet.lane": "limits"}, container=container,
        display=_card(tmp_path / engine),
    )  # fmt: skip


def _wait_exit(rt: ContainerRuntime, rec, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while rt.state(rec).running and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not rt.state(rec).running, "the probe should have been OOM-killed"


def _inside(cache: Path, user: str, container) -> None:
    box = json.loads((cache / "box.json").read_text())
    assert f"{box['uid']}:{box['gid']}" == user
    assert box["cwd"] == container.workdir == "/cache"
    assert box["ro"] is True  # --read-only: the root filesystem refuses a write; /tmp (tmpfs) took one
    assert box["capbnd"] == IPC_LOCK_ONLY  # --cap-drop ALL --cap-add IPC_LOCK
    assert box["nonewprivs"] == "1"  # --security-opt no-new-privileges
    assert int(box["memory"]) == 96 << 20 and int(box["memsw"]) == 96 << 20
    assert box["pids"] == "512" and box["cpu"] == "150000"  # 1.5 CPUs of a 100 ms period
    # [launch.display]: the host's card at /dev/dri/card0, and the rank in the card's group
    assert box["card"] == {"char": True, "rdev": [1, 3], "gid": CARD_GID}, box["card"]
    assert CARD_GID in box["groups"]


def test_docker_runs_the_rank_in_the_declared_box(tmp_path, archive, monkeypatch):
    tar, image = archive
    ns = f"sfl-lim-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    dockerd = Dockerd()
    try:
        dockerd.start(ns)
        dockerd.docker("load", "-i", str(tar))
        monkeypatch.setenv("DOCKER_HOST", dockerd.host)
        container = _box(tmp_path, "host")
        spec = _spec(tmp_path, "docker", image, container)
        rt = ContainerRuntime("docker")
        rec = rt.start(spec)
        _wait_exit(rt, rec)
        info = json.loads(dockerd.docker("inspect", rec.container_id).stdout)[0]
        hc, cfg, state = info["HostConfig"], info["Config"], info["State"]
        assert hc["Memory"] == hc["MemorySwap"] == 96 << 20 and hc["NanoCpus"] == 1_500_000_000
        assert hc["PidsLimit"] == 512 and hc["ReadonlyRootfs"] is True
        assert hc["CapDrop"] == ["ALL"] and hc["CapAdd"] == ["CAP_IPC_LOCK"]
        assert hc["SecurityOpt"] == ["no-new-privileges"] and hc["IpcMode"] == "private"
        assert hc["CgroupnsMode"] == "private" and hc["Runtime"] == "runc"
        assert hc["RestartPolicy"]["Name"] == "no" and hc["ShmSize"] == 2 << 30
        assert hc["Tmpfs"] == {"/tmp": "rw,nosuid,nodev,size=512m"}
        user = f"{os.getuid()}:{os.getgid()}"  # user = "host": the uid:gid sparkfleet runs as here
        assert cfg["User"] == user and cfg["WorkingDir"] == "/cache"
        assert state["OOMKilled"] is True and state["ExitCode"] == 137  # the 9g-style limit holds
        _inside(Path(spec.cache_dir), user, container)
        assert "survived" not in rt.read_log(rec, 0, 1 << 16)[0].decode()
        assert rt.stop(rec, 5).stopped
    finally:
        dockerd.stop()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_podman_runs_the_rank_in_the_declared_box(tmp_path, archive, monkeypatch):
    tar, image = archive
    with podman_loaded(tmp_path / "podman", tar, monkeypatch):
        container = _box(tmp_path, "1234:1234")
        spec = _spec(tmp_path, "podman", image.removeprefix("sha256:"), container)
        rt = ContainerRuntime("podman")
        rec = rt.start(spec)
        _wait_exit(rt, rec)
        inspect = ["podman", "inspect", rec.container_id or "-"]
        info = json.loads(subprocess.run(inspect, capture_output=True, text=True, check=True).stdout)[0]
        hc, cfg, state = info["HostConfig"], info["Config"], info["State"]
        assert hc["Memory"] == hc["MemorySwap"] == 96 << 20 and hc["NanoCpus"] == 1_500_000_000
        assert hc["PidsLimit"] == 512 and hc["ReadonlyRootfs"] is True
        assert hc["CapAdd"] == ["CAP_IPC_LOCK"] and "CAP_CHOWN" in hc["CapDrop"]  # podman lists ALL out
        assert hc["SecurityOpt"] == ["no-new-privileges"] and hc["CgroupMode"] == "private"
        assert info["OCIRuntime"] == "runc" and hc["ShmSize"] == 2 << 30
        assert hc["RestartPolicy"]["Name"] == "no"
        assert hc["Tmpfs"]["/tmp"].startswith("rw,nosuid,nodev,size=512m")
        assert cfg["User"] == "1234:1234" and cfg["WorkingDir"] == "/cache"
        assert state["OOMKilled"] is True or state["ExitCode"] == 137, state
        _inside(Path(spec.cache_dir), "1234:1234", container)
        assert rt.stop(rec, 5).stopped
