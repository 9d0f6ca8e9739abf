"""Node-local boot caches (JIT kernels, autotune results), keyed by image x model revision x world.

Why: a cold boot of the TP4 lane compiles and autotunes for minutes; a warm one reuses what the
last boot left, but only if it is the same image, the same checkpoint and the same world shape
(a cache from another shape is at best useless and at worst wrong). The caches live on the node's
own disk under its state dir, never on the NAS: four ranks writing JIT caches over NFS is slow and
racy. The engines find them through their usual env vars (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR,
...), each pointed at its own subdirectory of the keyed cache.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..base.errors import ExitCode, SparkfleetError

# Filesystems that are not the node's own disk.
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "fuse.sshfs", "9p", "ceph", "glusterfs", "lustre")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def cache_key(image_digest: str | None, model_revision: str | None, tp: int, ep: int, pad: int,
              nnodes: int) -> str:  # fmt: skip
    """`<image>-<revision>-tp<tp>ep<ep>pad<pad>n<nnodes>`: what a cache is valid for."""
    image = (image_digest or "noimage").split(":")[-1][:16]
    rev = _UNSAFE.sub("_", model_revision or "norev")[:16]
    return f"{image}-{rev}-tp{tp}ep{ep}pad{pad}n{nnodes}"


def env_subdir(name: str) -> str:
    """TORCHINDUCTOR_CACHE_DIR -> torchinductor: one subdirectory per cache."""
    return (
        name.lower().removesuffix("_dir").removesuffix("_path").removesuffix("_base").removesuffix("_cache")
    )


def fs_type(path: Path, mounts: Path = Path("/proc/self/mounts")) -> str | None:
    """The filesystem type of the mount holding `path` (longest mount point prefix)."""
    best, kind = "", None
    try:
        text = mounts.read_text()
    except OSError:
        return None
    target = str(path.resolve())
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        if (target == mnt or target.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
            best, kind = mnt, parts[2]
    return kind


def cache_state(spec) -> dict:
    """Refuse a cache on a network filesystem; create it; say whether this boot starts warm or cold."""
    root = Path(spec.boot_cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    kind = fs_type(root)
    if kind in NETWORK_FS:
        raise SparkfleetError(
            f"{spec.host}: boot cache {root} is on {kind}, not on the node's own disk",
            hint="boot caches must be node-local: set the host's state_dir on its NVMe",
            exit_code=ExitCode.REFUSED,
        )
    files = sum(1 for p in root.rglob("*") if p.is_file())
    return {"dir": str(root), "key": spec.boot_cache_key, "fs": kind, "files": files, "warm": files > 0}
