"""Start the real gateway (`smg`, PyPI) from a 0600 JSON file, so its keys are never in an argv.

`smg launch --api-key KEY` would put the key in `ps` for every user of the head host. This runs the
very same code path in-process instead: smg's own `parse_router_args` and `launch_router`
(smg/launch_router.py, smg 1.13.0), with the arguments read from the file sparkfleet wrote.

With a `front` entry it first starts nginx (`serving.front`: the per-user keys) as its child, tied
to this process by PR_SET_PDEATHSIG (prctl(2)): when this process ends for any reason, nginx gets
SIGTERM (its fast shutdown) and no front is left without its router. One process to record, stop
and supervise (`gateway up`'s record, the systemd unit's main PID).
"""

from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def start_front(front: dict, wait_s: float = 10.0) -> subprocess.Popen:
    """nginx in the foreground (daemon off), up once it wrote its pid file; exits 1 if it fails."""
    pid_file, log = Path(front["pid"]), Path(front["error_log"])
    pid_file.unlink(missing_ok=True)
    offset = log.stat().st_size if log.exists() else 0
    proc = subprocess.Popen(front["argv"], stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)  # noqa: PLW1509 - prctl only
    deadline = time.monotonic() + wait_s
    while not pid_file.exists():
        if proc.poll() is not None:
            why = _first_emergency(log, offset)
            print(f"gateway front (nginx) exited {proc.returncode}: {why} (see {log})", file=sys.stderr)
            sys.exit(1)
        if time.monotonic() > deadline:
            proc.terminate()
            print(f"gateway front (nginx) not up after {wait_s:g} s", file=sys.stderr)
            sys.exit(1)
        time.sleep(0.05)
    return proc


def _first_emergency(log: Path, offset: int) -> str:
    """Why nginx did not start: the first `[emerg]` it logged this time (`bind() to ... failed (98:
    Address already in use)`), not its last (`still could not bind()` after its retries)."""
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no error log"
    first = next((ln for ln in lines if "[emerg]" in ln), lines[-1] if lines else "nothing in its error log")
    return first[-300:]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m sparkfleet.serving.gateway_main CONFIG.json", file=sys.stderr)
        return 2
    config = json.loads(Path(args[0]).read_text())
    from smg.launch_router import launch_router, parse_router_args

    front = None
    try:
        front = start_front(config["front"]) if config.get("front") else None
        launch_router(parse_router_args([str(a) for a in config["argv"]]))
    except KeyboardInterrupt:
        # Ctrl-C on `gateway run` in a terminal: smg shuts down on SIGINT itself and returns, and
        # Python raises the interrupt it noted meanwhile. A stop asked for is no crash: one line.
        print("gateway stopped (Ctrl-C)", file=sys.stderr)
    finally:
        if front is not None and front.poll() is None:
            front.terminate()
            front.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
