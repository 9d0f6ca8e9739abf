"""Hostile answers are a test fixture: the product's demo server has none, the test server has them."""

from __future__ import annotations

import http.client
import subprocess
import sys
from pathlib import Path

HOSTILE_SERVER = Path(__file__).with_name("hostile_server.py")


def test_the_demo_server_in_the_package_has_no_hostile_mode() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sparkfleet.demo.openai_server", "--port", "0", "--hostile", "endless"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 2 and "unrecognized arguments: --hostile endless" in proc.stderr


def test_the_test_server_redirects_and_still_takes_every_demo_flag() -> None:
    argv = [sys.executable, "-u", str(HOSTILE_SERVER), "--port", "0", "--hostile", "redirect",
            "--served-model-name", "m", "--decode-tps", "5000"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on http://" in line and "(model m)" in line, line + proc.stderr.read()
        port = int(line.split("http://", 1)[1].split()[0].rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/v1/models")
        answer = conn.getresponse()
        assert answer.status == 307 and answer.getheader("Location") == "http://127.0.0.1:1/v1/models"
        conn.close()
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
