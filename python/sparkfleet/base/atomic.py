"""The one way sparkfleet writes: temp name in the same directory, fsync, os.replace.

Nothing partial is ever visible under a final name, and a rerun after `kill -9` finds at worst a
temp file carrying TEMP_MARK, which `sweep_temps` removes. Links are replaced the same way
(temp link + os.replace), so an existing link never raises EEXIST (the copytree lesson).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import SparkfleetError

TEMP_MARK = ".sf-tmp-"
_TEMP_NAME = re.compile(r"^\..+" + re.escape(TEMP_MARK) + r"[0-9a-f]{8}\Z", re.DOTALL)


NAME_MAX = 255  # bytes per name on every filesystem we write to


def temp_name(final: Path) -> Path:
    """A hidden sibling of `final` that only sparkfleet's sweep will ever delete.

    A 240–255-byte final name must still get a temp that fits NAME_MAX: the stem is shortened
    (by bytes, keeping non-UTF-8 names intact as bytes) rather than failing with ENAMETOOLONG.
    """
    suffix = f"{TEMP_MARK}{os.urandom(4).hex()}".encode()  # what secrets.token_hex does, unimported
    stem = os.fsencode(final.name)
    room = NAME_MAX - len(suffix) - 1
    return final.with_name(os.fsdecode(b"." + stem[:room] + suffix))


def is_temp_name(name: str) -> bool:
    return _TEMP_NAME.match(name) is not None


DIR_MODE = 0o755
FILE_MODE = 0o644


def ensure_dir(path: Path, mode: int = DIR_MODE) -> None:
    """mkdir -p with an explicit mode on every directory it creates, whatever the caller's umask."""
    path = Path(path)
    if path.is_dir():
        return
    missing = []
    probe = path
    while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
        except FileExistsError:
            continue
        os.chmod(d, mode)  # mkdir's mode is masked by the umask; the hub's must not be
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)  # raises the right error (a file in the way, ...)


def writable_dir(folder: Path, what: str, hint: str) -> Path:
    """Refuse, before any work, a folder that files will be written into but cannot be (leaves
    nothing made): `what` names it in the error ("reports folder", "--out").

    Why before: a bench, a scrape-target writer or a service found out only after its work (or
    never, in a background loop). A Nix store path is read-only whatever its modes say (`nix run`
    starts sparkfleet with the flake source as its fleet root).
    """
    resolved = folder.absolute()
    if resolved.parts[:3] == ("/", "nix", "store"):
        raise SparkfleetError(f"{what} {folder} is inside the Nix store (read-only)", hint=hint)
    existing = next((p for p in (resolved, *resolved.parents) if p.exists()), Path("/"))
    if not existing.is_dir():
        raise SparkfleetError(f"{what} {folder}: {existing} is not a directory", hint=hint)
    if not os.access(existing, os.W_OK):
        raise SparkfleetError(f"{what} {folder} is read-only ({existing} cannot be written)", hint=hint)
    # access() answers yes to root everywhere, and a filesystem such as /proc takes no new entry
    # whatever its modes say: make the missing folders, then take them away again.
    missing = [p for p in (resolved, *resolved.parents) if not p.exists()]
    made = []
    try:
        for p in reversed(missing):
            p.mkdir()
            made.append(p)
    except OSError as exc:
        why = f"{what} {folder} cannot be made ({exc.strerror}: {exc.filename})"
        raise SparkfleetError(why, hint=hint) from None
    finally:
        for p in reversed(made):
            p.rmdir()
    return folder


def _fsync_open(path: str | Path, flags: int) -> None:
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a rename or new entry in `path` durable."""
    _fsync_open(path, os.O_DIRECTORY)


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under `root` (links are not followed): a tree another tool
    wrote (a git checkout) is durable before it is renamed to its final name."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                _fsync_open(path, os.O_NOFOLLOW)
        fsync_dir(Path(dirpath))


@contextmanager
def temp_file(final: Path, mode: int = FILE_MODE) -> Iterator[tuple[int, Path]]:
    """Yield (fd, temp path) next to `final`; on error the temp is removed, on success left for `publish`."""
    ensure_dir(final.parent)
    tmp = temp_name(final)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # the mode asked for, not the mode the caller's umask leaves
        yield fd, tmp
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)


def publish(tmp: Path, final: Path) -> None:
    """Atomically move a fully written and fsynced temp into place, and make that durable."""
    os.replace(tmp, final)
    fsync_dir(final.parent)


def write_bytes(final: Path, data: bytes, mode: int = FILE_MODE) -> bool:
    """Write `data` to `final` atomically with exactly `mode`.

    Returns False (and writes nothing) if it already holds `data`; a looser mode on such a file is
    still tightened (an env file holding a secret must not stay world-readable because it was).
    """
    try:
        if final.is_file() and not final.is_symlink() and final.read_bytes() == data:
            if final.lstat().st_mode & 0o7777 != mode:
                os.chmod(final, mode)
            return False
    except OSError:
        pass
    with temp_file(final, mode) as (fd, tmp):
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    publish(tmp, final)
    return True


def create_new(final: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """Write `data` to `final`, which must not exist yet (FileExistsError, nothing written if it does).

    The complete, fsynced temp is linked into place (link(2) never replaces a name), so of two
    writers racing for one name exactly one wins, and nobody ever reads a partial file there.
    """
    with temp_file(final, mode) as (fd, tmp):
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    try:
        os.link(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(final.parent)


def symlink(final: Path, target: str) -> bool:
    """Point `final` at `target` atomically. Returns False if it already does (nothing written)."""
    try:
        if os.readlink(final) == target:
            return False
    except (FileNotFoundError, OSError):
        pass
    if final.is_dir() and not final.is_symlink():
        raise IsADirectoryError(f"a directory stands where a link belongs: {final}")
    ensure_dir(final.parent)
    tmp = temp_name(final)
    os.symlink(target, tmp)
    try:
        publish(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


def sweep_temps(root: Path) -> list[Path]:
    """Remove temps left by an interrupted run under `root` (ours only: TEMP_MARK names)."""
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            if is_temp_name(name):
                path = Path(dirpath, name)
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed
