"""The demo lane on this machine for tests that drive it as an operator does: staged, served, and
read off a pseudo-terminal.

`staged_demo` writes the demo fleet and stages both hosts; `served_demo` also launches the lane
(no fabric canary: these tests are not about it) and stops it when the block ends, also when the
test failed. Modules using them share the demo's ports: mark them xdist_group("local_lanes").
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import time
from collections.abc import Iterator
from pathlib import Path

from sparkfleet.demo.fleet import DEMO_LANE, DemoFleet, write_demo_fleet
from sparkfleet.fleet import inventory
from sparkfleet.launch import lane as lanes
from sparkfleet.stage import execute
from sparkfleet.stage.targets import requests_for_host


def staged_demo(workdir: Path) -> DemoFleet:
    fleet = write_demo_fleet(workdir, shard_bytes=16 * 1024)
    inv = inventory.load(fleet.root)
    for host in inv.lane(DEMO_LANE).hosts:
        assert execute.stage(requests_for_host(inv, host, DEMO_LANE)).ok
    return fleet


@contextlib.contextmanager
def served_demo(workdir: Path) -> Iterator[DemoFleet]:
    fleet = staged_demo(workdir)
    try:
        assert lanes.launch(inventory.load(fleet.root), DEMO_LANE, canary=False).ready.ok
        yield fleet
    finally:
        lanes.stop(inventory.load(fleet.root), DEMO_LANE, 5)


def read_until(fd: int, pattern: str, timeout: float) -> str:
    """What a pseudo-terminal shows until `pattern` appears in it (or `timeout` seconds pass)."""
    got, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline and not re.search(pattern, got.decode(errors="replace")):
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                got += os.read(fd, 65536)
            except OSError:  # the other side closed: all it said is here
                break
    return got.decode(errors="replace")
