"""A bench you can follow: the label names the phase running now (not the last one finished), the
quality run shows its own scenario count, a non-terminal run prints one line per phase, and
Ctrl-C writes the report of what was measured, marked interrupted, and says where."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sparkfleet.base.errors import ExitCode
from sparkfleet.bench.quality import QualitySettings, run_quality
from sparkfleet.bench.run import BenchSettings, run_bench
from sparkfleet.bench.target import for_url

pytestmark = pytest.mark.slow


class Recorder:
    def __init__(self) -> None:
        self.labels: list[tuple[str, int]] = []
        self.notes: list[str] = []

    def start(self, total: int) -> None:
        pass

    def step(self, label: str, advance: int = 1) -> None:
        self.labels.append((label, advance))

    def note(self, line: str) -> None:
        self.notes.append(line)

    @property
    def current(self) -> str:
        return self.labels[-1][0]


def test_label_is_the_current_phase_and_quality_shows_its_progress(fake_lane, tmp_path):
    lane = fake_lane("--decode-tps", "1000000", "--prefill-tps", "100000000")
    settings = BenchSettings(
        **{**vars(BenchSettings.quick()), "quality": QualitySettings(scenarios=("TC-01", "TC-11"))}
    )
    rec, during_quality = Recorder(), []

    def quality(*args, **kwargs):
        during_quality.append(rec.current)  # what the display says while the hour-long part runs
        return run_quality(*args, **kwargs)

    run = run_bench(for_url(lane.url, tmp_path), settings, "t", progress=rec, quality_runner=quality)
    assert run.quality is not None and run.quality.status == "ok", run.quality
    assert during_quality == ["quality"]  # not "sweep c=2"
    labels = [label for label, _ in rec.labels]
    assert labels.index("sweep c=1") < labels.index("quality")
    assert ("sweep c=1", 0) in rec.labels  # named when it starts, before a request finished
    progress = [label for label in labels if label.startswith("quality ") and " · " not in label]  # not live
    # the count is of scenarios finished: 0 while the first runs, 1 while the second runs
    assert progress == ["quality 0/2 done, TC-01 running", "quality 1/2 done, TC-11 running"]
    assert rec.labels[-1] == ("quality", 1)
    verdicts = [n for n in rec.notes if n.startswith("quality TC-")]  # each verdict as it lands
    assert re.fullmatch(r"quality TC-01: fail, 0 points, \d+ s · 1/2 done, about \d+ s left", verdicts[0])
    assert re.fullmatch(r"quality TC-11: fail, 0 points, \d+ s · 2/2 done", verdicts[1]), verdicts
    assert rec.notes[0].startswith("estimate: about ") and "then quality: 2 scenarios" in rec.notes[0]


def _bench(url: str, out: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "sparkfleet", "bench", "--url", url, "--out", str(out), "--quick",
            "--no-quality", "--depths", "0", "--concurrency", "1,2", "--requests", "4"]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.serial  # measures rates/timing: make test runs it alone (it failed under parallel load)
def test_non_tty_lines_and_ctrl_c_keeps_what_was_measured(fake_lane, tmp_path):
    lane = fake_lane("--decode-tps", "20", "--prefill-tps", "50000")
    out = tmp_path / "reports"
    proc = _bench(lane.url, out)
    err = []
    for line in proc.stderr:  # wait for the sweep to start (each request takes ~1.6 s here)
        err.append(line)
        if line.startswith("· sweep c=1"):
            break
    proc.send_signal(signal.SIGINT)  # our own child, by its PID
    stdout, rest = proc.communicate(timeout=120)
    stderr = "".join(err) + rest
    assert proc.returncode == ExitCode.INTERRUPTED, stdout + stderr
    phases = [ln[2:].split(" ")[0] for ln in stderr.splitlines() if ln.startswith("· ")]
    wanted = ["warmup", "decode", "pp128", "tg32", "sweep"]
    assert [p for p in phases if p in wanted] == wanted  # each phase once, in order
    [report] = sorted(out.glob("*.json"))
    assert f"interrupted: the report of what was measured is {report}" in stderr
    doc = json.loads(report.read_text())
    assert doc["status"] == "interrupted"
    assert doc["failures"][-1] == "interrupted (Ctrl-C) during sweep c=1"
    assert doc["decode_probe"]["metrics"]["decode_tps"] > 0  # measured before Ctrl-C, kept


def test_quality_shows_live_progress_of_the_running_scenario(fake_lane, tmp_path, monkeypatch):
    """A scenario that streams for minutes moves on the display: elapsed, chunks and bytes streamed
    (counted by a relay between tool-eval-bench and the lane), not a frozen 'quality 0/15 TC-01'.
    The demo server answers a tool-calling turn with one short sentence: slow it down to watch it."""
    from sparkfleet.bench import quality as q

    monkeypatch.setattr(q, "TICK_S", 0.05)
    lane = fake_lane("--decode-tps", "20", "--prefill-tps", "100000000")
    settings = BenchSettings(
        **{**vars(BenchSettings.quick()), "quality": QualitySettings(scenarios=("TC-01",))}
    )
    rec = Recorder()
    run = run_bench(for_url(lane.url, tmp_path), settings, "t", progress=rec)
    assert run.quality is not None and run.quality.status == "ok", run.quality
    live = [label for label, _ in rec.labels if label.startswith("quality 0/1 done, TC-01 running · ")]
    assert live, rec.labels
    streamed = [int(m.group(1)) for label in live if (m := re.search(r"(\d+) chunks", label))]
    assert streamed and max(streamed) > 0 and streamed == sorted(streamed)  # it moves, never back
    assert all(label.endswith(" streamed") and " s, " in label for label in live)
    assert run.quality.argv[run.quality.argv.index("--base-url") + 1] == lane.url  # the lane, not the relay


def test_line_progress_repeats_a_long_scenario_now_and_then(capsys):
    from sparkfleet.cli.benchview import LineBenchProgress

    p = LineBenchProgress(every_s=0.0)
    p.step("quality 0/15 TC-01", 0)
    p.step("quality 0/15 TC-01 · 5 s, 10 chunks (1.2 kB) streamed", 0)
    p.step("quality 1/15 TC-02", 0)
    slow = LineBenchProgress(every_s=3600)
    slow.step("quality 0/15 TC-01", 0)
    slow.step("quality 0/15 TC-01 · 5 s, 10 chunks (1.2 kB) streamed", 0)
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["· quality 0/15 TC-01", "· quality 0/15 TC-01 · 5 s, 10 chunks (1.2 kB) streamed",
                     "· quality 1/15 TC-02", "· quality 0/15 TC-01"]  # fmt: skip
