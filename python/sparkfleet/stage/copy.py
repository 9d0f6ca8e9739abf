"""Putting one file into place: fill a temp in the destination directory → fsync → verify → os.replace.

Where the bytes come from is a `Fill`: the NAS (in-kernel copy: copy_file_range, else sendfile —
copy_file_range from NFS to a local disk fails with EXDEV — and plain read/write last), or a peer
that already holds the file verified (rsync over SSH, see transport.py). Either way the result is
verified against the source before it gets its final name; a failed verify leaves nothing.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from ..base import atomic
from ..base.digests import compare
from ..base.errors import SourceError, UnreachableError
from ..facts.hubcache import file_kind

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


Ident = tuple[int, int, int]  # (st_dev, st_ino, st_size) of a source file as the scan saw it


def _changed(source: Path, why: str) -> SourceError:
    return SourceError(
        f"{source} changed since the scan ({why}); nothing was published for it",
        hint="something rewrote the source hub while staging; rerun once it is settled",
    )


def open_source(source: Path, ident: Ident | None) -> int:
    """Open the scanned source file itself: never through a link swapped in since the scan.

    The scan resolved every directory link, so the parent must be its own realpath; the file is
    opened O_NOFOLLOW|O_NONBLOCK (a FIFO swapped in cannot hang us) and its fstat must show the
    scanned (dev, inode, size) — a same-size link or file swapped in is refused, not copied.
    """
    parent = str(source.parent)
    if os.path.realpath(parent) != parent:
        raise _changed(source, f"{parent} now leads through a link")
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UnreachableError(
            f"{source} vanished since the scan; nothing was published for it",
            hint="is the NAS still mounted? a rerun resumes where this stopped",
        ) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _changed(source, "it is now a symbolic link") from None
        raise
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(st.st_mode):
        problem = f"it is now {file_kind(st.st_mode)}"
    elif ident is not None and (st.st_dev, st.st_ino, st.st_size) != ident:
        problem = "another file stands at its path (inode or size differs)"
    if problem:
        os.close(fd)
        raise _changed(source, problem)
    return fd


def recheck_source(source: Path, ident: Ident | None) -> None:
    """Before publishing: the path still names the scanned file (no swap during the copy)."""
    if ident is None:
        return
    try:
        st = os.lstat(source)
    except FileNotFoundError:
        raise _changed(source, "it is gone") from None
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino, st.st_size) != ident:
        raise _changed(source, "it was replaced during the copy")


def fill_from_path(source: Path, size: int, progress: Progress, ident: Ident | None = None) -> Fill:
    """A Fill that copies `source` (e.g. on the NAS mount) in the kernel, from the scanned file only."""

    def fill(tmp: Path) -> None:
        src_fd = open_source(source, ident)
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
    recheck: Callable[[], None] = lambda: None,
) -> None:
    """Fill a temp next to `final`, fsync it, verify it against `reference`, then rename it into place.

    `recheck` runs last before the rename: it raises when the source changed under the copy.
    """
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
        recheck()
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
    ident: Ident | None = None,
) -> None:
    """Copy `source` to `final` so that `final` either does not change or holds verified bytes.

    `ident` is the scan's (dev, inode, size) of `source`: only that file is read and published.
    """
    place_verified(
        final,
        fill_from_path(source, size, progress, ident),
        source,
        verify_mode,
        address,
        recheck=lambda: recheck_source(source, ident),
    )


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
