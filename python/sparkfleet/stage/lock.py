"""One stage run per local hub at a time.

A `flock` on `<local hub>/.locks/sparkfleet-stage.lock`: on local NVMe, where flock works (unlike
the NAS), and inside `.locks/`, which huggingface_hub's own cache scan skips. The holder writes its
PID into the file so the loser can say who holds it. The kernel drops the lock when the holder
dies, `kill -9` included, so a stale lock never blocks a rerun.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import LockBusyError

LOCK_PATH = Path(".locks", "sparkfleet-stage.lock")


@contextmanager
def hub_lock(dest_hub: Path, wait_seconds: float = 0.0) -> Iterator[Path]:
    """Hold the hub's stage lock; wait up to `wait_seconds`, then raise LockBusyError naming the holder."""
    path = dest_hub / LOCK_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                    raise LockBusyError(
                        f"another stage run (pid {holder}) holds {path}",
                        hint="wait for it to finish, or pass --wait SECONDS to queue behind it",
                    ) from None
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)
