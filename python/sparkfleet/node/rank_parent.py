"""The process runtime's parent: runs the serve command and writes its exit status.

Why: a rank started over ssh outlives the ssh session and is adopted by init, so nobody could
tell later whether it died, or with which code. This tiny parent (the session leader whose PID
and start time the launch record keeps) waits for the serve command, forwards SIGTERM/SIGINT to
it, and leaves `{"returncode": N}` at --exit-file (temp + fsync + os.replace).

    python -m sparkfleet.node.rank_parent --exit-file PATH [--log PATH --max-log-bytes N]
        [--child-file PATH] -- ARGV...

With --log, the command's output goes through this parent into PATH, which is rotated to PATH.1
whenever it passes N bytes: a rank printing 543 MiB of warnings cannot fill the node's disk.

With --child-file, the serve command's PID, start time and boot id are left there as soon as it
starts: if this parent is killed (`kill -9`), the server still runs in the rank's process group,
and `stop` finds it by that identity (never by name) and ends the whole group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..base import procs
from ..base.atomic import write_bytes

DEFAULT_MAX_LOG_BYTES = 64 * 1024 * 1024
USAGE = (
    "usage: python -m sparkfleet.node.rank_parent --exit-file PATH [--log PATH --max-log-bytes N]"
    " [--child-file PATH] -- ARGV..."
)


def _parse(args: list[str]) -> tuple[dict[str, str], list[str]] | None:
    if "--" not in args:
        return None
    cut = args.index("--")
    opts, command = args[:cut], args[cut + 1 :]
    if len(opts) % 2 or not command:
        return None
    named = dict(zip(opts[::2], opts[1::2], strict=True))
    if "--exit-file" not in named or set(named) - {"--exit-file", "--log", "--max-log-bytes", "--child-file"}:
        return None
    return named, command


class CappedLog:
    """Append-only log file rotated to `<path>.1` once it passes `max_bytes` (one old copy kept)."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path, self.max_bytes = path, max(4096, max_bytes)
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        self.size = os.fstat(self.fd).st_size

    def write(self, data: bytes) -> None:
        if self.size + len(data) > self.max_bytes and self.size:
            os.close(self.fd)
            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
            self.size = 0
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
            self.size += n


def _pump(pipe, log: CappedLog) -> None:
    while chunk := os.read(pipe.fileno(), 1 << 16):
        log.write(chunk)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parsed = _parse(args)
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 2
    named, command = parsed
    exit_file = Path(named["--exit-file"])
    log = None
    if "--log" in named:
        log = CappedLog(Path(named["--log"]), int(named.get("--max-log-bytes", DEFAULT_MAX_LOG_BYTES)))
    try:
        if log is None:
            child = subprocess.Popen(command)
        else:
            child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as exc:
        print(f"sparkfleet: cannot start {command[0]}: {exc}", flush=True)
        write_bytes(
            exit_file, json.dumps({"returncode": 127, "error": str(exc), "ended_at": time.time()}).encode()
        )
        return 127

    if "--child-file" in named:
        write_bytes(Path(named["--child-file"]), json.dumps(procs.identity(child.pid)).encode())

    def forward(signum, _frame):
        if child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    if log is not None and child.stdout is not None:
        pump = threading.Thread(target=_pump, args=(child.stdout, log), daemon=True)
        pump.start()
        rc = child.wait()
        pump.join(timeout=5)
    else:
        rc = child.wait()
    write_bytes(exit_file, json.dumps({"returncode": rc, "ended_at": time.time()}).encode())
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
