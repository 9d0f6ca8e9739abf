"""The one user-facing error type.

Anything a user can cause (bad inventory, a dangling link on the NAS, a full disk, a wrong
checksum) raises `SparkfleetError`: the CLI prints message and hint without a traceback and
exits with `exit_code`. Bugs are left to raise whatever they raise, so they still traceback.
"""

from __future__ import annotations

import errno
from enum import IntEnum


class ExitCode(IntEnum):
    """The one exit-code table every verb uses (docs/cli.md "Exit codes" is generated from it).

    Scripts around sparkfleet (systemd units, CI, an operator's shell loop) branch on these,
    so a meaning never moves between verbs: each code's one meaning is `EXIT_MEANINGS[code]`.
    """

    OK = 0
    SHORTFALL = 1
    USAGE = 2
    SPACE = 3
    UNREACHABLE = 4
    REFUSED = 5
    CRASHED = 70  # EX_SOFTWARE (sysexits.h)
    BUSY = 75  # EX_TEMPFAIL (sysexits.h)
    INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it


# What each code means, for every verb. docs/cli.md's table and `sparkfleet --help` print these;
# a help text that names a code writes it as "exit N (name)" and tests/cli checks the name.
EXIT_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "done, every check passed",
    ExitCode.SHORTFALL: (
        "the work ran but fell short: a verify mismatch, a failed smoke, bench or probe, a regression "
        "against the baseline, a rank not ready or not stopped, `status` of a lane that does not serve "
        "(stopped cleanly included); a person looks at what it printed"
    ),
    ExitCode.USAGE: (
        "bad input: CLI usage, an invalid inventory or recipe (`inventory check` lists every problem), "
        "an unsafe source, a read-only or too-long destination path"
    ),
    ExitCode.SPACE: (
        "not enough disk space or inodes at the destination (refused up front, or the disk filled "
        "mid-copy; nothing partial is published)"
    ),
    ExitCode.UNREACHABLE: "a host could not be reached or logged into over ssh, or the NAS went away mid-run",
    ExitCode.REFUSED: (
        "a safety gate refused to act: a host already serving a lane (this one or another; "
        "`--replace`), a failed launch gate, a planted lock or link, reports that are not like for "
        "like (`--force`)"
    ),
    ExitCode.CRASHED: (
        "sparkfleet itself failed (a bug; `EX_SOFTWARE`): `watch` exits with it so that its unit "
        "restarts it, unlike 1 (a person is needed)"
    ),
    ExitCode.BUSY: (
        "another run holds the lock: a stage of the same hub, a pack of the same directory, a launch "
        "of the same lane (`EX_TEMPFAIL`; `stage --wait SECONDS` queues behind it)"
    ),
    ExitCode.INTERRUPTED: (
        "stopped by Ctrl-C / SIGINT (what was done so far is kept, and said); not `watch`, `logs -f`, "
        "`view serve` and `gateway run`, whose normal end is Ctrl-C (0)"
    ),
}


class SparkfleetError(Exception):
    """An error the user can act on: what went wrong, where, and what to do about it."""

    exit_code: int = ExitCode.USAGE

    def __init__(self, message: str, hint: str | None = None, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class InventoryError(SparkfleetError):
    """The inventory (fleet.toml or a recipe) is malformed or inconsistent."""


class SourceError(SparkfleetError):
    """The staging source (the NAS hub cache) is missing something or is not safe to copy."""


class SpaceError(SparkfleetError):
    """Not enough free space at the destination."""

    exit_code = ExitCode.SPACE


class LockBusyError(SparkfleetError):
    """Another sparkfleet run holds the lock."""

    exit_code = ExitCode.BUSY


class UnreachableError(SparkfleetError):
    """A host (or the NAS behind a mount) could not be reached."""

    exit_code = ExitCode.UNREACHABLE


# errno → (what it means for the operator, exit code). Anything else stays an OSError (a bug).
_GONE = "the filesystem went away (NAS unmounted, sshfs/NFS connection lost)"
_OS_ERRORS: dict[int, tuple[str, int]] = {
    errno.ENOSPC: ("no space left on the device", ExitCode.SPACE),
    errno.EDQUOT: ("disk quota exceeded", ExitCode.SPACE),
    errno.EROFS: ("read-only file system", ExitCode.USAGE),
    errno.EACCES: ("permission denied", ExitCode.USAGE),
    errno.EPERM: ("operation not permitted", ExitCode.USAGE),
    errno.ENAMETOOLONG: ("file name too long for this filesystem", ExitCode.USAGE),
    errno.ENOTCONN: (_GONE, ExitCode.UNREACHABLE),
    errno.ESTALE: (_GONE, ExitCode.UNREACHABLE),
    errno.EHOSTDOWN: (_GONE, ExitCode.UNREACHABLE),
    errno.EHOSTUNREACH: (_GONE, ExitCode.UNREACHABLE),
    errno.ETIMEDOUT: (_GONE, ExitCode.UNREACHABLE),
    errno.ECONNABORTED: (_GONE, ExitCode.UNREACHABLE),
    errno.EIO: ("I/O error (a failing disk, or a network filesystem that dropped)", ExitCode.UNREACHABLE),
}
_HINTS = {
    ExitCode.SPACE: "free space (or inodes) there, lower the host's reserve_gib, or exclude optional packs",
    ExitCode.UNREACHABLE: "check the NAS mount and the network; a rerun resumes where this stopped",
}


def from_os_error(exc: OSError, action: str) -> SparkfleetError | None:
    """The user-facing error for an OS error met while doing `action`, or None if it is not one.

    Why: a full disk, a read-only mount or a NAS that vanished are the operator's to fix, and a
    traceback with exit 1 tells them neither what happened nor that nothing partial was left.
    """
    known = _OS_ERRORS.get(exc.errno or -1)
    if known is None:
        return None
    meaning, code = known
    where = exc.filename or "?"
    if exc.filename2:
        where = f"{where} → {exc.filename2}"
    cls = {ExitCode.SPACE: SpaceError, ExitCode.UNREACHABLE: UnreachableError}.get(code, SparkfleetError)
    hint = _HINTS.get(code)
    if exc.errno == errno.ENAMETOOLONG:
        hint = "a name this long does not fit the destination filesystem (255 bytes per name)"
    elif exc.errno == errno.EROFS:
        hint = "the destination is mounted read-only; remount it read-write or pick another destination"
    err = cls(f"{action}: {meaning}: {where} ({exc.strerror}); nothing partial was published", hint=hint)
    err.exit_code = code
    return err
