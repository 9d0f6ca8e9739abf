"""What `sparkfleet watch` tells the view: after every probe its state goes to recipes/<lane>/watch.json,
and the view reads it back only while the writing process runs."""

from __future__ import annotations

import subprocess
import sys

from sparkfleet.ops import watchstate
from sparkfleet.ops.supervisor import ProbeResult, Supervisor, WatchSettings


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_the_loop_tells_each_state_and_the_file_follows(tmp_path):
    clock = Clock()
    answers = iter([True, True, False, False, False])
    seen: list[tuple[str, int, int]] = []

    def tell(state, out, res):
        watchstate.record(tmp_path, "lane", state, (out.probes, out.failures, out.restarts), res.ok,
                          res.latency_s, res.error)  # fmt: skip
        got = watchstate.read(tmp_path, "lane")
        seen.append((got.state, got.probes, got.restarts))

    s = WatchSettings(interval_s=10, latency_s=5, max_restarts=1, backoff_s=1)
    def probe() -> ProbeResult:
        return ProbeResult(next(answers), 1.0, error="wrong answer")

    sup = Supervisor("lane", s, probe, lambda r: "b", lambda: True, lambda: None, clock=clock.now,
                     sleep=clock.sleep, on_state=tell)  # fmt: skip
    out = sup.run(max_probes=5)
    assert out.needs_human
    assert seen == [("watching", 1, 0), ("watching", 2, 0), ("failing", 3, 0), ("restarting", 3, 0),
                    ("failing", 4, 1), ("needs_human", 4, 1)]  # fmt: skip


def test_a_teller_that_raises_never_stops_the_watching(tmp_path):
    clock = Clock()
    events: list[str] = []

    def broken(*_a):
        raise OSError("disk full")

    s = WatchSettings(interval_s=10, latency_s=5)
    sup = Supervisor("lane", s, lambda: ProbeResult(True, 1.0), lambda r: None, lambda: True, lambda: None,
                     clock=clock.now, sleep=clock.sleep, on_event=events.append, on_state=broken)  # fmt: skip
    assert sup.run(max_probes=3).probes == 3
    assert any("telling the state raised OSError" in e for e in events)


def test_a_dead_writer_reads_as_nobody_watching(tmp_path):
    """The file of a watch that died stays on disk; the view must not show the lane as watched."""
    code = ("import sys; from pathlib import Path; from sparkfleet.ops import watchstate; "
            "watchstate.record(Path(sys.argv[1]), 'lane', 'watching', (1, 0, 0), True, 0.5)")  # fmt: skip
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=60)
    assert watchstate.watch_path(tmp_path, "lane").is_file()
    assert watchstate.read(tmp_path, "lane") is None
