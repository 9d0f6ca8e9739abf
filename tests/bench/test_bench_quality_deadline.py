"""The quality phase holds each request to `quality.request_timeout_s`, streaming included; the
bench prices its plan after the decode probe; the demo server answers a tool-calling turn at once.

tool-eval-bench's own `--timeout` bounds only the silence between streamed bytes: a lane that
streams without end (or 16,384 tokens at 50 tok/s) held one request for minutes under
`--timeout 120`. Here a server that streams forever is cut at the deadline, the scenario is
recorded as a timeout (left out of the score), and a run where every scenario timed out has no
score rather than a 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from sparkfleet.bench import quality
from sparkfleet.bench.estimate import duration, estimate, quality_left
from sparkfleet.bench.probes import DecodeProbe
from sparkfleet.bench.quality import QualitySettings, parse_envelope, run_quality
from sparkfleet.bench.run import BenchSettings, run_bench
from sparkfleet.bench.sweep import SweepSettings
from sparkfleet.bench.target import for_url
from sparkfleet.demo.openai_server import NO_TOOLS, answer_tokens

pytestmark = pytest.mark.slow

PINNED = pytest.mark.skipif(
    quality.installed_version() != quality.PINNED_VERSION, reason="tool-eval-bench 3.0.0 not installed"
)


@PINNED
def test_a_stream_without_end_is_cut_at_the_request_deadline(fake_lane):
    lane = fake_lane("--hostile", "endless")
    started = time.monotonic()
    result = run_quality(
        lane.url, "m", QualitySettings(scenarios=("TC-01", "TC-11"), request_timeout_s=2, timeout_s=90)
    )
    took = time.monotonic() - started
    assert took < 45, took  # two scenarios, one request each, 2 s apiece (plus the harness's start)
    assert [(f.scenario_id, f.failure_kind) for f in result.failed_scenarios] == [
        ("TC-01", "timeout"),
        ("TC-11", "timeout"),
    ]
    assert "2 s deadline" in result.failed_scenarios[0].summary
    assert result.status == "failed" and result.score is None  # all left out: no score, not 0
    assert "every scenario (2) ran past the request deadline" in result.error


def test_an_envelope_with_some_timeouts_keeps_its_score_and_names_them():
    from pathlib import Path

    doc = json.loads((Path(__file__).parent / "data" / "tool-eval-bench-3.0.0-envelope.json").read_text())
    doc["scores"]["scenario_results"][2]["failure_kind"] = "timeout"
    result = parse_envelope(doc, "3.0.0", [])
    assert result.status == "ok" and result.score == 0.0
    assert [f.scenario_id for f in result.failed_scenarios if f.failure_kind == "timeout"] == ["TC-03"]


def test_the_deadline_wrapper_refuses_a_deadline_that_never_expires():
    for bad in ("nan", "inf", "0", "-3", "soon"):
        proc = subprocess.run([sys.executable, "-m", "sparkfleet.bench.quality_deadline", bad, "run"],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert proc.returncode == 1 and "usage:" in proc.stderr and "Traceback" not in proc.stderr


def test_the_demo_server_answers_a_tool_calling_turn_at_once_and_honestly():
    body = {"messages": [{"role": "user", "content": "Weather in Berlin?"}], "max_tokens": 16384,
            "tools": [{"type": "function", "function": {"name": "get_weather"}}]}  # fmt: skip
    tokens, finish, thinking = answer_tokens(body, ["Weather", "in", "Berlin?"])
    assert " ".join(tokens) == NO_TOOLS and finish == "stop" and thinking == 0
    plain = {"messages": body["messages"], "max_tokens": 100}
    assert len(answer_tokens(plain, ["Weather"])[0]) == 100  # no tools offered: the word stream


def test_the_plan_is_priced_request_by_request():
    settings = BenchSettings(
        probe=DecodeProbe(487, 400), pp=(512,), tg=(128,), depths=(0, 1024), table_runs=2,
        sweep=SweepSettings(levels=(1, 4), requests_per_level=4, prompt_tokens=256, max_tokens=64),
        quality=QualitySettings(request_timeout_s=90),
    )  # fmt: skip
    est = estimate(settings, decode_tps=50.0, prefill_tps=2000.0, at_s=9.0)
    ttft = 3 * (487 / 2000)
    table = 2 * (512 / 2000) + 2 * (8 / 2000 + 127 / 50)  # depth 0: pp512, tg128
    table += 2 * (1024 / 2000 + 512 / 2000) + 2 * (1024 / 2000 + 127 / 50)  # depth 1024
    sweep = 4 * (256 / 2000 + 63 / 50) + 1 * (256 / 2000 + 63 / 50)  # c=1: 4 waves, c=4: one
    assert est.seconds == pytest.approx(ttft + table + sweep)
    assert (est.quality_scenarios, est.quality_request_s, est.at_s) == (15, 90, 9.0)
    assert "then quality: 15 scenarios, each request cut at 90 s, the whole at most 1 h 00 min" in est.line()
    assert duration(45) == "45 s" and duration(130) == "2 min 10 s" and duration(3900) == "1 h 05 min"
    assert quality_left(3, 15, 60.0) == "about 4 min 00 s left" and quality_left(15, 15, 60) == ""


@pytest.mark.serial  # a timing comparison: make test runs it alone
def test_the_estimate_is_close_to_what_the_rest_of_the_run_took(fake_lane, tmp_path):
    lane = fake_lane("--decode-tps", "100", "--prefill-tps", "5000")
    settings = BenchSettings(
        probe=DecodeProbe(256, 64), pp=(512,), tg=(64,), depths=(0, 1024), table_runs=2,
        sweep=SweepSettings(levels=(1, 2, 4), requests_per_level=4, prompt_tokens=128, max_tokens=64),
        quality=None,
    )  # fmt: skip
    run = run_bench(for_url(lane.url, tmp_path), settings, "est")
    assert run.status == "ok", run.failures
    rest = run.duration_s - run.estimate.at_s
    assert 0.8 <= rest / run.estimate.seconds <= 1.3, (rest, run.estimate)
