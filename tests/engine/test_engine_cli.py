"""`sparkfleet smoke --url` and `bench --url` against the real engine, as an operator runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# an engine boot is minutes on 2 cores; under make test's xdist the modules using the session's
# `engine` share one worker, so it boots once
# serial with test_engine_bench: the session's one vLLM serves both, booted once in the serial pass
pytestmark = [
    pytest.mark.slow, pytest.mark.timeout(1800), pytest.mark.xdist_group("vllm_engine"), pytest.mark.serial,
]


def sparkfleet(*args: str, cwd: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "sparkfleet", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_smoke_on_a_model_that_cannot_do_sums_is_a_clean_shortfall(engine):
    """A random-weight model answers garbage: exit 1, each case failed with its reason, no traceback."""
    done = sparkfleet("smoke", "--url", engine.url, "--max-tokens", "24", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] is False and doc["model"] == engine.model.repo and len(doc["cases"]) == 2
    for case in doc["cases"]:
        assert not case["passed"] and case["finish_reason"] in ("length", "stop")
        assert case["problem"] and "recipe" not in case["problem"], case  # a --url run has no recipe
    assert "Traceback" not in done.stderr


def test_bench_url_quick_with_no_smoke_against_the_engine(engine, tmp_path):
    """`bench --url --quick --no-smoke`: every step runs, the report is written, exit 0."""
    out = tmp_path / "reports"
    args = ["bench", "--url", engine.url, "--quick", "--no-smoke", "--concurrency", "1,2", "--requests", "2"]
    done = sparkfleet(*args, "--out", str(out), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    doc = json.loads(Path(result["report"]["json"]).read_text())
    assert doc["status"] == "ok" and doc["smoke"] == [] and doc["model"] == engine.model.repo
    probe = doc["decode_probe"]["metrics"]
    assert probe["completion_tokens"] == doc["settings"]["probe"]["max_tokens"]
    assert probe["token_source"] == "continuous_usage" and probe["itl_basis"] == "per token"
    assert len(doc["ttft"]["samples"]) >= 3 and doc["client_rtt_s"] < doc["ttft"]["mean"]
    assert [lv["concurrency"] for lv in doc["sweep"]] == [1, 2]
