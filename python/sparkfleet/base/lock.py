"""Locks: one stage run per local hub at a time, and the one way every other writer serialises.

Every lock in the package is a `flock` on a file opened by `open_lock_file` (no planted link
followed): `exclusive` refuses after a wait and names the holder, `held` queues behind the holder.

The stage lock is a `flock` on `<local hub>/.locks/sparkfleet-stage.lock`: on local NVMe, where
flock works (unlike the NAS), and inside `.locks/`, which huggingface_hub's own cache scan skips.
The holder writes its PID into the file so the loser can say who holds it. The kernel drops the
lock when the holder dies, `kill -9` included, so a stale lock never blocks a rerun.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from .atomic import ensure_dir
from .errors import ExitCode, LockBusyError, SparkfleetError

LOCK_PATH = Path(".locks", "sparkfleet-stage.lock")


def _refuse(path: Path, why: str) -> SparkfleetError:
    return SparkfleetError(
        f"refusing the stage lock {path}: {why}",
        hint=f"something planted it; inspect and remove {path} (and {path.parent} if it is a link)",
        exit_code=ExitCode.REFUSED,
    )


def open_lock_file(path: Path) -> int:
    """Open (or create) the lock file without following a planted link at `.locks` or at the file.

    Why: the lock is truncated and gets our PID written into it; following a link there would
    truncate any file the stager may write (a weight shard, a config) — so the directory is opened
    O_NOFOLLOW|O_DIRECTORY, the file O_NOFOLLOW relative to it, and it must be a regular file we own.
    """
    ensure_dir(path.parent)
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise _refuse(path, f"{path.parent} is not a plain directory ({exc.strerror})") from None
    try:
        fd = os.open(
            path.name,
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
            0o644,
            dir_fd=dir_fd,
        )
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise _refuse(path, "it is a symbolic link") from None
        if exc.errno == errno.EISDIR:
            raise _refuse(path, "it is a directory") from None
        raise
    finally:
        os.close(dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        kind = "a regular file" if stat.S_ISREG(st.st_mode) else "not a regular file"
        raise _refuse(path, f"{kind} owned by uid {st.st_uid}, not by us (uid {os.geteuid()})")
    return fd


@contextmanager
def exclusive(path: Path, what: str, hint: str, wait_seconds: float = 0.0) -> Iterator[Path]:
    """Hold the flock at `path`; wait up to `wait_seconds`, then raise LockBusyError (exit 75):
    "another <what> (pid N) holds <path>". The holder's PID is written into the file for that line."""
    fd = open_lock_file(path)
    try:
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                    raise LockBusyError(f"another {what} (pid {holder}) holds {path}", hint=hint) from None
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)


@contextmanager
def held(path: Path) -> Iterator[None]:
    """Hold the flock at `path`, waiting as long as the holder takes (writers that queue rather
    than refuse: a second preparer, a second key edit, a second generation writer)."""
    fd = open_lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def hub_lock(dest_hub: Path, wait_seconds: float = 0.0) -> AbstractContextManager[Path]:
    """Hold the hub's stage lock; wait up to `wait_seconds`, then raise LockBusyError naming the holder."""
    hint = "wait for it to finish, or pass --wait SECONDS to queue behind it"
    return exclusive(dest_hub / LOCK_PATH, "stage run", hint, wait_seconds)
