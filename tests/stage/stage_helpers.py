"""Helpers for staging tests (requests for the fixture hub, tree snapshots, link checks)."""

from __future__ import annotations

import os
from pathlib import Path

from sparkfleet.demo.hubfixture import DRAFTER_REPO, WEIGHTS_REPO, HubFixture
from sparkfleet.stage.plan import StageRequest


def weights_request(nas: HubFixture, local: Path, revision: str = "main", **kw) -> StageRequest:
    kw.setdefault("exclude", ("page15/*",))
    return StageRequest(nas.root, local, WEIGHTS_REPO, revision, **kw)


def drafter_request(nas: HubFixture, local: Path) -> StageRequest:
    return StageRequest(nas.root, local, DRAFTER_REPO, "main")


def tree_state(root: Path) -> dict[str, tuple]:
    """Every path under `root` → (inode, mtime_ns, link text or size): detects any rewrite.

    `.locks/` is left out: the stage lock records its holder's PID on every run by design.
    """
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root and ".locks" in dirnames:
            dirnames.remove(".locks")
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            extra = os.readlink(path) if path.is_symlink() else st.st_size
            state[str(path.relative_to(root))] = (st.st_ino, st.st_mtime_ns, extra)
    return state


def all_links_resolve_inside(root: Path) -> list[str]:
    """Links under `root` whose final target is missing or outside `root` (should be none)."""
    bad = []
    real_root = os.path.realpath(root)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            if path.is_symlink():
                target = os.path.realpath(path)
                if not os.path.exists(target) or not target.startswith(real_root + os.sep):
                    bad.append(f"{path} -> {target}")
    return bad
