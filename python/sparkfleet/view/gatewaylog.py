"""The gateway as the view sees it: its front's access log counted per user and status, its replicas.

The gateway's nginx front already logs who asked (never their key) in the `sparkfleet` format
(serving/front.py): `TIME ADDR USER "REQUEST" STATUS WORKER SECONDS`. The view reads that log
incrementally from where it stopped (a log that shrank or was replaced is read again from its
start), so a scrape costs nothing and the counts only grow while the view runs: Prometheus
counters. A request without a valid key has no user: nginx writes "-" there, and so does the view.

A log line is outside input (a client chose the request line): fields are matched by a fixed
pattern, a user name must look like one (serving/users.py NAME), and at most MAX_USERS names are
counted apart; more fall into "other", so a flood of odd names cannot grow the metric set.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..base.errors import SparkfleetError
from ..facts.apikeys import read_key
from ..fleet.inventory import Inventory
from ..serving.front import paths as front_paths
from ..serving.gateway import KEY_NAME, is_running, load_record, plan, worker_states
from ..serving.users import NAME
from .snapshot import GatewayView

LINE = re.compile(rb'^\S+ \S+ (\S+) "(?:[^"\\]|\\.)*" (\d{3}) ')
MAX_USERS = 200
READ_CHUNK = 8 << 20  # one refresh reads at most this much new log; the rest waits for the next


@dataclass
class AccessCounts:
    """Requests per (user, status) from the front's access log, read incrementally."""

    path: Path
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    offset: int = 0
    inode: int | None = None
    partial: bytes = b""

    def _user(self, raw: bytes) -> str:
        name = raw.decode("ascii", errors="replace")
        if name == "-":
            return "-"
        if not NAME.fullmatch(name):
            return "other"
        known = {u for u, _ in self.counts}
        return name if name in known or len(known) < MAX_USERS else "other"

    def update(self) -> None:
        try:
            st = os.stat(self.path)
        except OSError:
            return
        if st.st_ino != self.inode or st.st_size < self.offset:  # rotated or truncated: read it anew
            self.inode, self.offset, self.partial = st.st_ino, 0, b""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(READ_CHUNK)
        except OSError:
            return
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()[-4096:]  # an unfinished last line waits for its end
        for line in lines:
            m = LINE.match(line)
            if m:
                key = (self._user(m.group(1)), m.group(2).decode())
                self.counts[key] = self.counts.get(key, 0) + 1


def gateway_view(inv: Inventory, state_dir: Path, counts: AccessCounts) -> GatewayView | None:
    """The gateway of this machine (None when it never ran here and no lane serves through one)."""
    try:
        record = load_record(state_dir)
    except SparkfleetError:
        record = None
    try:
        p = plan(inv)
    except SparkfleetError:
        p = None
    if record is None and p is None:
        return None
    counts.update()
    replicas: dict[str, int] = {}
    up: dict[str, int] = {}
    try:
        key = read_key(state_dir, KEY_NAME)
    except SparkfleetError:
        key = None
    states = worker_states(p, key) if p is not None and key else {}
    for w in p.workers if p is not None else ():
        replicas[w.model] = replicas.get(w.model, 0) + 1
        up[w.model] = up.get(w.model, 0) + (states.get(w.name) == "serving")
    return GatewayView(
        running=record is not None and is_running(record),
        requests=dict(counts.counts),
        replicas_up=up,
        replicas=replicas,
    )


def access_counts(state_dir: Path) -> AccessCounts:
    """A counter over the gateway front's access log under the gateway's state dir."""
    return AccessCounts(front_paths(state_dir).access_log)
