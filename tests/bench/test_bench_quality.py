"""tool-eval-bench: the exact invocation, parsing its JSON envelope, and a real run against a fake lane.

The envelope in data/ was written by tool-eval-bench 3.0.0 itself (`--short --json-file`) against the
demo server (raw logs trimmed). The demo server never calls tools, so its honest score is 0: the
end-to-end test checks that we run the pinned harness and carry its verdict, not a number we chose.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkfleet.bench import quality
from sparkfleet.bench.quality import QualitySettings, build_argv, parse_envelope, run_quality

pytestmark = pytest.mark.slow

ENVELOPE = Path(__file__).parent / "data" / "tool-eval-bench-3.0.0-envelope.json"


def test_argv_is_exact_and_holds_no_secret(tmp_path):
    argv = build_argv(
        "http://127.0.0.1:30000/v1",
        "deepseek-v4.1-flash",
        tmp_path / "r.json",
        tmp_path / "runs",
        QualitySettings(),
        python="/usr/bin/python3",
    )
    assert argv == [
        "/usr/bin/python3",
        "-m",
        "sparkfleet.bench.quality_deadline",  # tool-eval-bench, each request under the deadline
        "120",
        "run",
        "--base-url",
        "http://127.0.0.1:30000/v1",
        "--model",
        "deepseek-v4.1-flash",
        "--json-file",
        str(tmp_path / "r.json"),
        "--output-dir",
        str(tmp_path / "runs"),
        "--no-live",
        "--timeout",
        "120",
        "--short",
    ]
    picked = build_argv(
        "u", "m", tmp_path / "r", tmp_path / "o", QualitySettings(scenarios=("TC-01", "TC-07"))
    )
    assert picked[-3:] == ["--scenarios", "TC-01", "TC-07"] and "--short" not in picked
    assert "--api-key" not in argv


def test_parse_a_real_envelope():
    result = parse_envelope(json.loads(ENVELOPE.read_text()), "3.0.0", ["argv"])
    assert result.status == "ok" and result.tool_version == "3.0.0"
    assert (result.score, result.points, result.max_points, result.scenarios) == (0.0, 0, 30, 15)
    assert len(result.failed_scenarios) == 15 and result.failed_scenarios[0].scenario_id == "TC-01"
    assert result.failed_scenarios[0].summary.startswith("Did not cleanly route")


def test_parse_scores_and_an_error_envelope():
    doc = json.loads(ENVELOPE.read_text())
    doc["final_score"], doc["scores"]["total_points"], doc["scores"]["max_points"] = 92, 169, 184
    for r in doc["scores"]["scenario_results"]:
        r["status"] = "pass"
    doc["scores"]["scenario_results"][3]["status"] = "partial"
    result = parse_envelope(doc, "3.0.0", [])
    assert (result.score, result.points, result.max_points) == (92.0, 169, 184)
    assert [(f.scenario_id, f.status) for f in result.failed_scenarios] == [("TC-04", "partial")]
    failed = parse_envelope({"error": "Connection refused"}, "3.0.0", [])
    assert failed.status == "failed" and failed.score is None and "refused" in failed.error


def test_wrong_version_is_unavailable_not_a_score(monkeypatch):
    monkeypatch.setattr(quality, "installed_version", lambda: "2.7.1")
    result = run_quality("http://127.0.0.1:9/v1", "m", QualitySettings())
    assert result.status == "unavailable" and result.score is None and "pins 3.0.0" in result.error


@pytest.mark.skipif(
    quality.installed_version() != quality.PINNED_VERSION, reason="tool-eval-bench 3.0.0 not installed"
)
def test_real_run_against_the_fake_lane_with_an_api_key(fake_lane):
    lane = fake_lane("--decode-tps", "1000000", "--prefill-tps", "100000000", "--api-key", "sk-q-secret")
    result = run_quality(
        lane.url, "deepseek-v4.1-flash", QualitySettings(scenarios=("TC-11", "TC-01")), api_key="sk-q-secret"
    )
    assert result.status == "ok", result.error
    assert result.tool_version == "3.0.0" and result.scenarios == 2
    assert result.score == 0.0 and sorted(f.scenario_id for f in result.failed_scenarios) == [
        "TC-01",
        "TC-11",
    ]
    assert not any("sk-q-secret" in a for a in result.argv)


def test_unreachable_lane_is_a_failed_quality_run():
    result = run_quality("http://127.0.0.1:9/v1", "m", QualitySettings(scenarios=("TC-01",), timeout_s=60))
    assert result.status in ("failed", "unavailable") and result.score is None
