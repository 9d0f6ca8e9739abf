"""before_serve: remove the recipe's receipt roots, root-owned leftovers included.

Why: the EXL3 kit's receipt writers are strict-on-exists (mkdir(exist_ok=False) + open('xb')).
Receipts are per run, and yesterday's root-owned `root/worker.json` made a plain `rm -rf` by the
launcher user fail, so every restart died with FileExistsError. Each root is removed as the
current user when that works, else through `sudo -n` and one fixed, root-owned helper
(`sparkfleet-clear-receipts`, never a wildcard `rm` rule); when neither can, the launch stops with
an error naming the root and its owner.

Why so careful: a receipt root lives in the lane's cache dir, which is bound into the container
at /cache. Whatever runs in the container can plant links there (`/cache/x -> /usr`). So the
walk from the cache dir down to a receipt root never follows a link (each component opened
O_NOFOLLOW|O_DIRECTORY), and the removal is fd-based (shutil.rmtree with dir_fd, which never
follows links either). The sudo helper removes only entries below a directory the calling user
owns, so the sudoers rule cannot be bent into deleting system files.
"""

from __future__ import annotations

import errno
import os
import pwd
import shutil
import stat
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..base.errors import ExitCode, SparkfleetError

HELPER_NAME = "sparkfleet-clear-receipts"
# Where the root-owned helper is installed (the Nix profile, or `install -o root` on dgx-os).
HELPER = os.environ.get("SPARKFLEET_RECEIPT_HELPER", f"/usr/local/sbin/{HELPER_NAME}")
SUDO = ("sudo", "-n", HELPER)


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


def _check_path(path: Path, base: Path | None) -> None:
    text = str(path)
    if not path.is_absolute() or text != os.path.normpath(text) or len(path.parts) < 3:
        raise ReceiptError(
            f"refusing to remove receipt root {path}: not a normalized absolute path at least two levels deep"
        )
    if base is not None and PurePosixPath(base) not in PurePosixPath(path).parents:
        raise ReceiptError(f"refusing to remove receipt root {path}: not inside the lane's cache dir {base}")


def _open_parent(path: Path, base: Path | None) -> int:
    """An fd of `path`'s parent, reached from `base` (or `/`) without following any link on the way."""
    start = base if base is not None else Path("/")
    fd = os.open(start, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in path.parent.relative_to(start).parts:
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise ReceiptError(
                        f"refusing to remove receipt root {path}: {part!r} on the way there is a link "
                        "or not a directory (planted inside the cache?)",
                        hint="inspect the lane's cache dir; sparkfleet never follows links while deleting",
                        exit_code=ExitCode.REFUSED,
                    ) from None
                raise
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove_at(parent_fd: int, name: str) -> None:
    """Remove `name` inside `parent_fd`: a link or file is unlinked, a directory removed fd-based."""
    st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=parent_fd)
    else:
        os.unlink(name, dir_fd=parent_fd)


def remove_confined(path: Path, base: Path | None) -> bool:
    """Remove `path` (reached from `base` without following links); False when it was absent."""
    _check_path(path, base)
    try:
        parent_fd = _open_parent(path, base)
    except FileNotFoundError:
        return False
    try:
        _remove_at(parent_fd, path.name)
    except FileNotFoundError:
        return False
    finally:
        os.close(parent_fd)
    return True


def _lstat(path: Path, base: Path | None) -> os.stat_result | None:
    try:
        parent_fd = _open_parent(path, base)
    except FileNotFoundError:
        return None
    try:
        return os.stat(path.name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    finally:
        os.close(parent_fd)


def clear_receipt_root(path: Path, sudo: Sequence[str] = SUDO, base: Path | None = None) -> ReceiptCleanup:
    """Remove one receipt root (a directory or a file); a symlink is removed, never followed.

    `base` is the lane's cache dir: the root must be inside it and nothing below it is followed.
    """
    path = Path(path)
    base = Path(base) if base is not None else None
    _check_path(path, base)
    st = _lstat(path, base)
    if st is None:
        return ReceiptCleanup(str(path), False, None, "absent")
    owner = _owner(st)
    try:
        remove_confined(path, base)
        return ReceiptCleanup(str(path), True, owner, "removed")
    except PermissionError as exc:
        first_error = str(exc)
    if os.geteuid() == 0:
        raise ReceiptError(f"cannot remove receipt root {path} (owner {owner}) even as root: {first_error}")
    argv = [*sudo, "--base", str(base or path.parent), "--", str(path)]
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        sudo_error = cp.stderr.strip() or f"exit {cp.returncode}"
        ok = cp.returncode == 0 and _lstat(path, base) is None
    except OSError as exc:  # not installed, or a PATH entry this user may not search
        ok, sudo_error = False, f"cannot run {sudo[0]}: {exc.strerror}"
    if ok:
        return ReceiptCleanup(str(path), True, owner, "sudo")
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = f"#{os.geteuid()}"  # sudoers' spelling of a uid without a name
    raise ReceiptError(
        f"cannot remove receipt root {path} (owner {owner}): {first_error}; `sudo -n` failed: {sudo_error}",
        hint=(
            f"install the root-owned helper {HELPER} (from the sparkfleet Nix package or a root-owned "
            f"install) and allow exactly it with one sudoers rule: `{user} ALL=(root) NOPASSWD: {HELPER}`"
            f" — or remove {path} once as root"
        ),
    )


def clear_receipts(
    paths: Sequence[str], sudo: Sequence[str] = SUDO, base: str | None = None, state_dir: str | None = None
) -> list[ReceiptCleanup]:
    """Clear every receipt root; the first one that cannot be removed stops the serve.

    `state_dir`: the node checks again that the cache dir (`base`) lies strictly inside it — the
    spec arrived over the wire, and this is the code that deletes.
    """
    if state_dir is not None and paths:
        cache = os.path.normpath(base or "/")
        if base is None or cache != base or PurePosixPath(state_dir) not in PurePosixPath(cache).parents:
            raise ReceiptError(
                f"refusing to clear receipts: cache dir {base} is not inside the state dir {state_dir}",
                exit_code=ExitCode.REFUSED,
            )
    return [clear_receipt_root(Path(p), sudo, Path(base) if base else None) for p in paths]


def helper_main(argv: Sequence[str] | None = None) -> int:
    """`sparkfleet-clear-receipts --base DIR -- PATH...`, run as root through one exact sudoers rule.

    It removes PATH only when DIR is a directory owned by the user who ran sudo (SUDO_UID), PATH is
    inside it, and no link is followed below DIR: a user can clear what their own containers left
    in their own cache dir, and nothing else.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4 or args[0] != "--base" or args[2] != "--":
        print(f"usage: {HELPER_NAME} --base DIR -- PATH...", file=sys.stderr)
        return ExitCode.USAGE
    base, paths = Path(args[1]), [Path(p) for p in args[3:]]
    caller = int(os.environ.get("SUDO_UID", os.getuid()))
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            owner = os.fstat(fd).st_uid
        finally:
            os.close(fd)
        if owner != caller:
            print(
                f"{HELPER_NAME}: {base} is owned by uid {owner}, not by the caller (uid {caller})",
                file=sys.stderr,
            )
            return ExitCode.REFUSED
        for path in paths:
            remove_confined(path, base)
    except SparkfleetError as exc:
        print(f"{HELPER_NAME}: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"{HELPER_NAME}: {exc}", file=sys.stderr)
        return ExitCode.SHORTFALL
    return ExitCode.OK
