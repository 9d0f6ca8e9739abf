"""The process runtime's parent: runs the serve command and writes its exit status.

Why: a rank started over ssh outlives the ssh session and is adopted by init, so nobody could
tell later whether it died, or with which code. This tiny parent (the session leader whose PID
and start time the launch record keeps) waits for the serve command, forwards SIGTERM/SIGINT to
it, and leaves `{"returncode": N}` at --exit-file (temp + fsync + os.replace).

    python -m sparkfleet.launch.supervise --exit-file PATH -- ARGV...
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..atomic import write_bytes


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4 or args[0] != "--exit-file" or args[2] != "--":
        print("usage: python -m sparkfleet.launch.supervise --exit-file PATH -- ARGV...", file=sys.stderr)
        return 2
    exit_file, command = Path(args[1]), args[3:]
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        print(f"sparkfleet: cannot start {command[0]}: {exc}", flush=True)
        write_bytes(
            exit_file, json.dumps({"returncode": 127, "error": str(exc), "ended_at": time.time()}).encode()
        )
        return 127

    def forward(signum, _frame):
        if child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    rc = child.wait()
    write_bytes(exit_file, json.dumps({"returncode": rc, "ended_at": time.time()}).encode())
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
