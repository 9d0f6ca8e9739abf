"""What each staged file looked like on disk when staging verified it, so that `verify` can tell
cheaply which files changed since.

Why: the default verify samples each file (size + 16 windows), so a byte changed between the
windows of a 4 GiB shard passes it, and reading every byte of a 150 GB model on every check is
what the sample avoids. But any write through the filesystem moves the file's ctime, which no
program can set back. Staging records (device, inode, size, mtime_ns, ctime_ns) of every file it
published or kept, after the last write of the run; a sampled verify reads in full every file
whose identity differs from its record. What this cannot see: a change below the filesystem (a
failing disk) or in a file staged before the record existed; `--full` reads every byte for those.

A record is a hint, never trusted to pass a file: a missing, unreadable or planted record only
means the sampled check alone, exactly as without one. It is state, not content, so it lives in
the hub's `.locks/` beside the stage lock (which huggingface_hub's cache scan skips, and whose
folder the stage lock refuses when it is a planted link), written temp + fsync + rename, and only
when it changed: a rerun on an unchanged tree writes nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..base import atomic
from ..base.lock import LOCK_PATH

SCHEMA = "sparkfleet.staged/1"
FOLDER = LOCK_PATH.parent / "sparkfleet-staged"  # <hub>/.locks/sparkfleet-staged/<repo folder>/

Identity = tuple[int, int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns


def record_path(dest_hub: Path, repo_dir: str, commit: str) -> Path:
    return dest_hub / FOLDER / repo_dir / f"{commit}.json"


def identity(path: Path) -> Identity | None:
    """The file's identity now (the file itself, not a link to it), or None if it is not there."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def write(dest_hub: Path, repo_dir: str, commit: str, rels: list[str]) -> Path:
    """Record the identity of each hub-relative file in `rels` that exists (after the run's writes)."""
    files = {rel: list(ident) for rel in sorted(set(rels)) if (ident := identity(dest_hub / rel))}
    path = record_path(dest_hub, repo_dir, commit)
    text = json.dumps({"schema": SCHEMA, "commit": commit, "files": files}).encode()
    try:
        unchanged = path.read_bytes() == text
    except OSError:
        unchanged = False
    if not unchanged:
        atomic.write_bytes(path, text)
    return path


def read(dest_hub: Path, repo_dir: str, commit: str) -> dict[str, Identity]:
    """rel -> recorded identity; {} when there is no record or it is not one (never an error)."""
    try:
        doc = json.loads(record_path(dest_hub, repo_dir, commit).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("commit") != commit:
        return {}
    files = doc.get("files")
    if not isinstance(files, dict):
        return {}
    out: dict[str, Identity] = {}
    for rel, ident in files.items():
        if isinstance(ident, list) and len(ident) == 5 and all(type(x) is int for x in ident):
            out[rel] = (ident[0], ident[1], ident[2], ident[3], ident[4])
    return out
