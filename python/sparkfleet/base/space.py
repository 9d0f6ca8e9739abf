"""One disk-space preflight for every writer of big files: staging and engram packs.

Why one: the two copies drifted. Staging counted whole filesystem blocks and free inodes, the
engram packer only bytes, so a pack could pass a check that staging would fail and then hit
ENOSPC after its first file. Every writer now asks `check` before byte one, with the same three
terms: bytes rounded up to the filesystem's blocks, inodes, and the host's reserve.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .errors import SpaceError
from .units import human_bytes

GIB = 1024**3


def _statvfs(path: Path) -> os.statvfs_result:
    """statvfs of the filesystem that holds `path`, or would hold it (its nearest existing parent)."""
    probe = Path(path)
    while not probe.exists():
        probe = probe.parent
    return os.statvfs(probe)


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer can still use on the filesystem holding `path` (or its nearest parent)."""
    st = _statvfs(path)
    return st.f_bavail * st.f_frsize


def check(
    path: Path,
    needed: int,
    reserve: int,
    *,
    sizes: Sequence[int] = (),
    inodes: int = 0,
    what: str = "",
    space_hint: str,
    inode_hint: str,
) -> int:
    """Refuse (SpaceError) when the writes do not fit at `path`; return the free bytes otherwise.

    `needed` bytes must fit in free space minus `reserve`. With `sizes` (one per file to write)
    each file counts as whole filesystem blocks: a thousand 1-byte files take a thousand blocks.
    `inodes` (files, links, folders and temps to create) must fit in the free inodes: ten thousand
    small files can exhaust a filesystem that still shows free bytes. `what` names what is
    written (" for ..." in the message) where the path alone does not say it.
    """
    st = _statvfs(path)
    free = st.f_bavail * st.f_frsize
    block = st.f_frsize or 4096
    needed = max(needed, sum(-(-size // block) * block for size in sizes))
    for_what = f" for {what}" if what else ""
    if st.f_files and inodes > st.f_favail:
        raise SpaceError(
            f"not enough inodes on {path}{for_what}: need {inodes} files, links and folders, "
            f"{st.f_favail} inodes free",
            hint=inode_hint,
        )
    # Nothing to write always fits: the reserve is what a writer must leave, and writing nothing
    # leaves it as it is ("need 0 B, reserve 97.7 TiB: NOT ENOUGH" refused a run that copies nothing).
    if needed > 0 and needed > free - reserve:
        raise SpaceError(
            f"not enough space on {path}{for_what}: need {human_bytes(needed)}, free {human_bytes(free)}, "
            f"reserve {human_bytes(reserve)}",
            hint=space_hint,
        )
    return free
