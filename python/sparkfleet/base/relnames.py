"""Names that someone else wrote (a kit's manifest, a tar member), taken only as plain relative paths.

Why: a kit checkout, its manifests and its tars are the kit author's (or whoever changed them), and
every name in them is joined onto a directory sparkfleet then reads, hashes or writes. A name with
`..`, an absolute name, or a link on its path would take that read or write out of the directory
(a manifest naming `runtime/../../../etc/shadow` had its hash printed). `plain_relative` is the one
test of the name itself (as release/bootstrap.py relative() and portable_node.py cache_inputs() of
the EXL3 kit test theirs); `inside` adds where it lands on this filesystem, links resolved.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath


def plain_relative(name: object) -> bool:
    """A plain relative POSIX path: not empty, not absolute, no `..`, `.` or empty parts, no NUL,
    newline or backslash, and written as its normal form (so two spellings never name one file)."""
    if not isinstance(name, str) or not name or name == "." or any(c in name for c in "\0\n\r\\"):
        return False
    p = PurePosixPath(name)
    return not p.is_absolute() and ".." not in p.parts and str(p) == name


def inside(root: Path, name: str) -> Path | None:
    """`root / name` where `name` is plain_relative and the path, every link on it resolved, stays
    under `root` (itself resolved); None where it would leave. Whether it exists is the caller's
    question: a missing path inside `root` is returned."""
    if not plain_relative(name):
        return None
    base = Path(os.path.realpath(root))
    path = Path(root) / name
    real = Path(os.path.realpath(path))
    return path if real == base or real.is_relative_to(base) else None
