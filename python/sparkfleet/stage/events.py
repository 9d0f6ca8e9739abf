"""Progress and results as JSON lines, so a coordinator can drive its display from a remote run.

`sparkfleet stage HOST --here --events` writes one JSON object per line on stdout: `phase`,
`advance` (throttled), `result` (the StageRun record) or `error` (message, hint, exit code).
Anything else on the stream (warnings, tracebacks) is passed through as log text.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import IO, Any

from ..base.errors import SparkfleetError


class EventsProgress:
    """A StageProgress that prints JSON lines, at most every `interval` seconds for byte counts."""

    def __init__(self, out: IO[str] | None = None, interval: float = 0.2) -> None:
        self.out = out or sys.stdout
        self.interval = interval
        self.pending = 0
        self.last = 0.0
        self.lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        with self.lock:
            self.out.write(json.dumps({"event": event, **fields}) + "\n")
            self.out.flush()

    def phase(self, name: str, total_bytes: int, total_items: int) -> None:
        self.flush()
        self.emit("phase", name=name, total_bytes=total_bytes, total_items=total_items)

    def advance(self, nbytes: int) -> None:
        with self.lock:
            self.pending += nbytes
            due = time.monotonic() - self.last >= self.interval
        if due:
            self.flush()

    def item_done(self, rel: str) -> None:
        pass

    def flush(self) -> None:
        with self.lock:
            n, self.pending, self.last = self.pending, 0, time.monotonic()
        if n:
            self.emit("advance", bytes=n)

    def result(self, record: dict) -> None:
        self.flush()
        self.emit("result", run=record)

    def error(self, exc: SparkfleetError) -> None:
        self.flush()
        self.emit("error", message=exc.message, hint=exc.hint, exit_code=exc.exit_code)


def parse_event(line: str) -> dict | None:
    """The event on `line`, or None when the line is plain log text."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and "event" in event else None
