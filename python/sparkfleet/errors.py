"""The one user-facing error type.

Anything a user can cause (bad inventory, a dangling link on the NAS, a full disk, a wrong
checksum) raises `SparkfleetError`: the CLI prints message and hint without a traceback and
exits with `exit_code`. Bugs are left to raise whatever they raise, so they still traceback.
"""

from __future__ import annotations


class SparkfleetError(Exception):
    """An error the user can act on: what went wrong, where, and what to do about it."""

    exit_code: int = 2

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

    exit_code = 3


class LockBusyError(SparkfleetError):
    """Another sparkfleet run holds the lock."""

    exit_code = 75  # EX_TEMPFAIL
