"""Promote's bench gate decides in the core: which report counts, against which baseline, and why.

Reports are real files in a lane's reports folder; the gate is called as `generations.promote` calls
it (with the generation's start time only), with no CLI in between.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.bench.gate import GateVerdict, all_ranks_up, bench_gate, judge
from sparkfleet.bench.target import BenchTarget, Thresholds
from sparkfleet.launch.report import LaneStatus

SETTINGS = {
    "probe": {"prompt_tokens": 487, "max_tokens": 400},
    "pp": [512],
    "tg": [128],
    "depths": [0],
    "table_runs": 3,
    "sweep": {"levels": [1], "requests_per_level": 4, "prompt_tokens": 256, "max_tokens": 128},
    "quality": None,
    "smoke": True,
}


def _report(
    folder: Path, stem: str, *, decode: float = 35.0, status: str = "ok", mtime: float | None = None
) -> Path:
    """A bench report named like the writer names them (UTC time, then tag)."""
    doc = {
        "schema": "sparkfleet.bench/1",
        "status": status,
        "failures": [] if status == "ok" else ["decode probe: server went away"],
        "tag": stem.split("_", 2)[2],
        "created_utc": "2026-09-27T09:00:00Z",
        "url": "http://127.0.0.1:1/v1",
        "settings": SETTINGS,
        "decode_probe": {"metrics": {"decode_tps": decode, "ttft_s": 0.1}},
        "table": [{"test": "tg128", "depth": 0, "tps_mean": decode}],
        "sweep": [{"concurrency": 1, "aggregate_tps": decode}],
        "quality": None,
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.json"
    path.write_text(json.dumps(doc))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def _target(tmp_path: Path, baseline: str | None = None) -> BenchTarget:
    return BenchTarget(url="http://127.0.0.1:1/v1", lane="gen", reports_dir=tmp_path / "reports",
                       baseline=baseline, thresholds=Thresholds())  # fmt: skip


UP = 1_800_000_000.0  # when the generation came up


def test_no_report_since_the_generation_came_up_fails_and_says_what_to_run(tmp_path):
    target = _target(tmp_path)
    _report(target.reports_dir, "2026-09-27_090000_old", mtime=UP - 60)  # measured the previous generation
    verdict = judge(target, UP, first=True)
    assert verdict == GateVerdict(None, False, "no bench report since this generation came up",
                                  ["run sparkfleet bench gen"])  # fmt: skip


def test_the_newest_report_since_launch_counts_and_first_accepts_it_without_a_baseline(tmp_path):
    target = _target(tmp_path)
    _report(target.reports_dir, "2026-09-27_090000_a", mtime=UP + 10)
    newest = _report(target.reports_dir, "2026-09-27_093000_b", mtime=UP + 20)
    assert judge(target, UP, first=True) == (
        str(newest),
        True,
        "first good generation (no baseline declared yet)",
        [],
    )
    refused = judge(target, UP)  # no --first: a lane with no baseline is never promoted by accident
    assert not refused.passed and refused.regressions == ["set [bench] baseline or pass --first"]


def test_a_failed_report_never_passes_even_with_first(tmp_path):
    target = _target(tmp_path)
    failed = _report(target.reports_dir, "2026-09-27_090000_bad", status="failed", mtime=UP + 5)
    verdict = judge(target, UP, first=True)
    assert verdict.report == str(failed) and not verdict.passed and verdict.gate == "bench report failed"
    assert verdict.regressions == ["decode probe: server went away"]


def test_a_regression_against_the_baseline_is_named_and_a_good_run_passes(tmp_path):
    target = _target(tmp_path, baseline="2026-09-27_080000_base")
    _report(target.reports_dir, "2026-09-27_080000_base", decode=35.0, mtime=UP - 3600)
    slow = _report(target.reports_dir, "2026-09-27_090000_slow", decode=20.0, mtime=UP + 5)
    verdict = judge(target, UP)
    assert verdict.report == str(slow) and not verdict.passed
    assert verdict.gate == "against baseline 2026-09-27_080000_base"
    assert any("decode" in r for r in verdict.regressions), verdict.regressions
    good = _report(target.reports_dir, "2026-09-27_093000_good", decode=35.5, mtime=UP + 9)
    assert judge(target, UP) == (str(good), True, "against baseline 2026-09-27_080000_base", [])


def test_a_named_report_is_judged_even_if_older_and_a_missing_baseline_is_a_failed_gate(tmp_path):
    target = _target(tmp_path, baseline="2026-01-01_000000_gone")
    old = _report(target.reports_dir, "2026-09-27_090000_old", mtime=UP - 60)
    verdict = bench_gate(target, report_ref="2026-09-27_090000_old")(UP)  # as promote calls it
    assert verdict.report == str(old) and not verdict.passed
    assert (
        verdict.gate == "baseline 2026-01-01_000000_gone"
        and "2026-01-01_000000_gone" in verdict.regressions[0]
    )
    with pytest.raises(SparkfleetError, match="nope"):
        judge(target, UP, report_ref="nope")  # a named report that is not there: an error, not a verdict


def test_only_a_lane_with_every_rank_running_can_be_promoted():
    assert all_ranks_up(_status(running=2, expected=2))
    assert not all_ranks_up(_status(running=1, expected=2))
    assert not all_ranks_up(_status(running=0, expected=0))


def _status(running: int, expected: int) -> LaneStatus:
    return LaneStatus(
        weights="", lane="l", ok=running == expected, ranks=[], running=running, expected=expected,
        head="h", port=8000, endpoints=None,
    )
