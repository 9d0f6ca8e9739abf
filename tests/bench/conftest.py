"""A real fake lane per test: `python -m sparkfleet.demo.openai_server` on a free loopback port
(with `--hostile MODE`: tests/support/hostile_server.py, the same server misbehaving).

The server runs as its own process (the way the launcher runs it), its stdout is collected line by
line, and every server a test started is stopped by its PID in teardown, also when the test failed.
"""

from __future__ import annotations

import http.client
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HOSTILE_SERVER = str(Path(__file__).resolve().parents[1] / "support" / "hostile_server.py")


@dataclass
class FakeLane:
    proc: subprocess.Popen
    lines: list[str] = field(default_factory=list)
    port: int = 0
    listening: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def health(self) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            conn.request("GET", "/health")
            return conn.getresponse().status
        finally:
            conn.close()

    def wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"fake lane exited {self.proc.returncode}: {self.lines}")
            if self.health() == 200:
                return
            time.sleep(0.02)
        raise AssertionError("fake lane never became ready")


def _read(lane: FakeLane) -> None:
    assert lane.proc.stdout is not None
    for line in lane.proc.stdout:
        line = line.rstrip("\n")
        lane.lines.append(line)
        if not lane.listening.is_set() and "listening on http://" in line:
            lane.port = int(line.split("http://", 1)[1].split()[0].rsplit(":", 1)[1])
            lane.listening.set()


@pytest.fixture
def fake_lane():
    """`start(*flags, ready=True)` → a running FakeLane; all are stopped after the test."""
    started: list[FakeLane] = []

    def start(*flags: str, ready: bool = True) -> FakeLane:
        server = [HOSTILE_SERVER] if "--hostile" in flags else ["-m", "sparkfleet.demo.openai_server"]
        argv = [sys.executable, "-u", *server, "--port", "0", *flags]
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
        )
        lane = FakeLane(proc)
        started.append(lane)
        threading.Thread(target=_read, args=(lane,), daemon=True).start()
        assert lane.listening.wait(15), f"fake lane did not start: {proc.poll()}"
        if ready:
            lane.wait_ready()
        return lane

    yield start
    for lane in started:
        if lane.proc.poll() is None:
            lane.proc.terminate()
            try:
                lane.proc.wait(5)
            except subprocess.TimeoutExpired:
                lane.proc.kill()
                lane.proc.wait()
