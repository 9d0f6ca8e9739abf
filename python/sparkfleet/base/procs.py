"""Process identity on this host: a process is its PID *and* its start time *and* the boot.

Why: a PID is recycled, and after a reboot the same PID names another process. Whoever records a
process it started (a rank's parent, the memory watchdog, the staging rsync daemon, the gateway)
and later signals it must first check that the PID still names that very process: the start time
in clock ticks since boot (field 22 of /proc/<pid>/stat) and the boot id must both match.
"""

from __future__ import annotations

import os
from pathlib import Path

GONE_STATES = ("Z", "X")  # a zombie or a dead process: nothing left to signal


def boot_id() -> str:
    """This boot's id (empty when /proc does not say)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (after the parenthesised comm, which may hold spaces)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (None: no such process)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def process_state(pid: int) -> str | None:
    """`pid`'s state letter (R, S, D, Z, X, ...), None when there is no such process."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def identity(pid: int) -> dict:
    """What a starter records of a process it started: {"pid", "start_ticks", "boot_id"}."""
    return {"pid": pid, "start_ticks": start_ticks(pid), "boot_id": boot_id()}


def same_process(pid: int, ticks: int | None, boot: str | None) -> bool:
    """The process recorded as (pid, start ticks, boot id) still runs: same boot, same start time,
    not a zombie. A recycled PID, or the same PID after a reboot, is never taken for it."""
    if boot != boot_id():
        return False
    state = process_state(pid)
    return state is not None and state not in GONE_STATES and start_ticks(pid) == ticks


def _live(field: int, value: int) -> list[tuple[int, list[str]]]:
    """Live (non-zombie) processes whose stat field `field` (0 = state, 1 = ppid, 2 = pgrp) is `value`."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields and fields[0] not in GONE_STATES and int(fields[field]) == value:
            out.append((int(entry.name), fields))
    return out


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`."""
    return [pid for pid, _ in _live(2, pgid)]


def children(ppid: int) -> list[tuple[int, int]]:
    """Live (non-zombie) children of `ppid`, each as (pid, start ticks): what a caller waits on,
    a recycled PID told apart by same_process."""
    return [(pid, int(fields[19])) for pid, fields in _live(1, ppid)]


def command_line(pid: int) -> str:
    """`pid`'s command line as it shows it now (a process may rewrite it: nginx does), "" if gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
