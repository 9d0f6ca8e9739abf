"""The demo lane's bench: its quality phase is skipped, saying why (the recipe's [bench.quality]
skip: the demo server has no model), a full bench prices its plan and says what it took, and
`--quality` still runs the harness — each verdict as it lands, in seconds, not 15 x 328 s."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sparkfleet.cli import main
from sparkfleet.demo.fleet import DEMO_LANE, DEMO_QUALITY_SKIP
from support.demolane import served_demo

pytestmark = pytest.mark.xdist_group("local_lanes")  # the demo lane's ports: one module at a time

SMALL = ["--pp", "128", "--tg", "16", "--depths", "0", "--runs", "1", "--concurrency", "1",
         "--requests", "1", "--prompt-tokens", "64", "--max-tokens", "16"]  # fmt: skip


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    with served_demo(tmp_path_factory.mktemp("benchq")) as fleet:
        yield fleet


def _bench(fleet, *args: str):
    return CliRunner().invoke(main, ["--root", str(fleet.root), "bench", DEMO_LANE, *SMALL, *args])


def test_a_full_demo_bench_skips_quality_and_says_why(demo):
    result = _bench(demo, "--tag", "full")
    assert result.exit_code == 0, result.output
    said = (
        f"quality not run: {DEMO_QUALITY_SKIP} (the recipe's [bench.quality] skip; --quality runs it anyway)"
    )
    assert said in result.stdout
    assert "· estimate: about " in result.stderr and "  took " in result.stdout
    [report] = (demo.root / "recipes" / DEMO_LANE / "reports").glob("*_full.json")
    doc = json.loads(report.read_text())
    assert doc["quality"] is None and doc["quality_note"] == said
    assert doc["estimate"]["seconds"] > 0 and doc["estimate"]["quality_scenarios"] is None


def test_quality_on_the_demo_runs_when_asked_and_lands_each_verdict(demo):
    result = _bench(demo, "--quality", "--quality-scenarios", "TC-01,TC-11", "--tag", "asked")
    assert result.exit_code == 0, result.output
    assert "quality: 0/100 (0/4), 2 not passed" in result.stdout
    assert "TC-01 fail: Did not cleanly route the request to get_weather." in result.stdout
    verdicts = [ln for ln in result.stderr.splitlines() if ln.startswith("· quality TC-")]
    assert [v.split(":")[0] for v in verdicts] == ["· quality TC-01", "· quality TC-11"]
    assert verdicts[-1].endswith("· 2/2 done")
    [report] = (demo.root / "recipes" / DEMO_LANE / "reports").glob("*_asked.json")
    q = json.loads(report.read_text())["quality"]
    assert q["status"] == "ok" and q["duration_s"] < 60  # a short honest answer per turn, not 16,384 words
