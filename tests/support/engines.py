"""Real container engines for tests: a dockerd per test host, podman with its own config, and images
built here from this machine's own files (no registry, no network).

* `make_rootfs`: a minimal root filesystem — dash as /bin/sh, cat/sleep/env, this machine's
  python3 with its standard library, and sparkfleet's stdlib-only demo OpenAI server under /app —
  with every shared library `ldd` names copied to the same path.
* `docker_archive`: the rootfs as a one-layer docker-archive (manifest.json + config + layer),
  the format `nix build .#mia-tp4-image`'s stream script prints; `stream_script` wraps one in an
  executable that prints it, as `./result` does.
* `Dockerd`: `dockerd --iptables=false --bridge=none` on a private socket, data root, exec root and
  pidfile, started inside a host's network namespace and stopped by its PID.
* `podman_env`: CONTAINERS_CONF/CONTAINERS_STORAGE_CONF for podman 4.3 with runc, cgroupfs, no
  default ulimits and storage under a temp dir.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sparkfleet

ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
_SKIP_STDLIB = {"test", "site-packages", "dist-packages", "__pycache__", "idlelib", "tkinter",
                "ensurepip", "lib2to3", "pydoc_data", "turtledemo", "unittest"}  # fmt: skip


def engines_skip_reason(engine: str) -> str | None:
    if os.geteuid() != 0:
        return "needs root (container engines)"
    needed = {"docker": ("dockerd", "docker"), "podman": ("podman", "runc")}[engine]
    for tool in (*needed, "ldd"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found (Debian packages docker.io, podman, runc)"
    return None


def _libs(binaries: list[Path]) -> set[Path]:
    out: set[Path] = set()
    for b in binaries:
        cp = subprocess.run(["ldd", str(b)], capture_output=True, text=True)
        for m in re.finditer(r"(/\S+\.so[^\s]*)", cp.stdout):
            out.add(Path(m.group(1)))
    return out


def _copy(src: Path, root: Path, dest: str | None = None) -> None:
    target = root / (dest or str(src)).lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(os.path.realpath(src), target)


def make_rootfs(root: Path) -> Path:
    """A minimal rootfs that can run `sh -c` and `python3 -m sparkfleet.demo.openai_server`."""
    # This interpreter (not a `python3` on PATH, which may be a pyenv shell shim), copied to its own
    # path so it finds its stdlib where it was built to look; /usr/bin/python3 points at it.
    python = Path(os.path.realpath(sys.executable))
    where = "import os; print(os.path.dirname(os.__file__))"
    stdlib = Path(subprocess.check_output([str(python), "-c", where], text=True).strip())
    tools = {"/bin/sh": shutil.which("dash") or "/bin/sh", "/bin/cat": shutil.which("cat"),
             "/bin/sleep": shutil.which("sleep"), "/usr/bin/env": shutil.which("env"),
             str(python): str(python)}  # fmt: skip
    for dest, src in tools.items():
        _copy(Path(str(src)), root, dest)
    (root / "usr/bin/python3").symlink_to(python)
    for dirpath, dirnames, filenames in os.walk(stdlib):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_STDLIB]
        for f in filenames:
            _copy(Path(dirpath) / f, root)
    dynload = [p for p in (stdlib / "lib-dynload").glob("*.so")]
    for lib in _libs([Path(str(s)) for s in tools.values()] + dynload):
        _copy(lib, root)
    pkg = Path(sparkfleet.__file__).parent
    for rel in ("__init__.py", "demo/__init__.py", "demo/openai_server.py"):
        _copy(pkg / rel, root, f"/app/sparkfleet/{rel}")
    for d in ("tmp", "proc", "dev", "sys", "etc", "cache"):
        (root / d).mkdir(exist_ok=True)
    (root / "tmp").chmod(0o1777)
    return root


def _layer_tar(rootfs: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(rootfs.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(rootfs)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if info.isfile():
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)
    return buf.getvalue()


def layer_tar(rootfs: Path) -> bytes:
    """`rootfs` as one layer (a tar with zeroed owners and times)."""
    return _layer_tar(rootfs)


def docker_archive(layer: bytes, out: Path, tag: str, build: str) -> str:
    """Write a one-layer docker-archive; return its image ID (sha256 of the config, which names `build`)."""
    diff_id = hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": ARCH,
            "os": "linux",
            "config": {"Env": ["PATH=/usr/bin:/bin", "PYTHONPATH=/app"], "WorkingDir": "/",
                       "Labels": {"sparkfleet.test.build": build}},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
            "history": [{"created_by": f"sparkfleet tests ({build})"}],
        },
        sort_keys=True,
    ).encode()  # fmt: skip
    config_id = hashlib.sha256(config).hexdigest()
    manifest = json.dumps([{"Config": f"{config_id}.json", "RepoTags": [tag],
                            "Layers": [f"{diff_id}/layer.tar"]}]).encode()  # fmt: skip
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in ((f"{diff_id}/layer.tar", layer), (f"{config_id}.json", config),
                           ("manifest.json", manifest)):  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return f"sha256:{config_id}"


def stream_script(archive: Path, path: Path) -> Path:
    """An executable printing the archive on stdout, the shape of `nix build .#mia-tp4-image`'s result."""
    path.write_text(f"#!/bin/sh\nexec cat '{archive}'\n")
    path.chmod(0o755)
    return path


