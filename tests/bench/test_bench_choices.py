"""The bench's settings from the operator's options over the full run's (or --quick's) defaults, and
the recipe's [bench.quality]: the CLI hands its options over, the core decides."""

from __future__ import annotations

from sparkfleet.bench.choices import BenchChoices, bench_settings
from sparkfleet.bench.quality import QualitySettings
from sparkfleet.bench.run import BenchSettings
from sparkfleet.bench.target import BenchTarget

LANE = BenchTarget(url="http://127.0.0.1:30000/v1", lane="l")


def test_an_option_given_overrides_the_quick_default_and_the_rest_stay_quick():
    settings, note = bench_settings(BenchChoices(quick=True, concurrency=(1, 4), pp=(256,)), LANE)
    quick = BenchSettings.quick()
    assert settings.sweep.levels == (1, 4) and settings.pp == (256,)
    assert (settings.tg, settings.depths, settings.probe) == (quick.tg, quick.depths, quick.probe)
    assert settings.sweep.requests_per_level == quick.sweep.requests_per_level
    assert settings.quality is None and settings.is_quick and note is None
    assert BenchChoices(quick=True).tag(None) == "quick" and BenchChoices().tag("mine") == "mine"


def test_the_recipes_quality_skip_is_said_unless_quality_is_asked_for():
    skipping = BenchTarget(
        url=LANE.url, lane="l", quality_skip="no tool calls", quality_request_timeout_s=900.0
    )
    settings, note = bench_settings(BenchChoices(), skipping)
    assert settings.quality is None
    assert note is not None and "no tool calls" in note and "--quality runs it anyway" in note
    asked, note = bench_settings(BenchChoices(quality=True, quality_scenarios="TC-01, TC-07"), skipping)
    assert note is None and asked.quality is not None
    assert asked.quality.scenarios == ("TC-01", "TC-07") and asked.quality.request_timeout_s == 900.0
    full, _ = bench_settings(BenchChoices(quality_full=True), LANE)
    assert full.quality is not None and not full.quality.short
    assert full.quality.request_timeout_s == QualitySettings.request_timeout_s
