"""The one user-facing error type.

Anything a user can cause (bad inventory, a dangling link on the NAS, a full disk, a wrong
checksum) raises `SparkfleetError`: the CLI prints message and hint without a traceback and
exits with `exit_code`. Bugs are left to raise whatever they raise, so they still traceback.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The one exit-code table every verb uses (README: "Exit codes").

    Scripts around sparkfleet (systemd units, CI, an operator's shell loop) branch on these,
    so a meaning never moves between verbs.
    """

    OK = 0
    SHORTFALL = 1  # the work ran, but a check fell short (verify mismatch, smoke/bench failed, ...)
    USAGE = 2  # bad input: CLI usage, invalid inventory/recipe, a source refused as unsafe
    SPACE = 3  # not enough disk space or inodes at the destination
    UNREACHABLE = 4  # a host could not be reached or logged into over ssh
    REFUSED = 5  # a safety gate refused to act (admission, drift, image mismatch, occupied host)
    BUSY = 75  # another run holds the lock (EX_TEMPFAIL)
    INTERRUPTED = 130  # stopped by Ctrl-C / SIGINT



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
