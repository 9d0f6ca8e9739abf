"""`view serve` ends on Ctrl-C with 0, however soon after its first line the operator presses it:
that line says Ctrl-C stops it, so from then on a Ctrl-C is the normal end, not an interruption."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from sparkfleet.demo.fleet import write_demo_fleet
from support.localgateway import free_port


def test_ctrl_c_right_after_the_first_line_ends_view_serve_with_0(tmp_path):
    fleet = write_demo_fleet(tmp_path / "demo", shard_bytes=16 * 1024)
    env = {**os.environ, "SPARKFLEET_ROOT": str(fleet.root)}
    for _ in range(5):  # the signal lands at once: on the line's heels, before and during run()
        argv = [sys.executable, "-m", "sparkfleet", "view", "serve", "--listen", f"127.0.0.1:{free_port()}"]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            first = proc.stdout.readline()
            assert "Ctrl-C stops it" in first, first + proc.stderr.read()
            proc.send_signal(signal.SIGINT)  # our own child, by its PID
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, err
        assert "view stopped" in err and "Traceback" not in err
