"""What sparkfleet started on a node, so `stop` touches only that.

A record is written (temp + fsync + os.replace) on the node that runs the rank, under
`<state_dir>/lanes/<lane>/rank<r>.json`. A process is named by PID *and* its start time in
clock ticks since boot *and* the boot id (`sparkfleet.base.procs`): a recycled PID, or the same PID
after a reboot, is never mistaken for ours. A container is named by its full ID.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..base import procs
from ..base.atomic import write_bytes
from ..base.sanitize import clean


@dataclass(frozen=True)
class LaunchRecord:
    """One rank sparkfleet started: enough to find it, check it is still ours, and stop it."""

    lane: str
    host: str
    rank: int
    runtime: str
    name: str
    log_path: str
    started_at: float
    pid: int | None = None
    start_ticks: int | None = None
    boot_id: str | None = None
    pgid: int | None = None
    container_id: str | None = None
    exit_path: str | None = None
    argv: tuple[str, ...] = ()
    env_keys: tuple[str, ...] = ()
    binds: int = 0
    receipts_cleared: tuple[str, ...] = field(default=())

    @classmethod
    def from_dict(cls, d: dict) -> LaunchRecord:
        """A record as `save` wrote it; any other shape is a TypeError (the state dir is editable, and a
        record's pid, pgid and paths are what `stop` signals and `logs` reads)."""
        if not isinstance(d, dict):  # a record file edited into a list, a string, null
            raise TypeError(f"a launch record is a JSON object, not {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(LaunchRecord)}
        d = {k: v for k, v in d.items() if k in names}
        for key in _LISTS:
            value = d.get(key) or ()
            if not (isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)):
                raise TypeError(f"launch record: {key} is not a list of strings")
            d[key] = tuple(value)
        for key in (*_STRS, *_OPTIONAL_STRS, *_INTS, *_OPTIONAL_INTS):
            if key not in d:  # absent: the field's default, or LaunchRecord's own TypeError below
                continue
            value = d[key]
            if value is None and key in (*_OPTIONAL_STRS, *_OPTIONAL_INTS):
                continue
            want = str if key in (*_STRS, *_OPTIONAL_STRS) else int
            if isinstance(value, bool) or not isinstance(value, want):
                raise TypeError(f"launch record: {key} is not {'a string' if want is str else 'an integer'}")
        started = d.get("started_at")
        if isinstance(started, bool) or not isinstance(started, int | float) or not math.isfinite(started):
            raise TypeError("launch record: started_at is not a time")
        return cls(**d)


def lane_dir(state_dir: Path, lane: str) -> Path:
    return Path(state_dir) / "lanes" / lane


def record_path(state_dir: Path, lane: str, rank: int) -> Path:
    return lane_dir(state_dir, lane) / f"rank{rank}.json"


def log_path(state_dir: Path, lane: str, rank: int) -> Path:
    return lane_dir(state_dir, lane) / f"rank{rank}.log"


def save(state_dir: Path, record: LaunchRecord) -> Path:
    path = record_path(state_dir, record.lane, record.rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path, json.dumps(dataclasses.asdict(record), indent=1).encode(), mode=0o600)
    return path


_STRS = ("lane", "host", "runtime", "name", "log_path")
_OPTIONAL_STRS = ("boot_id", "container_id", "exit_path")
_INTS, _OPTIONAL_INTS = ("rank", "binds"), ("pid", "start_ticks", "pgid")
_LISTS = ("argv", "env_keys", "receipts_cleared")


def load_all(state_dir: Path, lane: str) -> list[LaunchRecord]:
    """Every record of `lane` on this node, by rank."""
    return _load_dir(lane_dir(state_dir, lane))


def _load_dir(d: Path) -> list[LaunchRecord]:
    """The rank records in folder `d`, by rank (an unreadable one is skipped, never a crash)."""
    return [rec for rec, _ in _load_docs(d)]


def _load_docs(d: Path) -> list[tuple[LaunchRecord, dict]]:
    """(record, the whole JSON document) per rank in folder `d`, by rank; unreadable ones skipped."""
    out = []
    for p in sorted(d.glob("rank*.json")) if d.is_dir() else []:
        try:
            doc = json.loads(p.read_text())
            out.append((LaunchRecord.from_dict(doc), doc))
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    return sorted(out, key=lambda pair: pair[0].rank)


def forget(state_dir: Path, record: LaunchRecord) -> None:
    record_path(state_dir, record.lane, record.rank).unlink(missing_ok=True)


def last_run_path(state_dir: Path, lane: str, rank: int) -> Path:
    return lane_dir(state_dir, lane) / "last" / f"rank{rank}.json"


@dataclass(frozen=True)
class StopNote:
    """How a rank's run ended when sparkfleet stopped it: when, by whom, and what the stop did."""

    at: float  # unix time
    by: str  # "sparkfleet stop (kilork@ops1)", "sparkfleet demo (...)": the verb and the user
    detail: str  # "stopped (SIGTERM)"


def retire(state_dir: Path, record: LaunchRecord, note: StopNote | None = None) -> None:
    """A stopped rank's record moves to `last/`: `stop` no longer sees it, `logs` still finds its
    log, and `status` says how that run ended (`note`)."""
    dest = last_run_path(state_dir, record.lane, record.rank)
    dest.parent.mkdir(parents=True, exist_ok=True)
    doc = dataclasses.asdict(record) | ({"stopped": dataclasses.asdict(note)} if note else {})
    write_bytes(dest, json.dumps(doc, indent=1).encode(), mode=0o600)
    forget(state_dir, record)


def load_last(state_dir: Path, lane: str) -> list[LaunchRecord]:
    """The records of the lane's last stopped run on this node, by rank."""
    return _load_dir(lane_dir(state_dir, lane) / "last")


def load_last_stops(state_dir: Path, lane: str) -> list[tuple[LaunchRecord, StopNote | None]]:
    """The lane's last stopped run on this node, each rank with how its stop went (None: unknown)."""
    out = []
    for rec, doc in _load_docs(lane_dir(state_dir, lane) / "last"):
        out.append((rec, _stop_note(doc.get("stopped"))))
    return out


def _stop_note(note: object) -> StopNote | None:
    """A retired record's stop note as written by `retire`, or None for anything else: a note we
    cannot read says nothing, and its text reaches a terminal only without control characters."""
    if not isinstance(note, dict):
        return None
    at, by, detail = note.get("at"), note.get("by"), note.get("detail")
    if not isinstance(at, int | float) or not 0 < at < 1e11 or not isinstance(by, str):
        return None
    return StopNote(float(at), clean(by)[:200], clean(str(detail))[:200])


def is_ours(record: LaunchRecord) -> bool:
    """The recorded process still runs and is the very process we started (not a recycled PID).

    A record without a boot id (written before records carried one) is checked by start time alone.
    """
    if record.pid is None:
        return False
    return procs.same_process(record.pid, record.start_ticks, record.boot_id or procs.boot_id())


def tail_bytes(path: str, limit: int = 1 << 20) -> bytes:
    """The last `limit` bytes of a rank's log file (empty when it cannot be read): for logs and incidents."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read()
    except OSError:
        return b""
