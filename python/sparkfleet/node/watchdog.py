"""The node's memory watchdog: stop the lane's ranks here, cleanly, before the host locks up.

Why: on a Spark, unified-memory exhaustion does not end in an OOM kill but in a host that needs a
power cycle (eugr/spark-vllm-docker #257, dgx-spark-playbooks #97). coolbho3k's 2x kit watches
free memory and stops its lane under 512 MiB. The agent starts one watchdog per lane on each node
with the ranks; it reads MemAvailable every interval while the lane boots and serves, and when it
falls under the floor it stops every rank of the lane on this node (the runtime's own stop, by
record) and leaves `memstop.json` beside the records saying why, with the numbers. It exits when
no rank of the lane runs here any more.

    python -m sparkfleet.node.watchdog --state-dir DIR --lane LANE --floor BYTES --interval S
        [--meminfo PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ..base import procs
from ..base.atomic import write_bytes
from ..base.selfexec import module_argv
from ..facts.memory import gib, read_memory
from . import records
from .runtimes import runtime_for

MEMSTOP = "memstop.json"
WATCHDOG = "watchdog.json"


def memstop_path(state_dir: Path, lane: str) -> Path:
    return records.lane_dir(state_dir, lane) / MEMSTOP


def read_memstop(state_dir: Path, lane: str) -> dict | None:
    try:
        return json.loads(memstop_path(state_dir, lane).read_text())
    except (OSError, ValueError):
        return None


def meminfo_source(host: str | None = None) -> str:
    """The node's meminfo: /proc/meminfo, or $SPARKFLEET_MEMINFO ({host} = this node's hostname)."""
    template = os.environ.get("SPARKFLEET_MEMINFO", "/proc/meminfo")
    return template.replace("{host}", host or socket.gethostname())


def shm_source(host: str | None = None) -> str:
    return os.environ.get("SPARKFLEET_SHM", "/dev/shm").replace("{host}", host or socket.gethostname())


def check_once(state_dir: Path, lane: str, floor: int, meminfo: str, stop_timeout: float) -> dict | None:
    """One look: under the floor → stop the lane's ranks here and return the memstop record."""
    facts = read_memory(meminfo, shm_source())
    if facts.available >= floor:
        return None
    recs = records.load_all(state_dir, lane)
    stopped = []
    for rec in recs:
        res = runtime_for(rec.runtime).stop(rec, stop_timeout)
        stopped.append({"rank": rec.rank, "name": rec.name, "stopped": res.stopped, "detail": res.detail})
    out = {
        "lane": lane,
        "host": socket.gethostname(),
        "at": time.time(),
        "mem_available": facts.available,
        "mem_total": facts.total,
        "floor": floor,
        "reason": f"MemAvailable {gib(facts.available)} fell under the floor {gib(floor)}: "
        f"stopped the lane's ranks on this host before it locks up",
        "stopped": stopped,
    }
    write_bytes(memstop_path(state_dir, lane), json.dumps(out, indent=1).encode())
    return out


def running(state_dir: Path, lane: str) -> bool:
    return any(runtime_for(r.runtime).state(r).alive for r in records.load_all(state_dir, lane))


def spawn(state_dir: Path, lane: str, floor: int, interval: float, stop_timeout: float) -> dict:
    """Start the watchdog for `lane` on this node (unless one of ours runs) and record its identity."""
    path = records.lane_dir(state_dir, lane) / WATCHDOG
    old = _load(path)
    if old and _is_ours(old):
        return old
    memstop_path(state_dir, lane).unlink(missing_ok=True)
    log = records.lane_dir(state_dir, lane) / "watchdog.log"
    argv = module_argv("sparkfleet.node.watchdog", "--state-dir", str(state_dir), "--lane", lane,
                       "--floor", str(floor), "--interval", str(interval),
                       "--stop-timeout", str(stop_timeout), "--meminfo", meminfo_source())  # fmt: skip
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)  # fmt: skip
    rec = {**procs.identity(proc.pid), "floor": floor, "interval": interval, "meminfo": argv[-1]}
    write_bytes(path, json.dumps(rec).encode())
    return rec


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _is_ours(rec: dict) -> bool:
    pid = rec.get("pid")
    return bool(pid) and procs.same_process(pid, rec.get("start_ticks"), rec.get("boot_id"))


def stop_watchdog(state_dir: Path, lane: str) -> bool:
    """SIGTERM our watchdog of `lane` (by recorded PID + start time, never by name)."""
    path = records.lane_dir(state_dir, lane) / WATCHDOG
    rec = _load(path)
    if rec and _is_ours(rec):
        with contextlib.suppress(ProcessLookupError):
            os.kill(rec["pid"], signal.SIGTERM)
        path.unlink(missing_ok=True)
        return True
    path.unlink(missing_ok=True)
    return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sparkfleet-watchdog")
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--lane", required=True)
    p.add_argument("--floor", type=int, required=True)
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--stop-timeout", type=float, default=30.0)
    p.add_argument("--meminfo", default="/proc/meminfo")
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    time.sleep(min(a.interval, 1.0))  # the ranks' records are written right after we start
    while running(a.state_dir, a.lane):
        try:
            hit = check_once(a.state_dir, a.lane, a.floor, a.meminfo, a.stop_timeout)
        except (OSError, ValueError) as exc:
            print(f"watchdog: cannot read memory: {exc}", flush=True)
            hit = None
        if hit:
            print(hit["reason"], flush=True)
            return 3
        time.sleep(a.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
