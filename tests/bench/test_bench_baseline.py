"""With no [bench] baseline declared, a lane's reports are held to the report that made its last
good generation good (promote raises the bar without a recipe edit); a lane with no good
generation yet (its first night) has nothing to fall behind: promote takes a passing bench as its
first good and `report compare --lane` says there is nothing to compare (exit 0)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from click.testing import CliRunner
from test_bench_gate import UP, _report

from sparkfleet.base.errors import ExitCode
from sparkfleet.bench.gate import baseline_of, judge
from sparkfleet.bench.target import BenchTarget, Thresholds
from sparkfleet.cli import main
from sparkfleet.demo.fleet import DEMO_LANE, write_demo_fleet
from sparkfleet.launch.generations import save, utc_id

LANE = "gen"


def _target(root: Path, lane: str = LANE) -> BenchTarget:
    return BenchTarget(url="http://127.0.0.1:1/v1", lane=lane, thresholds=Thresholds(),
                       reports_dir=root / "recipes" / lane / "reports")  # fmt: skip


def _good(root: Path, report: object, lane: str = LANE, t: float = UP - 7200) -> str:
    """A generation record promoted good by `report` (what promote writes, minimal)."""
    recipe = "[lane]\n"
    gid = utc_id(t)
    save(root, {"id": gid, "lane": lane, "created_at": t, "status": "ready", "good": True,
                "recipe_text": recipe, "recipe_sha256": hashlib.sha256(recipe.encode()).hexdigest(),
                "fleet_text": "", "promotion": {"bench_report": report, "promoted": True}})  # fmt: skip
    return gid


def test_a_first_night_promotes_a_passing_bench_and_says_so(tmp_path):
    target = _target(tmp_path)
    newest = _report(target.reports_dir, "2026-09-27_093000_b", mtime=UP + 20)
    verdict = judge(target, UP, root=tmp_path)
    assert verdict.passed and verdict.report == str(newest)
    assert verdict.gate == "first good generation (no [bench] baseline declared and no good generation yet)"
    assert not judge(target, UP).passed  # where the generations are unknown: never by accident


def test_later_nights_are_held_to_the_report_that_made_the_last_good_generation_good(tmp_path):
    target = _target(tmp_path)
    base = _report(target.reports_dir, "2026-09-27_080000_base", decode=35.0, mtime=UP - 3600)
    gid = _good(tmp_path, str(base))
    assert baseline_of(target, tmp_path).path == base
    _report(target.reports_dir, "2026-09-27_090000_slow", decode=20.0, mtime=UP + 5)
    slow = judge(target, UP, root=tmp_path)
    assert not slow.passed and any("decode" in r for r in slow.regressions), slow
    assert slow.gate == f"against 2026-09-27_080000_base, the report that made generation {gid} good"
    _report(target.reports_dir, "2026-09-27_093000_good", decode=35.5, mtime=UP + 9)
    assert judge(target, UP, root=tmp_path).passed


def test_report_compare_on_a_first_night_has_nothing_to_compare_and_exits_0(tmp_path):
    demo = write_demo_fleet(tmp_path, shard_bytes=16 * 1024)
    reports_dir = demo.root / "recipes" / DEMO_LANE / "reports"
    newest = _report(reports_dir, "2026-09-27_093000_bench", mtime=UP)
    args = ["--root", str(demo.root), "report", "compare", "--lane", DEMO_LANE]
    text = CliRunner().invoke(main, args)
    assert text.exit_code == ExitCode.OK, text.output
    assert f"nothing for {newest.stem} to fall behind; `sparkfleet promote {DEMO_LANE}`" in text.output
    doc = json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)
    assert doc["ok"] and doc["compared"] is False and doc["new"] == newest.stem
    _good(demo.root, str(newest), lane=DEMO_LANE)
    later = _report(reports_dir, "2026-09-28_093000_bench", decode=20.0, mtime=UP + 86400)
    regressed = CliRunner().invoke(main, args)
    assert regressed.exit_code == ExitCode.SHORTFALL, regressed.output  # held to the last good's report
    assert f"compare {newest.stem} → {later.stem}" in regressed.output
