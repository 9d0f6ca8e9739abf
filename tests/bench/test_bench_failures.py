"""A dropped stream or an HTTP error is a clear failure, and the report says so: never a number."""

from __future__ import annotations

import json

import pytest

from sparkfleet.bench.client import Endpoint
from sparkfleet.bench.report import key_metrics, write_report
from sparkfleet.bench.run import BenchSettings, run_bench
from sparkfleet.bench.sweep import SweepSettings, run_level
from sparkfleet.bench.target import for_url

pytestmark = pytest.mark.slow

QUICK = BenchSettings.quick()


def test_dropped_stream_fails_the_probe_and_the_report_says_so(fake_lane, tmp_path):
    # warmup (8 tokens) and smoke (1 token) fit in 12 chunks; the 64-token probe is cut off
    lane = fake_lane("--drop-after", "12", "--decode-tps", "5000", "--prefill-tps", "100000")
    run = run_bench(for_url(lane.url, tmp_path), QUICK, "dropped")
    assert run.status == "failed"
    assert run.decode_probe is not None and run.decode_probe.metrics.decode_tps is None
    assert "dropped" in run.decode_probe.metrics.error
    assert any(f.startswith("decode probe:") for f in run.failures)
    assert all(lv.aggregate_tps is None and lv.failed == lv.requests for lv in run.sweep)
    paths = write_report(run, tmp_path)
    doc = json.loads(paths.json.read_text())
    assert doc["status"] == "failed" and key_metrics(doc)["decode_tps"] is None
    markdown = paths.markdown.read_text()
    assert "**Status: FAILED**" in markdown and "stream ended without [DONE]" in markdown
    assert "decode: **" not in markdown  # no number printed for the failed probe
    # only what was measured is plotted: the pp row (1 token out) survived the drops, nothing else did
    from sparkfleet.bench.report.plots import build_figure

    measured = [r["test"][:2] for r in doc["table"] if r["tps_mean"] is not None]
    fig = build_figure(doc)
    panels = [a.get_title().split()[0] for a in fig.axes] if fig is not None else []
    assert panels == measured == ["pp"] and paths.png is not None


def test_http_errors_fail_the_run_at_warmup(fake_lane, tmp_path):
    lane = fake_lane("--error-rate", "1", "--fail-status", "500")
    run = run_bench(for_url(lane.url, tmp_path), QUICK, "errors")
    assert run.status == "failed" and run.warmup_error.startswith("HTTP 500")
    assert run.decode_probe is None and run.sweep == []
    markdown = write_report(run, tmp_path).markdown.read_text()
    assert "warmup: HTTP 500" in markdown


def test_a_sweep_level_with_any_failed_request_has_no_numbers(fake_lane):
    lane = fake_lane("--error-rate", "0.5", "--seed", "7", "--decode-tps", "5000")
    endpoint = Endpoint(lane.url, "m")
    prefixes = iter(range(100))
    level = run_level(endpoint, 4, SweepSettings((4,), 8, 16, 8), lambda: f"p{next(prefixes)}")
    assert 0 < level.failed < level.requests
    assert level.aggregate_tps is None and level.ttft_s is None and level.per_request_tps is None
    assert any("HTTP 500" in e for e in level.errors)


def test_sweep_sees_a_full_batch_queue_in_ttft_and_a_capped_aggregate(fake_lane):
    lane = fake_lane("--max-running", "2", "--decode-tps", "400", "--prefill-tps", "1000000")
    endpoint = Endpoint(lane.url, "m")
    prefixes = iter(range(100))
    level = run_level(endpoint, 4, SweepSettings((4,), 4, 16, 40), lambda: f"p{next(prefixes)}")
    assert level.ok and level.requests == 4
    assert level.ttft_s.p99 > 0.070  # two requests waited ~100 ms for a slot
    assert level.aggregate_tps < 2 * 400 * 1.05  # never more than two decoding at 400 tok/s
    assert abs(level.per_request_tps.p50 - 400) / 400 < 0.1


def test_a_server_still_booting_gives_a_failed_report_not_an_exception(fake_lane, tmp_path):
    lane = fake_lane("--boot-delay", "30", ready=False)
    run = run_bench(for_url(lane.url, tmp_path), QUICK, "booting")
    assert run.status == "failed" and "HTTP 503" in run.failures[0]
    assert "**Status: FAILED**" in write_report(run, tmp_path).markdown.read_text()
