"""before_serve: remove the recipe's receipt roots, root-owned leftovers included.

Why: the EXL3 kit's receipt writers are strict-on-exists (mkdir(exist_ok=False) + open('xb')).
Receipts are per run, and yesterday's root-owned `root/worker.json` made a plain `rm -rf` by the
launcher user fail, so every restart died with FileExistsError. Each root is removed as the
current user when that works, else with `sudo -n` (never a prompt); when neither can, the launch
stops with an error naming the root and its owner.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import SparkfleetError

SUDO = ("sudo", "-n")


class ReceiptError(SparkfleetError):
    """A receipt root could not be removed."""


@dataclass(frozen=True)
class ReceiptCleanup:
    """What happened to one receipt root."""

    path: str
    existed: bool
    owner: str | None
    method: str  # "absent" | "removed" | "sudo"


def _owner(st: os.stat_result) -> str:
    try:
        return pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        return f"uid {st.st_uid}"


def _check_path(path: Path) -> None:
    if not path.is_absolute() or path != Path(os.path.normpath(path)) or len(path.parts) < 3:
        raise ReceiptError(
            f"refusing to remove receipt root {path}: not a normalized absolute path at least two levels deep"
        )


def _rm(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink()
    else:
        shutil.rmtree(path)


def clear_receipt_root(path: Path, sudo: Sequence[str] = SUDO) -> ReceiptCleanup:
    """Remove one receipt root (a directory or a file); a symlink is removed, never followed."""
    path = Path(path)
    _check_path(path)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return ReceiptCleanup(str(path), False, None, "absent")
    owner = _owner(st)
    try:
        _rm(path)
        return ReceiptCleanup(str(path), True, owner, "removed")
    except PermissionError as exc:
        first_error = str(exc)
    if os.geteuid() == 0:
        raise ReceiptError(f"cannot remove receipt root {path} (owner {owner}) even as root: {first_error}")
    try:
        cp = subprocess.run(
            [*sudo, "rm", "-rf", "--one-file-system", "--", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        sudo_error = cp.stderr.strip() or f"exit {cp.returncode}"
        ok = cp.returncode == 0 and not os.path.lexists(path)
    except OSError as exc:  # not installed, or a PATH entry this user may not search
        ok, sudo_error = False, f"cannot run {sudo[0]}: {exc.strerror}"
    if ok:
        return ReceiptCleanup(str(path), True, owner, "sudo")
    raise ReceiptError(
        f"cannot remove receipt root {path} (owner {owner}): {first_error}; `sudo -n` failed: {sudo_error}",
        hint=f"allow the launcher user passwordless `sudo rm` of {path.parent}/*, or remove it once as root",
    )


def clear_receipts(paths: Sequence[str], sudo: Sequence[str] = SUDO) -> list[ReceiptCleanup]:
    """Clear every receipt root; the first one that cannot be removed stops the serve."""
    return [clear_receipt_root(Path(p), sudo) for p in paths]