class Dockerd:
    """A private dockerd inside `netns`, reached at `self.host` (unix socket); stopped by PID."""

    def __init__(self) -> None:
        """Choose the paths (the socket is known before the namespace exists); `start` runs it."""
        # Short paths: containerd's sockets live under the exec root (108-byte sun_path limit).
        self.dir = Path(tempfile.mkdtemp(prefix="sfd-", dir="/tmp"))
        self.sock = self.dir / "docker.sock"
        self.host = f"unix://{self.sock}"
        self.log = self.dir / "dockerd.log"
        self.proc: subprocess.Popen | None = None

    def start(self, netns: str) -> None:
        # nsenter --net, not `ip netns exec`: the latter remounts /sys and hides the cgroup mounts.
        argv = ["nsenter", f"--net=/run/netns/{netns}", "dockerd", "--iptables=false", "--ip6tables=false",
                "--bridge=none", "-H", self.host, "--data-root", str(self.dir / "data"),
                "--exec-root", str(self.dir / "x"), "--pidfile", str(self.dir / "docker.pid")]  # fmt: skip
        with open(self.log, "wb") as log:
            # nsenter execs dockerd: the Popen pid is dockerd's own.
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dockerd exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            ok = subprocess.run(["docker", "-H", self.host, "version"], capture_output=True).returncode == 0
            if ok:
                return
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"dockerd did not answer on {self.sock}: {self.log.read_text()[-2000:]}")

    def docker(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "-H", self.host, *args], capture_output=True, text=True, check=check)

    def stop(self) -> None:
        """Remove every container this daemon runs (all are the test's), then SIGTERM it by PID."""
        if self.proc is not None and self.proc.poll() is None:
            ids = self.docker("ps", "-aq", check=False).stdout.split()
            if ids:
                self.docker("rm", "-f", *ids, check=False)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for mnt in sorted((m for m in _mounts() if m.startswith(str(self.dir))), reverse=True):
            subprocess.run(["umount", "-l", mnt], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def _mounts() -> list[str]:
    return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]


def podman_env(base: Path) -> dict[str, str]:
    """Env that makes podman 4.3 work here and keeps all its state under `base`."""
    base.mkdir(parents=True, exist_ok=True)
    conf, storage = base / "containers.conf", base / "storage.conf"
    conf.write_text(
        "[containers]\n"
        "default_ulimits = []\n"  # the packaged default nofile exceeds this machine's hard limit
        "[engine]\n"
        'cgroup_manager = "cgroupfs"\n'
        'runtime = "runc"\n'
        'events_logger = "file"\n'
        f'events_logfile_path = "{base}/events.log"\n'
        f'tmp_dir = "{base}/tmp"\n'
        f'static_dir = "{base}/static"\n'
        f'volume_path = "{base}/volumes"\n'
        "[network]\n"
        f'network_config_dir = "{base}/net"\n'
    )
    storage.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{base}/graph"\nrunroot = "{base}/run"\n')
    return {"CONTAINERS_CONF": str(conf), "CONTAINERS_STORAGE_CONF": str(storage)}


def podman_cleanup(env: dict[str, str], base: Path) -> None:
    """Remove every container and image in this private podman store, then the store itself."""
    full = {**os.environ, **env}
    subprocess.run(["podman", "rm", "-af", "-t", "0"], env=full, capture_output=True)
    subprocess.run(["podman", "rmi", "-af"], env=full, capture_output=True)
    for mnt in sorted((m for m in _mounts() if m.startswith(str(base))), reverse=True):
        subprocess.run(["umount", "-l", mnt], capture_output=True)
    shutil.rmtree(base, ignore_errors=True)


@contextmanager
def podman_loaded(base: Path, archive: Path, mp) -> Iterator[dict[str, str]]:
    """podman with its state under `base` (podman_env, set in the test's env through the pytest
    MonkeyPatch `mp`) holding the image of `archive`; its containers, images and store removed after."""
    env = podman_env(base)
    try:
        for k, v in env.items():
            mp.setenv(k, v)
        subprocess.run(["podman", "load", "-i", str(archive)], check=True, capture_output=True)
        yield env
    finally:
        podman_cleanup(env, base)
