"""Putting one file into place: fill a temp in the destination directory → fsync → verify → os.replace.

Where the bytes come from is a `Fill`: the NAS (in-kernel copy: copy_file_range, else sendfile —
copy_file_range from NFS to a local disk fails with EXDEV — and plain read/write last), or a peer
that already holds the file verified (rsync over SSH, see transport.py). Either way the result is
verified against the source before it gets its final name; a failed verify leaves nothing.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from .. import atomic
from ..digests import compare
from ..errors import SourceError

CHUNK = 64 * 1024 * 1024
_FALLBACK_ERRNOS = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF, errno.EPERM}

Progress = Callable[[int], None]
Fill = Callable[[Path], None]  # writes the complete file at the given (temp) path


def _kernel_copy(src_fd: int, dst_fd: int, size: int, progress: Progress) -> None:
    copied = 0
    mover = "copy_file_range"
    while copied < size:
        want = min(CHUNK, size - copied)
        try:
            if mover == "copy_file_range":
                n = os.copy_file_range(src_fd, dst_fd, want)
            elif mover == "sendfile":
                n = os.sendfile(dst_fd, src_fd, None, want)
            else:
                data = os.read(src_fd, min(want, 8 * 1024 * 1024))
                n = len(data)
                view = memoryview(data)
                while view:
                    view = view[os.write(dst_fd, view) :]
        except OSError as exc:
            if exc.errno in _FALLBACK_ERRNOS and mover != "readwrite" and copied == 0:
                mover = "sendfile" if mover == "copy_file_range" else "readwrite"
                os.lseek(src_fd, 0, os.SEEK_SET)
                os.lseek(dst_fd, 0, os.SEEK_SET)
                continue
            raise
        if n == 0:
            raise SourceError(f"source shrank while copying: got {copied} of {size} bytes")
        copied += n
        progress(n)


def fill_from_path(source: Path, size: int, progress: Progress) -> Fill:
    """A Fill that copies `source` (e.g. on the NAS mount) in the kernel."""

    def fill(tmp: Path) -> None:
        src_fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
        try:
            dst_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, atomic.FILE_MODE)
            try:
                os.fchmod(dst_fd, atomic.FILE_MODE)
                _kernel_copy(src_fd, dst_fd, size, progress)
            finally:
                os.close(dst_fd)
        finally:
            os.close(src_fd)

    return fill


def place_verified(
    final: Path,
    fill: Fill,
    reference: Path,
    verify_mode: str,
    address: tuple[str, str] | None,
) -> None:
    """Fill a temp next to `final`, fsync it, verify it against `reference`, then rename it into place."""
    atomic.ensure_dir(final.parent)
    tmp = atomic.temp_name(final)
    try:
        fill(tmp)
        fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        verdict = compare(tmp, reference, verify_mode, address)
        if not verdict.same:
            raise SourceError(
                f"{final.name}: the bytes received did not verify against {reference} ({verdict.reason})",
                hint="the source changed during the copy or mismatches its content address; check the NAS",
            )
        atomic.publish(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def copy_verified(
    source: Path,
    final: Path,
    size: int,
    verify_mode: str,
    address: tuple[str, str] | None,
    progress: Progress = lambda n: None,
) -> None:
    """Copy `source` to `final` so that `final` either does not change or holds verified bytes."""
    place_verified(final, fill_from_path(source, size, progress), source, verify_mode, address)


def link_verified(existing: Path, source: Path, final: Path, verify_mode: str, address) -> bool:
    """Hardlink an identical local blob into place, only after its content is shown equal to the source."""
    if not compare(existing, source, verify_mode, address).same:
        return False
    tmp = atomic.temp_name(final)
    atomic.ensure_dir(final.parent)
    try:
        os.link(existing, tmp)
    except OSError:
        return False
    try:
        atomic.publish(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True
